"""Weight-only NVFP4 GEMM for decode shapes: out[M, N] = x[M, K] (bf16) @ dequant(w_q)[N, K]^T, M <= 64.

With M this small the GEMM is bound by reading the weight, so the kernel is built to move as few bytes as
possible: 4 bits per weight plus one UE4M3 byte per 16 weights = 4.5 bits, against 16 for a bf16 weight, so the
ceiling is ~3.5x over a bf16 GEMM that streams its weight at the same bandwidth. To get there the dequantization
must stay cheaper than the memory traffic; it is done in registers with `dequant_nvfp4_bf16` (~4 instructions per
weight, exact), and the MMA is "swapped": the dequantized weight tile [BLOCK_N, BLOCK_K] is the register A operand
and x^T [BLOCK_K, 16..64] the small B operand, so no MMA work is wasted on padding M up to 64/128 rows.
SPLIT_K > 1 splits K over more CTAs (fp32 atomics) when N alone gives too few CTAs to saturate HBM.

Measured on the H200 (N = K = 8192, one run): 60-62 us for M = 4/16 (auto config, split 2), 81 us for M = 1
(split 1), against 45 us for cuBLAS bf16: 0.56-0.75x, far from the 2.5x goal. The kernel is issue-bound, not
memory-bound: ~600 GB/s of 4.8 TB/s. A variant that kept the nibble planes apart (two K/2 MMAs, no join) removed
17 of 18 layout conversions but measured slower (106-205 us): Triton then reads the bytes from shared memory one
at a time (ld.shared.b8) in the MMA operand layout. See the report of issue 4 for the next steps.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..errors import InputError
from .blockscaled import check_quantized, check_same_device, dequant_nvfp4_bf16, scale_offsets

__all__ = ["nvfp4_decode_matmul", "MAX_DECODE_M"]

MAX_DECODE_M = 64


@triton.jit
def nvfp4_decode_kernel(x_ptr, w_ptr, ws_ptr, out_ptr, alpha_ptr, M, N, K, stride_xm, stride_om,
                        SCALE_BLOCKED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.arange(0, BLOCK_M)
    m_mask = rm < M
    rkh = tl.arange(0, BLOCK_K // 2)
    rk = tl.arange(0, BLOCK_K)
    rks = tl.arange(0, BLOCK_K // 16)
    k_span = K // SPLIT_K
    k_lo = pid_k * k_span
    n_kb = K // 16
    w_rows = w_ptr + rn[:, None].to(tl.int64) * (K // 2)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for k in range(k_lo, k_lo + k_span, BLOCK_K):
        w = tl.load(w_rows + (k // 2 + rkh)[None, :])
        s = tl.load(ws_ptr + scale_offsets(rn[:, None], (k // 16 + rks)[None, :], n_kb, SCALE_BLOCKED))
        wd = dequant_nvfp4_bf16(w, s)
        xt = tl.load(x_ptr + rm[None, :] * stride_xm + (k + rk)[:, None], mask=m_mask[None, :], other=0.0)
        acc = tl.dot(wd, xt, acc)
    acc = acc * tl.load(alpha_ptr)
    ptrs = out_ptr + rm[None, :] * stride_om + rn[:, None]
    if SPLIT_K == 1:
        tl.store(ptrs, acc.to(out_ptr.dtype.element_ty), mask=m_mask[None, :])
    else:
        tl.atomic_add(ptrs, acc, mask=m_mask[None, :], sem="relaxed")


def decode_config(m: int, n: int, k: int, num_sms: int = 132) -> dict:
    """Launch config: BLOCK_N 64 weight rows per CTA; split K until there are >= 2 CTAs per SM."""
    block_m = max(16, triton.next_power_of_2(m))
    block_n, block_k = 64, 256
    split = 1
    while (n // block_n) * split < 2 * num_sms and k % (split * 2 * block_k) == 0 and split < 8:
        split *= 2
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split, "num_warps": 4,
            "num_stages": 4}


def nvfp4_decode_matmul(x: torch.Tensor, w_q, *, out_dtype: torch.dtype = torch.bfloat16,
                        config: dict | None = None) -> torch.Tensor:
    """out[M, N] = x @ dequant(w_q)^T for bf16 activations x [M, K] (M <= 64) and an NVFP4 weight w_q [N, K].

    The weight's global scale is applied in the epilogue. N must be a multiple of 64 and K of 256. `config`
    overrides the launch configuration (keys of `decode_config`)."""
    op = "nvfp4_decode_matmul"
    check_quantized(op, "w_q", w_q, ("nvfp4",))
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise InputError(f"{op}: x must be a 2-D torch.Tensor [M, K]; reshape batched activations to 2-D")
    if x.dtype != torch.bfloat16:
        raise InputError(f"{op}: x must be bfloat16, got {x.dtype}; convert with x.to(torch.bfloat16)")
    m, k = x.shape
    n, kw = w_q.shape
    if k != kw:
        raise InputError(f"{op}: K mismatch: x is [{m}, {k}] but w_q is [{n}, {kw}]")
    if not 1 <= m <= MAX_DECODE_M:
        raise InputError(f"{op}: M={m} is outside the decode range 1..{MAX_DECODE_M}; use nvfp4_linear or "
                         f"nvfp4_matmul for larger batches")
    if n % 64 or k % 256:
        raise InputError(f"{op}: N={n} must be a multiple of 64 and K={k} of 256; pad the weight")
    if x.stride(1) != 1:
        raise InputError(f"{op}: x must have unit stride along K; call x.contiguous()")
    if out_dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise InputError(f"{op}: out_dtype must be bfloat16, float16 or float32, got {out_dtype}")
    device = check_same_device(op, {"x": x, "w_q.data": w_q.data, "w_q.scales": w_q.scales})
    props = torch.cuda.get_device_properties(device)
    cfg = dict(decode_config(m, n, k, props.multi_processor_count), **(config or {}))
    split = cfg["SPLIT_K"]
    out = (torch.zeros if split > 1 else torch.empty)((m, n), dtype=torch.float32 if split > 1 else out_dtype,
                                                       device=device)
    alpha = w_q.global_scale.to(device=device, dtype=torch.float32).reshape(1)
    grid = (n // cfg["BLOCK_N"], split)
    nvfp4_decode_kernel[grid](x, w_q.data, w_q.scales, out, alpha, m, n, k, x.stride(0), out.stride(0),
                              SCALE_BLOCKED=w_q.scale_layout == "blocked_128x4", **cfg)
    return out.to(out_dtype) if split > 1 else out
