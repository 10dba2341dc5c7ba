"""Exact NVFP4 -> bf16 dequantization kernels, for the paths that feed bf16 tensor cores instead of an NVFP4 MMA.

The identity they rest on: an NVFP4 element is e2m1 * e4m3 * S_dec. The first product is exact in bf16 (a 2-bit
by a 4-bit significand needs at most 6 of bf16's 8 bits, and |e2m1 * e4m3| lies in [2^-10, 2688], inside bf16's
normal range), so dequantizing *without* the fp32 global decode scale S_dec loses nothing; S_dec is applied to
the fp32 GEMM result instead, exactly where `tl.dot_scaled` kernels apply it (alpha = S_dec(a) * S_dec(b)).
A bf16 x bf16 product is exact in fp32, so a bf16 GEMM on these values differs from the block-scaled MMA only
in the fp32 accumulation order.

* `dequant_nvfp4_bf16_kernel`: a stored NVFP4 tensor (plain or 128x4-blocked scales) -> bf16 [R, K]. Used by
  `nvfp4_matmul` on targets without a native block-scaled MMA for large shapes: dequantizing both operands costs
  O((M + N) K) bytes against O(M N K) MMA work, and the bf16 GEMM (`kernels.matmul`) runs near wgmma peak.
* `quant_dequant_nvfp4_kernel`: bf16 activations -> NVFP4 (the recipe of `formats.quantize_nvfp4`, via
  `language.quant_dequant_nvfp4_tile`) -> bf16 again in registers, plus the epilogue scale alpha = S_dec(x) * S_dec(w)
  written by program (0, 0). The small-M linear feeds the result to the weight-only decode kernels.
* `amax_encode_scale_kernel`: S_enc = min(2688 / amax(x), FLT_MAX) (1 when amax is 0) in one single-CTA launch,
  bit-equal to `formats.nvfp4_global_encode_scale`, no host sync; for activations small enough that one CTA reads
  them in a few microseconds (`DEVICE_AMAX_MAX_ELEMENTS`). Its body, `encode_scale_from_amax`, also runs inside
  the quantizing kernels (`S_ENC_FROM_AMAX`) for x of at most `IN_KERNEL_AMAX_MAX_ELEMENTS`, saving that launch.

The two small-M kernels use only plain Triton ops (no inline PTX), so they also run under TRITON_INTERPRET=1.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..language.quant import quant_dequant_nvfp4_tile
from ._common import dequant_nvfp4_bf16, scale_offsets
from ._launcher import CachedLauncher

__all__ = ["dequantize_nvfp4_bf16", "quant_dequant_nvfp4", "device_encode_scale", "DEVICE_AMAX_MAX_ELEMENTS",
           "IN_KERNEL_AMAX_MAX_ELEMENTS", "amax_in_kernel"]

#: Largest activation (elements) whose amax the single-CTA kernel computes. One SM streams ~32 KiB per loop step
#: (one HBM latency, ~1 us), so 2^17 bf16 elements (256 KiB, e.g. M = 32, K = 4096) take ~8 steps; above that
#: torch's multi-CTA reduction is faster on the GPU and its few launches' host cost is small next to the GEMM.
DEVICE_AMAX_MAX_ELEMENTS = 1 << 17
#: Largest activation (elements) whose amax every program of the consuming kernel recomputes itself instead of a
#: separate amax launch: 2^14 bf16 elements are 32 KiB, re-read from L2 by each program in well under a
#: microsecond, against one more launch (a few us of host time and ~2 us of launch latency on the GPU).
IN_KERNEL_AMAX_MAX_ELEMENTS = 1 << 14

_FLT_MAX = tl.constexpr(3.4028234663852886e38)
_NVFP4_MAX = tl.constexpr(2688.0)  # 448 (E4M3 max) * 6 (E2M1 max)


@triton.jit
def dequant_nvfp4_bf16_kernel(q_ptr, s_ptr, out_ptr, R, K, SCALE_BLOCKED: tl.constexpr, BLOCK_R: tl.constexpr,
                              BLOCK_K: tl.constexpr):
    """packed uint8 [R, K/2] + fp8e4nv scales -> bf16 [R, K] = e2m1 * scale (no global scale). R % BLOCK_R and
    K % BLOCK_K are 0 (the caller checks)."""
    rr = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    kh = tl.program_id(1) * (BLOCK_K // 2) + tl.arange(0, BLOCK_K // 2)
    kb = tl.program_id(1) * (BLOCK_K // 16) + tl.arange(0, BLOCK_K // 16)
    q = tl.load(q_ptr + rr[:, None].to(tl.int64) * (K // 2) + kh[None, :])
    s = tl.load(s_ptr + scale_offsets(rr[:, None], kb[None, :], K // 16, SCALE_BLOCKED))
    rk = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    tl.store(out_ptr + rr[:, None].to(tl.int64) * K + rk[None, :], dequant_nvfp4_bf16(q, s))


@triton.jit
def encode_scale_from_amax(x_ptr, M, K, stride_xm, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """amax == 0 ? 1 : min(div_rn(2688, amax), FLT_MAX) over bf16 x [M, K], read by this program alone."""
    rm0 = tl.arange(0, BLOCK_M)
    rk0 = tl.arange(0, BLOCK_K)
    best = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
    # while loops, not range(): Triton 3.6's interpreter cannot take a runtime range bound with numpy >= 2.
    m = 0
    while m < M:
        rm = m + rm0
        k = 0
        while k < K:
            rk = k + rk0
            mask = (rm[:, None] < M) & (rk[None, :] < K)
            x = tl.load(x_ptr + rm[:, None].to(tl.int64) * stride_xm + rk[None, :], mask=mask, other=0.0)
            best = tl.maximum(best, tl.abs(x.to(tl.float32)))
            k += BLOCK_K
        m += BLOCK_M
    amax = tl.max(tl.max(best, axis=1), axis=0)
    s_enc = tl.minimum(tl.math.div_rn(_NVFP4_MAX, amax), _FLT_MAX)  # 2688 / tiny = inf -> FLT_MAX, as torch's clamp
    return tl.where(amax == 0.0, 1.0, s_enc)


@triton.jit
def amax_encode_scale_kernel(x_ptr, s_enc_ptr, M, K, stride_xm, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """One CTA: s_enc[0] = amax == 0 ? 1 : min(div_rn(2688, amax), FLT_MAX) over bf16 x [M, K]."""
    tl.store(s_enc_ptr, encode_scale_from_amax(x_ptr, M, K, stride_xm, BLOCK_M, BLOCK_K))



@triton.jit
def quant_dequant_nvfp4_kernel(x_ptr, s_enc_ptr, w_dec_ptr, alpha_ptr, out_ptr, M, K, stride_xm,
                               BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, S_ENC_FROM_AMAX: tl.constexpr = False):
    """out bf16 [M, K] = e2m1 * e4m3 of NVFP4(x) with encode scale S_enc (the global decode scale left out);
    alpha[0] = div_rn(1, S_enc) * S_dec(w), the scale the GEMM's epilogue applies (as the NVFP4 GEMMs do).
    S_ENC_FROM_AMAX: every program computes S_enc from amax(x) itself (s_enc_ptr unused), for small x
    (`IN_KERNEL_AMAX_MAX_ELEMENTS`): one launch instead of the amax kernel + this one."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rk = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = rm[:, None] < M
    if S_ENC_FROM_AMAX:
        s_enc = encode_scale_from_amax(x_ptr, M, K, stride_xm, 16, 512)
    else:
        s_enc = tl.load(s_enc_ptr)
    x = tl.load(x_ptr + rm[:, None].to(tl.int64) * stride_xm + rk[None, :], mask=mask, other=0.0)
    xd = quant_dequant_nvfp4_tile(x, s_enc)  # fp32 e2m1 * scale, exact; so is the bf16 cast below
    tl.store(out_ptr + rm[:, None].to(tl.int64) * K + rk[None, :], xd.to(tl.bfloat16), mask=mask)
    if (tl.program_id(0) == 0) & (tl.program_id(1) == 0):
        tl.store(alpha_ptr, tl.math.div_rn(1.0, s_enc) * tl.load(w_dec_ptr))


