"""gemlite (pip `gemlite`, pure Triton) weight-only NVFP4 and MXFP4 layers on this GPU under `bwtriton.enable()`,
against gemlite's own dequantization (`WeightQuantizerMXFP.dequantize`) in float64.

Its NVFP4 layer (`gemlite.helper.A16W4_NVFP`) calls `tl.dot_scaled(x_bf16, ones_ue4m3, "bf16", W_e2m1,
scales_ue4m3, "e2m1")`: a form Triton 3.6 stops on (`PassManager::run failed` in accelerate-matmul) and
`lower-dot-scaled-portable` lowers (the constant-ones activation scale is dropped: one bf16 MMA). Its MXFP4 layer
(`A16W4_MXFP`) passes no activation scale (bf16 x e2m1/e8m0, k-packed), which Triton lowers itself; there plain
Triton and bwtriton must agree bit for bit.

Bound: the dequantized weights reach the MMA exactly, so what remains is fp32 accumulation (K * 2^-23 relative
to |x| @ |W|), gemlite's fp32 meta-scale multiply (NVFP4), rounding the output to bf16 (2^-9 of |ref|, doubled
for margin) and, for split-K configs, one bf16 rounding per atomically added partial (2 * 2^-9 of |x| @ |W|).
Skipped without CUDA or without gemlite (its import allocates CUDA tensors, so it cannot load on a CPU build).
"""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (gemlite allocates CUDA tensors at import)", allow_module_level=True)
gemlite = pytest.importorskip("gemlite")

import bwtriton  # noqa: E402

#: (M, K, N): M = 1 and 16 take gemlite's GEMM_SPLITK kernel for MX types, M >= 64 its GEMM kernel
SHAPES = [(1, 1024, 512), (16, 2048, 1024), (128, 1024, 2048)]
SPLIT_K_ROUNDINGS = 2  # the largest SPLIT_K among gemlite's default configs


def _quantized_weights(kind: str, n: int, k: int, gen: torch.Generator):
    """E2M1 codes [N, K] (gemlite's fp4 index order is the E2M1 code order) and scales in gemlite's inputs."""
    codes = torch.randint(0, 16, (n, k), dtype=torch.uint8, generator=gen)
    if kind == "nvfp4":  # UE4M3 scales 0.25..7.5 (codes 0x28..0x4F), meta scale as a calibrated layer has
        scales = torch.randint(0x28, 0x50, (n, k // 16), dtype=torch.uint8, generator=gen).view(torch.float8_e4m3fn)
        return codes, scales, torch.tensor(448.0 / 6.0)
    exps = torch.randint(-6, 3, (n, k // 32), generator=gen).float()
    return codes, torch.pow(2.0, exps), None


def build_layer(kind: str, n: int, k: int, gen: torch.Generator):
    """(gemlite layer, float64 W [N, K] from gemlite's own dequantize)."""
    from gemlite.helper import A16W4_MXFP, A16W4_NVFP
    from gemlite.quant_utils import WeightQuantizerMXFP
    codes, scales, meta = _quantized_weights(kind, n, k, gen)
    deq = WeightQuantizerMXFP(compute_dtype=torch.float32, device="cuda:0")
    if kind == "nvfp4":
        layer = A16W4_NVFP(dtype=torch.bfloat16).from_weights(codes.cuda(), scales=scales.cuda(),
                                                              meta_scale=meta.cuda())
        w = deq.dequantize(codes.cuda(), scales.cuda().float().reshape(-1, 1), shape=(n, k), dtype=torch.float64,
                           meta_scales=1.0 / meta.double().cuda())
    else:
        layer = A16W4_MXFP(dtype=torch.bfloat16).from_weights(codes.cuda(), scales.cuda())
        w = deq.dequantize(codes.cuda(), scales.cuda().reshape(-1, 1), shape=(n, k), dtype=torch.float64)
    return layer, w.double()


def _check(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> dict:
    ref = x.double() @ w.T
    mag = x.double().abs() @ w.abs().T
    k = x.shape[1]
    bound = 2.0 ** -8 * ref.abs() + (SPLIT_K_ROUNDINGS * 2.0 ** -9 + k * 2.0 ** -23) * mag + 1e-30
    err = (out.double() - ref).abs()
    stats = {"max_abs": err.max().item(), "max_rel_to_bound": (err / bound).max().item(),
             "rel_fro": (err.norm() / ref.norm()).item()}
    assert (err <= bound).all(), stats
    assert stats["rel_fro"] <= 2.0 ** -8, stats  # a bf16-level result overall
    return stats


@pytest.fixture(autouse=True)
def _few_configs():
    from gemlite.triton_kernels.config import set_autotune
    set_autotune("default")  # gemlite's two default configs per kernel, not its autotuning sweep
    yield


@pytest.mark.parametrize("kind", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in SHAPES])
def test_gemlite_layer_matches_its_dequantized_reference_under_bwtriton(kind, shape):
    m, k, n = shape
    gen = torch.Generator().manual_seed(m + k + n)
    layer, w = build_layer(kind, n, k, gen)
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
    with bwtriton.enable():
        out = layer(x)
    torch.cuda.synchronize()
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    stats = _check(out, x, w)
    print(f"GEMLITE {kind} {m}x{k}x{n} bwtriton {stats}")


@pytest.mark.parametrize("kind", ["nvfp4", "mxfp4"])
def test_plain_triton_outcome_on_gemlite_layers(kind):
    """NVFP4: plain Triton 3.6 cannot compile gemlite's kernel. MXFP4: it can, and bwtriton gives the same bits."""
    m, k, n = SHAPES[-1]
    gen = torch.Generator().manual_seed(99)
    layer, w = build_layer(kind, n, k, gen)
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
    with bwtriton.enable():
        ours = layer(x).clone()
    try:
        plain = layer(x)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - whatever Triton raises is the recorded outcome
        print(f"GEMLITE {kind} plain Triton fails: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        assert kind == "nvfp4" and "PassManager::run failed" in str(exc)
        return
    print(f"GEMLITE {kind} plain Triton runs; equal to bwtriton: {torch.equal(plain, ours)}")
    assert kind == "mxfp4", "plain Triton compiled gemlite's NVFP4 kernel: the pass would no longer be needed"
    assert torch.equal(plain, ours)
