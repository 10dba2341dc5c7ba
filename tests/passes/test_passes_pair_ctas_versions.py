"""`two_cta=True` on every supported Triton: from 3.7 on Triton's num_ctas=2 layouts broadcast operand B to both
CTAs, and `pair-ctas` splits B along N itself (lib_passes/pair_ctas/b_split.py). Each test runs on the installed
Triton (run this file in each release's environment). Numerics: operands are exact in fp16/bf16, fp32
accumulation in another order than float64 adds up to K * 2^-24 * (|A| @ |B|), and the output rounding half an ulp
(2^-11 relative for fp16, 2^-8 for bf16)."""
from __future__ import annotations

import re

import pytest
import torch
from triton.tools.tensor_descriptor import TensorDescriptor

import bwtriton
import bwtriton.emu as emu
from bwtriton.compat.cga import tma_bt_num_ctas2_compiles, tma_emulation_supported
from bwtriton.examples.matmul import matmul_constexprs, matmul_kernel, matmul_signature
from bwtriton.examples.tma_matmul import matmul_tma_bt_kernel, tma_bt_spec
from bwtriton.mlir import parse_aliases
from bwtriton.mlir.encodings import cga_split
from bwtriton.mlir.mma import find_mma_lines
from bwtriton.passes.pair_ctas.b_split import BSplitError, split_b

ULP = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}
TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _b_split_in(ttgir: str) -> set[tuple[int, ...]]:
    """CGA splits of the B operand of every tcgen05 MMA of a printed TTGIR module."""
    aliases = parse_aliases(ttgir)
    return {cga_split(aliases[ln.b.encoding]) for ln in find_mma_lines(ttgir)}


@pytest.fixture(scope="module")
def paired_pointer():
    return bwtriton.compile(matmul_kernel, signature=matmul_signature("fp16"),
                            constexprs=matmul_constexprs(256, 128, 64), two_cta=True)


def test_pointer_matmul_is_paired_with_b_split_on_n(paired_pointer):
    ptx = paired_pointer.asm["ptx"]
    assert len(re.findall(r"tcgen05\.mma\.cta_group::2\.kind::f16", ptx)) >= 2
    assert "tcgen05.mma.cta_group::1" not in ptx
    assert _b_split_in(paired_pointer.asm["ttgir"]) == {(1, 2)}, "each CTA must hold half of B's columns"
    assert paired_pointer.reports["verify-tcgen05"]["counts"]["error"] == 0
    assert paired_pointer.reports["verify-tcgen05"]["counts"]["warning"] == 0


