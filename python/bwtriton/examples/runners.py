"""Launch the example kernels on the current GPU and check them against torch (used by `bwtriton demo` and the
GPU tests). Each runner returns a one-line result and raises `AssertionError` on a numerical mismatch."""
from __future__ import annotations

import torch

from bwtriton.formats import quantize_mxfp4, quantize_nvfp4  # absolute: this file is also loaded by path


def _check(out: torch.Tensor, ref: torch.Tensor, rel_tol: float, what: str, atol: float = 0.0) -> str:
    err = (out.float() - ref).abs().max().item()
    scale = ref.abs().max().item() or 1.0
    tol = rel_tol * scale + atol
    if not err <= tol:
        raise AssertionError(f"{what}: max abs error {err:.3g} > {rel_tol:g} x max|ref| ({scale:.3g}) + {atol:.3g}")
    return f"ok (max abs err {err:.3g}, {err / scale:.2e} of max|ref|, tol {tol:.3g})"


def run_matmul(dtype: torch.dtype, m: int = 512, n: int = 512, k: int = 1024, block_k: int = 64) -> str:
    """C = A @ B with `examples.matmul.matmul_kernel` vs a float64 torch reference.

    Tolerance: operands are exact in fp32, accumulation is fp32 (error ~ sqrt(K) * 2^-24 relative, negligible),
    and the output is rounded once to the output type: 2^-8 relative for bf16, 2^-11 for fp16; we allow 2 ulps.
    fp8 on Hopper: wgmma accumulates fp8 products with a reduced-precision adder (about 14 mantissa bits) that
    Triton promotes to fp32 every 32 products along K, so add (K/32) * 2^-14 * max(|A| @ |B|).
    """
    import triton
    from .matmul import matmul_kernel  # heavy: imports Triton
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", generator=gen).to(dtype)
    b = torch.randn(k, n, device="cuda", generator=gen).to(dtype)
    out_dtype = torch.float16 if dtype.itemsize == 1 else dtype
    c = torch.empty(m, n, device="cuda", dtype=out_dtype)
    grid = (triton.cdiv(m, 128), triton.cdiv(n, 128))
    matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), 1, b.stride(0), 1, c.stride(0), 1,
                        BLOCK_M=128, BLOCK_N=128, BLOCK_K=block_k)
    ref = a.double() @ b.double()
    ulp = 2.0 ** -8 if out_dtype == torch.bfloat16 else 2.0 ** -11
    atol = 0.0
    if dtype.itemsize == 1 and torch.cuda.get_device_capability()[0] == 9:
        atol = (k / 32) * 2.0 ** -14 * (a.double().abs() @ b.double().abs()).max().item()
    return _check(c, ref, 2 * ulp, f"matmul {dtype}", atol)


def run_fp4_scaled(kind: str, m: int = 256, n: int = 256, k: int = 512) -> str:
    """`examples.scaled` NVFP4/MXFP4 dot_scaled vs torch on the dequantized operands (float64).

    The product of dequantized values is computed by the tensor core exactly and accumulated in fp32, so the only
    error is fp32 accumulation: K * 2^-24 relative to the sum of |products|; 1e-5 of max|ref| covers it.
    On Hopper, NVFP4 goes through bwtriton's `lower-dot-scaled-portable` pass (upstream Triton 3.6 crashes there).
    """
    from .scaled import fp4_scaled_matmul_kernel  # heavy: imports Triton
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(m, k, device="cuda", generator=gen)
    w = torch.randn(n, k, device="cuda", generator=gen)
    quant = quantize_nvfp4 if kind == "nvfp4" else quantize_mxfp4
    aq, bq = quant(x), quant(w)
    a_s, b_s = (aq.scales, bq.scales) if kind == "nvfp4" else (aq.scales_u8, bq.scales_u8)
    c = torch.empty(m, n, device="cuda", dtype=torch.float32)
    vec = aq.block_size
    fp4_scaled_matmul_kernel[(m // 128, n // 128)](
        aq.data, bq.data, a_s, b_s, c, m, n, k, aq.data.stride(0), bq.data.stride(0), c.stride(0),
        a_s.stride(0), b_s.stride(0), VEC=vec, BLOCK_M=128, BLOCK_N=128, BLOCK_K=128)
    # The kernel applies block scales only; global decode scales (NVFP4) multiply the result afterwards.
    deq = lambda q: q.dequantize(torch.float64) / (q.global_scale.double() if q.global_scale is not None else 1)  # noqa: E731
    ref = deq(aq) @ deq(bq).T
    return _check(c, ref, 1e-5, f"dot_scaled {kind}")
