"""Emulated twins of tests/language/test_language_quant.py's GPU tests: the in-kernel NVFP4/MX quantizers compiled for
sm_100a (where they use the native cvt.rn.satfinite.e2m1x2 / e4m3x2 conversions) and run on the emulated B200
must be bit-exact against the torch quantizers, like on the GPU. (They also pin the emulator's packed
`mul.f32x2`/`fma.rn.f32x2` lanes, which the quantizers' sm_100a PTX uses.)"""
from __future__ import annotations

import pytest

pytest.importorskip("torch")

from test_language_quant import (MX_CASES, NVFP4_CASES, check_e2m1_round, check_mx, check_nvfp4,  # noqa: E402
                                 check_unswizzle)

pytestmark = [pytest.mark.emulated, pytest.mark.usefixtures("emulated_b200_module")]


@pytest.mark.parametrize("case", NVFP4_CASES)
def test_nvfp4_bit_exact_emulated(case):
    assert check_nvfp4(case, "cpu") is None


@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8_e4m3", "mxfp8_e5m2"])
@pytest.mark.parametrize("case", MX_CASES)
def test_mx_bit_exact_emulated(fmt, case):
    assert check_mx(case, fmt, "cpu") is None


def test_unswizzle_5d_emulated():
    assert check_unswizzle("cpu") is None


def test_e2m1_round_emulated():
    assert check_e2m1_round("cpu") is None


def test_plain_number_scales_are_taken_emulated():
    """`quant_dequant_nvfp4_tile(x, 1.0)` and `dequantize_nvfp4_tile(q, s, 1.0)`: a Python number as S_enc / S_dec
    gives the e2m1 * scale values of `formats`' NVFP4 with an encode scale of 1, bit for bit."""
    import torch
    import triton
    import triton.language as tl

    from bwtriton import language as bl
    from bwtriton.formats.e2m1 import e2m1_decode, unpack_e2m1
    from bwtriton.formats.nvfp4 import quantize_nvfp4_with_encode_scale

    @triton.jit
    def unit_scales(x_ptr, qdq_ptr, deq_ptr, BM: tl.constexpr, BK: tl.constexpr):
        offs = tl.arange(0, BM)[:, None] * BK + tl.arange(0, BK)[None, :]
        x = tl.load(x_ptr + offs)
        tl.store(qdq_ptr + offs, bl.quant_dequant_nvfp4_tile(x, 1.0))
        q, s = bl.quantize_nvfp4_tile(x, 1.0)
        tl.store(deq_ptr + offs, bl.dequantize_nvfp4_tile(q, s, 1.0))

    x = (torch.randn(32, 64, generator=torch.Generator().manual_seed(5)) * 3).bfloat16()
    qdq, deq = torch.empty(32, 64), torch.empty(32, 64)
    unit_scales[(1,)](x, qdq, deq, BM=32, BK=64)
    ref_q = quantize_nvfp4_with_encode_scale(x.float(), torch.ones(1))
    ref = (e2m1_decode(unpack_e2m1(ref_q.data)).reshape(32, 4, 16) * ref_q.scales.float()[..., None]).reshape(32, 64)
    assert torch.equal(qdq, ref) and torch.equal(deq, ref)


def test_a_tile_k_that_is_not_a_multiple_of_the_block_is_named():
    """BK = 8 for NVFP4 (16-element blocks), 16 for MXFP4 (32): a compile error that names the rule and the fix."""
    import triton
    import triton.language as tl

    import bwtriton
    from bwtriton import language as bl
    from bwtriton.errors import CompileError

    @triton.jit
    def short_k(x_ptr, o_ptr, BK: tl.constexpr, MX: tl.constexpr):
        offs = tl.arange(0, 16)[:, None] * BK + tl.arange(0, BK)[None, :]
        x = tl.load(x_ptr + offs)
        if MX:
            y = bl.dequantize_mxfp8_tile(*bl.quantize_mxfp8_tile(x))
        else:
            y = bl.quant_dequant_nvfp4_tile(x, 1.0)
        tl.store(o_ptr + offs, y)

    for bk, mx in ((8, False), (16, True)):
        with pytest.raises(CompileError, match=r"K \(x.shape\[1\]\) must be a multiple of the format's block .*"
                                               r"make BLOCK_K one"):
            bwtriton.compile(short_k, signature={"x_ptr": "*bf16", "o_ptr": "*fp32"},
                             constexprs={"BK": bk, "MX": mx}, target="sm_100a")
