"""The block-scaled matmul in the shape of Triton 3.6's tutorial 10 (`fixtures.blockscaled_tutorial`) compiles for
sm_100a through bwtriton's default pipeline (verify-tcgen05 on) with no error and no warning, and runs to the
float64 reference on the emulated B200.

At the tutorial's default K = 512 with 4 stages, Triton 3.6-3.8 peel stages that never run (their TMAs sit under
`mov.pred %p, 0`; 3.9 folds them away at K = 512 but keeps them at K = 768, 3 K tiles, on every release), and issues the scale copies under `(tid & 127) < 32` and the MMAs/commit under a branch on
the shfl-broadcast warp index: both are needed to see that no refill races a tcgen05.cp
(test_lit/verify_tcgen05/guards_*.ptx have the minimal forms).
"""
from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

import bwtriton  # noqa: E402
from bwtriton.verify import verify_ptx  # noqa: E402
from fixtures import blockscaled_tutorial as bt  # noqa: E402

#: (M, N, K): the tutorial's default K and K = 768 (fewer K tiles than stages) and its 8192 problem
SHAPES = [(8192, 8192, 512), (8192, 8192, 768), (8192, 8192, 8192)]


@pytest.mark.parametrize("fmt", sorted(bt.FORMATS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"K{s[2]}")
def test_tutorial_kernel_compiles_clean(fmt, shape):
    M, N, K = shape
    result = bwtriton.compile(bt.blockscaled_tma, **bt.compile_options(fmt, M=M, N=N, K=K))  # raises on an error
    ptx = result.asm["ptx"]
    assert "tcgen05.cp.cta_group::1.warpx4.32x128b" in ptx and "block_scale" in ptx
    assert "cp.async.bulk.tensor.5d" in ptx, "the scales must come through 5-D tensor descriptors"
    report = verify_ptx(ptx, shared_bytes=result.metadata.get("shared"),
                        tmem_columns=result.metadata.get("tmem_size"))
    assert [f.format() for f in report.findings if f.severity in ("error", "warning")] == []


def test_tutorial_kernel_at_k768_has_the_dead_and_guarded_pattern():
    """The fixture keeps exercising what the guard model is for: constant-false TMAs, copies guarded by the
    thread index, MMAs behind a branch on the shfl-broadcast warp index."""
    ptx = bwtriton.compile(bt.blockscaled_tma, **bt.compile_options("nvfp4", K=768)).asm["ptx"]
    dead = set(re.findall(r"mov\.pred\s+(%p\d+), 0;", ptx))
    assert any(re.search(rf"@{re.escape(p)} cp\.async\.bulk\.tensor", ptx) for p in dead)
    assert re.search(r"shfl\.sync\.idx\.b32\s+%r\d+, %r\d+, 0, 31, -1", ptx)
    assert re.search(r"and\.b32\s+%r\d+, %r\d+, 127;", ptx)


@pytest.mark.emulated
@pytest.mark.parametrize("fmt", sorted(bt.FORMATS))
def test_tutorial_kernel_emulated_matches_float64(fmt):
    """The same PTX the verifier passed, on the emulator (M=128, N=256, K=512: 2 K tiles, 4 stages)."""
    import bwtriton.emu as emu  # noqa: PLC0415 - the emulator is only needed by this test
    from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: PLC0415 - host descriptors for the launch

    M, N, K, BM, BN, BK = 128, 256, 512, 128, 256, 256
    vec, _ = bt.FORMATS[fmt]
    data = bt.make_inputs(fmt, M, N, K, seed=3)
    scale_dtype = torch.float8_e4m3fn if fmt == "nvfp4" else torch.uint8
    kernel = bwtriton.compile(bt.blockscaled_tma, **bt.compile_options(fmt, M=M, N=N, K=K, BM=BM, BN=BN, BK=BK))
    c = torch.zeros(M, N, dtype=torch.float32)
    box = [1, BM // 128, BK // vec // 4, 2, 256]
    emu.run(kernel, (1,), TensorDescriptor.from_tensor(data["a"], [BM, BK // 2]),
            TensorDescriptor.from_tensor(data["sa"].view(scale_dtype), box),
            TensorDescriptor.from_tensor(data["b"], [BN, BK // 2]),
            TensorDescriptor.from_tensor(data["sb"].view(scale_dtype), [1, BN // 128, BK // vec // 4, 2, 256]),
            TensorDescriptor.from_tensor(c, [BM, BN]))
    ref = data["ref"]
    # every product is exact in fp32 (e2m1 x power-of-two or 1.5x scales); only the fp32 sum of K terms rounds,
    # each addition by at most 2^-24 of the running magnitude
    bound = K * 2.0 ** -24 * data["ref_abs"] + 1e-6
    assert bool(((c.double() - ref).abs() <= bound).all())
    assert ref.abs().max().item() > 10, "the reference must not be trivially zero"