@pytest.mark.emulated
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_pointer_matmul_paired_matches_float64(dtype):
    res = bwtriton.compile(matmul_kernel, signature=matmul_signature(dtype),
                           constexprs=matmul_constexprs(256, 128, 64), two_cta=True)
    # 10 K steps with 3 stages: loop MMAs read tiles the peer loaded after the first MMA (a lowering that syncs
    # the pair only before the first MMA, as Triton 3.9's, fails here in the emulator)
    m, n, k = 512, 128, 640
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(m, k, generator=gen).to(TORCH[dtype])
    b = torch.randn(k, n, generator=gen).to(TORCH[dtype])
    c = torch.zeros(m, n, dtype=TORCH[dtype])
    stats = emu.run(res, (m // 256, n // 128), a, b, c, m, n, k, a.stride(0), b.stride(0), c.stride(0))
    assert stats.ctas == 2 * (m // 256) * (n // 128)
    ref = a.double() @ b.double()
    err = (c.double() - ref).abs()
    tol = ref.abs() * ULP[dtype] + k * 2.0 ** -24 * (a.double().abs() @ b.double().abs())
    assert (err <= tol).all(), f"max err {err.max().item()}"


@pytest.mark.skipif(not tma_bt_num_ctas2_compiles(), reason="this Triton's make_ttgir rejects the TMA b.T matmul "
                    "at num_ctas=2 before any bwtriton pass runs (docs/two_cta.md, Triton versions)")
def test_tma_matmul_is_paired_and_verifies():
    res = bwtriton.compile(matmul_tma_bt_kernel, two_cta=True, **tma_bt_spec("fp16", block_k=64))
    ptx = res.asm["ptx"]
    assert "tcgen05.mma.cta_group::2" in ptx and "tcgen05.mma.cta_group::1" not in ptx
    assert _b_split_in(res.asm["ttgir"]) == {(1, 2)}
    assert res.reports["verify-tcgen05"]["counts"]["error"] == 0
    # per CTA: A's 128 x 64 half plus B's 64 x 64 half (fp16) complete on each stage's mbarrier
    expects = {int(v) for v in re.findall(r"ttng\.barrier_expect %[\w.]+, (\d+),", res.asm["ttgir"])}
    assert expects == {(128 * 64 + 64 * 64) * 2}


@pytest.mark.emulated
@pytest.mark.skipif(not (tma_bt_num_ctas2_compiles() and tma_emulation_supported()),
                    reason="TMA matmul at num_ctas=2 not compiled or not emulated on this Triton")
def test_tma_matmul_paired_matches_float64():
    res = bwtriton.compile(matmul_tma_bt_kernel, two_cta=True, **tma_bt_spec("fp16", block_k=64))
    m, n, k = 256, 128, 640
    gen = torch.Generator().manual_seed(2)
    a, b = torch.randn(m, k, generator=gen).half(), torch.randn(n, k, generator=gen).half()
    c = torch.zeros(m, n, dtype=torch.float16)
    emu.run(res, (m // 256, n // 128), TensorDescriptor.from_tensor(a, [256, 64]),
            TensorDescriptor.from_tensor(b, [128, 64]), TensorDescriptor.from_tensor(c, [256, 128]), k)
    ref = a.double() @ b.double().T
    err = (c.double() - ref).abs()
    assert (err <= ref.abs() * ULP["fp16"] + k * 2.0 ** -24 * (a.double().abs() @ b.double().abs().T)).all()


# Hand-written TTGIR in the 3.7+ form: B broadcast ([[0, 0]]), its TMA on the same mbarrier as A's.
_BROADCAST_B = """#shared = #ttg.nvmma_shared<{swizzlingByteWidth = 128, transposed = false, elementBitWidth = 16, CGALayout = [[1, 0]]}>
#shared1 = #ttg.nvmma_shared<{swizzlingByteWidth = 128, transposed = false, elementBitWidth = 16, CGALayout = [[0, 0]]}>
#shared2 = #ttg.swizzled_shared<{vec = 1, perPhase = 1, maxPhase = 1, order = [0], CGALayout = [[1]]}>
#shared3 = #ttg.nvmma_shared<{swizzlingByteWidth = 128, transposed = true, elementBitWidth = 16, CGALayout = [[0, 0]]}>
#smem = #ttg.shared_memory
#tmem = #ttng.tensor_memory_encoding<blockM = 128, blockN = 128, colStride = 1, CGALayout = [[1, 0]]>
module attributes {"ttg.num-ctas" = 2 : i32} {
  tt.func public @k(%a_desc: !tt.tensordesc<256x64xf16, #shared>, %b_desc: !tt.tensordesc<128x64xf16, #shared1>) {
    %c0 = arith.constant 0 : i32
    %t = arith.constant true
    %acc = ttng.tmem_alloc : () -> !ttg.memdesc<256x128xf32, #tmem, #ttng.tensor_memory, mutable>
    %bar = ttg.local_alloc : () -> !ttg.memdesc<2xi64, #shared2, #smem, mutable>
    %a = ttg.local_alloc : () -> !ttg.memdesc<256x64xf16, #shared, #smem, mutable>
    %b = ttg.local_alloc : () -> !ttg.memdesc<128x64xf16, #shared1, #smem, mutable>
    ttng.barrier_expect %bar, 32768, %t : !ttg.memdesc<2xi64, #shared2, #smem, mutable>
    ttng.async_tma_copy_global_to_local %a_desc[%c0, %c0] %a, %bar, %t : !tt.tensordesc<256x64xf16, #shared>, !ttg.memdesc<2xi64, #shared2, #smem, mutable> -> !ttg.memdesc<256x64xf16, #shared, #smem, mutable>
    ttng.async_tma_copy_global_to_local %b_desc[%c0, %c0] %b, %bar, %t : !tt.tensordesc<128x64xf16, #shared1>, !ttg.memdesc<2xi64, #shared2, #smem, mutable> -> !ttg.memdesc<128x64xf16, #shared1, #smem, mutable>
    %bt = ttg.memdesc_trans %b {order = array<i32: 1, 0>} : !ttg.memdesc<128x64xf16, #shared1, #smem, mutable> -> !ttg.memdesc<64x128xf16, #shared3, #smem, mutable>
    ttng.tc_gen5_mma %a, %bt, %acc, %t, %t : !ttg.memdesc<256x64xf16, #shared, #smem, mutable>, !ttg.memdesc<64x128xf16, #shared3, #smem, mutable>, !ttg.memdesc<256x128xf32, #tmem, #ttng.tensor_memory, mutable>
    tt.return
  }
}
"""


def test_split_b_follows_the_transpose_and_rescales_the_expected_bytes():
    out = split_b(_BROADCAST_B, find_mma_lines(_BROADCAST_B))
    aliases = parse_aliases(out.text)
    assert cga_split(aliases["#shared3"]) == (1, 2)      # the MMA's [K, N] view: N is dim 1
    assert cga_split(aliases["#shared1"]) == (2, 1)      # the TMA tile [N, K] (and its descriptor): N is dim 0
    assert cga_split(aliases["#shared"]) == (2, 1)       # A untouched
    # 128 x 64 fp16 of A (16384) + half of B's 128 x 64 fp16 (8192) per CTA
    assert "ttng.barrier_expect %bar, 24576, %t" in out.text


def test_split_b_refuses_a_layout_shared_with_a():
    text = _BROADCAST_B.replace("#shared3, #smem", "#shared, #smem")
    with pytest.raises(BSplitError, match="carries both A and B"):
        split_b(text, find_mma_lines(text))
