"""Numerics of the 2-CTA code `pair-ctas` produces, executed by bwtriton's sm_100a emulator (no Blackwell GPU
exists here): each cluster of two CTAs computes one 256-row tile with cta_group::2 MMAs, and the result must
match torch. Tolerance: operands are exact; fp32 accumulation in another order than float64 adds up to
K * 2^-24 * (|A| @ |B|^T) (matters where products cancel), and the fp16 output rounding half an ulp (2^-11
relative per element)."""
from __future__ import annotations

import pytest
import torch
from triton.tools.tensor_descriptor import TensorDescriptor

import bwtriton
from bwtriton.compat.cga import tma_bt_num_ctas2_compiles, tma_emulation_supported
import bwtriton.emu as emu
from bwtriton.examples.tma_matmul import matmul_tma_bt_kernel, tma_bt_spec

pytestmark = [pytest.mark.emulated,
              pytest.mark.skipif(not (tma_bt_num_ctas2_compiles() and tma_emulation_supported()),
                                 reason="the paired TMA matmul is not compiled (3.8) or not emulated (3.9) on this "
                                        "Triton; docs/two_cta.md, Triton versions")]


@pytest.mark.parametrize("dtype,block_k", [("fp16", 64), ("bf16", 64), ("fp8e4nv", 128)])
def test_paired_tma_matmul_matches_torch(dtype, block_k):
    res = bwtriton.compile(matmul_tma_bt_kernel, two_cta=True, **tma_bt_spec(dtype, block_k=block_k))
    assert "tcgen05.mma.cta_group::2" in res.asm["ptx"] and res.summary()["num_ctas"] == 2
    torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8e4nv": torch.float8_e4m3fn}[dtype]
    m, n, k = 512, 256, 2 * block_k
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen).to(torch_dtype)
    b = torch.randn(n, k, generator=gen).to(torch_dtype)
    c = torch.zeros(m, n, dtype=torch.float16)
    stats = emu.run(res, (m // 256, n // 128), TensorDescriptor.from_tensor(a, [256, block_k]),
                    TensorDescriptor.from_tensor(b, [128, block_k]), TensorDescriptor.from_tensor(c, [256, 128]), k)
    assert stats.ctas == 2 * (m // 256) * (n // 128)
    ref = a.double() @ b.double().T
    err = (c.double() - ref).abs()
    acc = k * 2.0 ** -24 * (a.double().abs() @ b.double().abs().T)
    assert (err <= ref.abs() * 2.0 ** -11 + acc).all(), f"max err {err.max().item()}"


def test_emulator_catches_a_pair_that_exits_without_its_peer():
    """The pass adds a cluster barrier before return so neither CTA exits while its peer may still issue pair
    instructions. The emulated kernel must still be correct with it; dropping the whole TMEM dealloc instead
    must be flagged as a leak (the emulator checks the 2-CTA protocol, not only numbers)."""
    res = bwtriton.compile(matmul_tma_bt_kernel, two_cta=True, **tma_bt_spec("fp16"))
    ptx = "\n".join(line for line in res.asm["ptx"].splitlines() if "tcgen05.dealloc" not in line)
    a = torch.randn(256, 128).half()
    b = torch.randn(128, 128).half()
    c = torch.zeros(256, 128).half()
    with pytest.raises(emu.EmulationError, match="(?i)leak|allocated"):
        emu.run(ptx, (1, 1), TensorDescriptor.from_tensor(a, [256, 64]), TensorDescriptor.from_tensor(b, [128, 64]),
                TensorDescriptor.from_tensor(c, [256, 128]), 128, num_warps=4, num_ctas=2,
                shared=res.metadata["shared"], tensordesc_meta=res.metadata["tensordesc_meta"])