# --------------------------------------------------------------------------------------------------------------
# Host wrappers (inputs validated by the callers)
# --------------------------------------------------------------------------------------------------------------

_DEQUANT = CachedLauncher(dequant_nvfp4_bf16_kernel, pipeline=False)
_QDQ = CachedLauncher(quant_dequant_nvfp4_kernel, pipeline=False)
_AMAX = CachedLauncher(amax_encode_scale_kernel, pipeline=False)

#: Rows per program of `quant_dequant_nvfp4_kernel`. 64-row programs spend fewer instructions per value (23
#: against 29 sm_90a SASS instructions: the per-program S_enc divisions and addresses spread further) but were
#: slower at every M measured on the H200 (K = 4096, M = 16 - 8192: e.g. 7.08 against 6.34 us at M = 1024, 41.5
#: against 39.5 at M = 8192): fewer programs in flight.
QDQ_BLOCK_M = 16
QDQ_BLOCK_K = 128


def qdq_grid(m: int, k: int) -> tuple[int, int, int]:
    """The launch grid of `quant_dequant_nvfp4_kernel` for x [M, K]."""
    return (triton.cdiv(m, QDQ_BLOCK_M), k // QDQ_BLOCK_K, 1)


def dequantize_nvfp4_bf16(q) -> torch.Tensor:
    """bf16 [R, K] = e2m1 * scale of an NVFP4 `QuantizedTensor` on the GPU (its global scale NOT applied; see the
    module docstring). R must be a multiple of 64 and K of 128."""
    r, k = q.shape
    out = torch.empty((r, k), dtype=torch.bfloat16, device=q.data.device)
    blocked = q.scale_layout == "blocked_128x4"
    block_r, block_k = 64, 128
    _DEQUANT.launch(("dq", r, k, blocked), (r // block_r, k // block_k), out.device, (q.data, q.scales, out, r, k),
                    dict(SCALE_BLOCKED=blocked, BLOCK_R=block_r, BLOCK_K=block_k, num_warps=4))
    return out


def amax_in_kernel(x: torch.Tensor) -> bool:
    """Whether the kernel that quantizes x can compute S_enc from amax(x) itself (small x, unit inner stride)."""
    return x.numel() <= IN_KERNEL_AMAX_MAX_ELEMENTS and x.stride(1) == 1


def quant_dequant_nvfp4(x: torch.Tensor, s_enc: "torch.Tensor | None", w_dec: torch.Tensor) -> tuple:
    """(x_dq bf16 [M, K], alpha fp32 [1], launcher entry) for bf16 x [M, K] (K % 128 == 0, unit inner stride):
    x_dq * alpha-part = the NVFP4 value of x quantized with `s_enc`; alpha = S_dec(x) * w_dec. `s_enc=None`
    computes S_enc from amax(x) inside the kernel (only where `amax_in_kernel(x)`)."""
    m, k = x.shape
    out = torch.empty((m, k), dtype=torch.bfloat16, device=x.device)
    alpha = torch.empty(1, dtype=torch.float32, device=x.device)
    from_amax = s_enc is None
    entry = _QDQ.launch(("qdq", m, k, x.stride(0), from_amax), qdq_grid(m, k),
                        x.device, (x, w_dec if from_amax else s_enc, w_dec, alpha, out, m, k, x.stride(0)),
                        dict(BLOCK_M=QDQ_BLOCK_M, BLOCK_K=QDQ_BLOCK_K, S_ENC_FROM_AMAX=from_amax, num_warps=4))
    return out, alpha, entry


def device_encode_scale(x: torch.Tensor) -> torch.Tensor:
    """S_enc of bf16 x [M, K] (unit inner stride) as fp32 [1], from one single-CTA launch (no host sync)."""
    m, k = x.shape
    s_enc = torch.empty(1, dtype=torch.float32, device=x.device)
    _AMAX.launch(("amax", m, k, x.stride(0)), (1,), x.device, (x, s_enc, m, k, x.stride(0)),
                 dict(BLOCK_M=32, BLOCK_K=512, num_warps=16))
    return s_enc
