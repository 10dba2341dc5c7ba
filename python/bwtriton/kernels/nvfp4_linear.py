"""NVFP4 linear layer: y = x @ dequant(w_q)^T (+ bias) with the activations quantized to NVFP4 on the fly.

Six forms, same products (each e2m1 * e4m3 value is exact in bf16, bf16 products exact in fp32; only the fp32
summation order differs). Without a native NVFP4 MMA (Hopper) three of them run bf16 tensor cores on exactly
dequantized values, where the block-scaled MMA would be emulated (~100-830 us at N = K = 4096 on the H200):

* 'dequant_decode' (K % 256 == 0): one small kernel quantizes x and dequantizes it straight back to exact bf16
  values (`nvfp4_dequant`), then the weight-only decode kernels (`decode.decode_scaled`, tuned per shape, any M)
  apply alpha = S_dec(x) * S_dec(w) and the bias in their epilogue. Two launches; the fastest form on the H200
  for M <= 64 (a weight read, at up to 2x cuBLAS bf16).
* 'qdq_decode' (M <= 16, K % 256 == 0): one launch, the frag decode kernel (`decode.decode_qdq`) with x's
  quantize-dequantize in its prologue (each CTA writes its K slice of the exact bf16 values to a per-stream copy,
  after L2 prefetches of its first weight chunks) and, with split-K, the reduction inside the launch; bit-equal
  to 'dequant_decode' with the same frag config. On the H200 the tuner picked it at M = 1, N = K = 8192 (23.4
  us); without the prefetch it lost by 0.6-3.0 us at four of six M <= 16 shapes (25.7 against 22.7 us there):
  each CTA's prologue is latency before its weights stream (docs/kernels.md).
* 'mixed': one launch, the mixed-input wgmma GEMM (`mixed_gemm`) with x's quantize-dequantize in its prologue
  (each program re-quantizes its x tile, hence tried for M <= MIXED_MAX_M only). On the H200 it loses to
  'dequant_decode' (e.g. 28 against 9.4 us at M = 1, N = K = 4096): the wgmma kernel's per-weight cost is
  higher than the frag / GEMV decode kernels' (docs/kernels.md).
* 'dequant_gemm' (large M): x quantize-dequantized and the weight dequantized to bf16, then `kernels.matmul`
  (~700 TFLOP/s on the H200) with alpha as its fp32 epilogue scale.

The other two feed `tl.dot_scaled` (native block-scaled MMA on sm_100a), same numerics (the activation
quantization is `bwtriton.language.quantize_nvfp4_tile`, bit-exact with `bwtriton.formats.quantize_nvfp4` given the
same global encode scale):

* `nvfp4_linear` (fused): the GEMM's prologue loads a bf16 x tile, quantizes it in registers and feeds
  `tl.dot_scaled` directly; the quantized activations never touch HBM. Global scales are folded into the epilogue
  alpha = S_dec(x) * S_dec(w). One launch.
* `nvfp4_linear_two_kernel`: a quantize kernel writes x_q (4.5 bits/element) and the GEMM reads it back, chained
  with programmatic dependent launch (PDL): the GEMM is launched with `launch_pdl=True`, starts while the
  quantizer runs, prefetches its first weight tile, and only then `gdc_wait()`s for the activations; the quantizer
  calls `gdc_launch_dependents()` as soon as its loads are issued.

When each wins (H200, N = K = 4096, x global scale given, two runs): fused 234/314 us vs two-kernel 270/352 us at
M = 16 (fused 1.12-1.16x faster: one launch, no x_q round trip); at M = 256 fused loses (343/467 vs 243/424 us)
and at M = 4096 clearly (2.1-2.3 ms vs 1.0-1.1 ms): the fused kernel re-quantizes each x tile once per column of
output tiles (N / BLOCK_N = 32 times here) and its quantizer's integer work sits in the MMA loop, while the
two-kernel path quantizes x once and its extra traffic is only 4.5/16 of x. So `nvfp4_linear` (form='auto')
times both forms once per (M rounded up to a power of two, N, K, bias, scale layout) under CUDA-graph replay and
keeps the faster (without a native NVFP4 MMA it times 'dequant_decode', 'qdq_decode', 'mixed', 'dequant_gemm'
and, at small M, 'fused'); `default_form` is the untuned choice (graph capture before tuning, BWTRITON_LINEAR_TUNE=0).
PDL vs plain launches measured within noise (0.98-1.08x). Repeated calls with one signature replay a plan.
"""
from __future__ import annotations

import weakref
from typing import Callable, Optional

import torch
import triton
import triton.language as tl

from ..errors import InputError
from ..formats import QuantizedTensor
from ..formats.e2m1 import E2M1_MAX
from ..formats.nvfp4 import E4M3_MAX, FP32_MAX
from ..language.quant import quantize_nvfp4_tile
from ._device import sm_count
from ._tiles import grouped_tile_coords
from ._validate import InputChecker, check_bf16_activations, check_quantized
from ._common import decode_scale_arg, scale_offsets, tcgen05_block_scaled
from .decode import config_label, decode_qdq, decode_scaled, qdq_decode_candidates, tuning_copies
from . import _decode_frag as _frag
from .matmul import matmul
from . import mixed_gemm as _mg
from .nvfp4_dequant import (DEVICE_AMAX_MAX_ELEMENTS, amax_in_kernel, qdq_grid,
                            dequantize_nvfp4_bf16, device_encode_scale, encode_scale_from_amax,
                            quant_dequant_nvfp4)
from ._launcher import CachedLauncher, StreamScratch, rotated_kernel_time_us, run_entry

__all__ = ["nvfp4_linear", "nvfp4_linear_two_kernel", "quantize_nvfp4_pdl"]


@triton.jit
def _epilogue(acc, alpha, bias_ptr, out_ptr, rm, rn, M, N, HAS_BIAS: tl.constexpr):
    out = acc * alpha
    if HAS_BIAS:
        out += tl.load(bias_ptr + rn).to(tl.float32)[None, :]
    mask = rm[:, None] < M
    tl.store(out_ptr + rm[:, None].to(tl.int64) * N + rn[None, :], out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def nvfp4_linear_fused_kernel(x_ptr, x_enc_ptr, w_ptr, ws_ptr, w_dec_ptr, bias_ptr, out_ptr, M, N, K, stride_xm,
                              HAS_BIAS: tl.constexpr, SCALE_BLOCKED: tl.constexpr, BLOCK_M: tl.constexpr,
                              BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                              S_ENC_FROM_AMAX: tl.constexpr = False):
    """Fused quantize(x) + NVFP4 GEMM. x bf16 [M, K]; w_q [N, K/2] bytes with UE4M3 scales; out bf16 [M, N].
    S_ENC_FROM_AMAX: each program computes S_enc from amax(x) itself (small x; x_enc_ptr unused)."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = N // BLOCK_N
    pid_m, pid_n = grouped_tile_coords(pid, num_m, num_n, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    rkh = tl.arange(0, BLOCK_K // 2)
    rks = tl.arange(0, BLOCK_K // 16)
    if S_ENC_FROM_AMAX:
        s_enc = encode_scale_from_amax(x_ptr, M, K, stride_xm, 16, 512)
    else:
        s_enc = tl.load(x_enc_ptr)
    m_mask = rm[:, None] < M
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + rm[:, None].to(tl.int64) * stride_xm + (k + rk)[None, :], mask=m_mask, other=0.0)
        xq, xs = quantize_nvfp4_tile(x, s_enc)
        w = tl.load(w_ptr + rn[:, None].to(tl.int64) * (K // 2) + (k // 2 + rkh)[None, :])
        ws = tl.load(ws_ptr + scale_offsets(rn[:, None], (k // 16 + rks)[None, :], K // 16, SCALE_BLOCKED))
        acc = tl.dot_scaled(xq, xs, "e2m1", w.T, ws, "e2m1", acc)
    alpha = tl.math.div_rn(1.0, s_enc) * tl.load(w_dec_ptr)
    _epilogue(acc, alpha, bias_ptr, out_ptr, rm, rn, M, N, HAS_BIAS)


@triton.jit
def quantize_nvfp4_pdl_kernel(x_ptr, x_enc_ptr, xq_ptr, xs_ptr, M, K, stride_xm,
                              BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, USE_PDL: tl.constexpr,
                              S_ENC_FROM_AMAX: tl.constexpr = False):
    """x bf16 [M, K] -> packed uint8 [M, K/2] + fp8e4nv scales [M, K/16] (plain layout). S_ENC_FROM_AMAX: every
    program computes S_enc from amax(x) (small x) and program (0, 0) writes it to x_enc_ptr for the GEMM, which
    reads it only after its gdc_wait (the quantizer grid has completed then)."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rk = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    rkh = tl.program_id(1) * (BLOCK_K // 2) + tl.arange(0, BLOCK_K // 2)
    rks = tl.program_id(1) * (BLOCK_K // 16) + tl.arange(0, BLOCK_K // 16)
    mask = rm[:, None] < M
    if USE_PDL:
        tl.extra.cuda.gdc_wait()  # x may be written by the kernel before us in the stream
    x = tl.load(x_ptr + rm[:, None].to(tl.int64) * stride_xm + rk[None, :], mask=mask, other=0.0)
    if S_ENC_FROM_AMAX:
        s_enc = encode_scale_from_amax(x_ptr, M, K, stride_xm, 16, 512)
        if (tl.program_id(0) == 0) & (tl.program_id(1) == 0):
            tl.store(x_enc_ptr, s_enc)
    else:
        s_enc = tl.load(x_enc_ptr)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()  # let the GEMM start its weight prefetch now
    xq, xs = quantize_nvfp4_tile(x, s_enc)
    tl.store(xq_ptr + rm[:, None].to(tl.int64) * (K // 2) + rkh[None, :], xq, mask=mask)
    tl.store(xs_ptr + rm[:, None].to(tl.int64) * (K // 16) + rks[None, :], xs, mask=mask)


@triton.jit
def nvfp4_linear_pdl_gemm_kernel(xq_ptr, xs_ptr, x_enc_ptr, w_ptr, ws_ptr, w_dec_ptr, bias_ptr, out_ptr, M, N, K,
                                 HAS_BIAS: tl.constexpr, SCALE_BLOCKED: tl.constexpr, USE_PDL: tl.constexpr,
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """NVFP4 x NVFP4 GEMM reading the quantizer's output; waits on PDL only after its first weight tile."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rkh = tl.arange(0, BLOCK_K // 2)
    rks = tl.arange(0, BLOCK_K // 16)
    m_mask = rm[:, None] < M
    w_rows = w_ptr + rn[:, None].to(tl.int64) * (K // 2)
    # Peeled first K step: its weight tile and scales do not depend on the producer, so they are loaded before
    # gdc_wait() and overlap the quantizer's tail; only the activation loads wait.
    w = tl.load(w_rows + rkh[None, :])
    ws = tl.load(ws_ptr + scale_offsets(rn[:, None], rks[None, :], K // 16, SCALE_BLOCKED))
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    xq = tl.load(xq_ptr + rm[:, None].to(tl.int64) * (K // 2) + rkh[None, :], mask=m_mask, other=0)
    xs = tl.load(xs_ptr + rm[:, None].to(tl.int64) * (K // 16) + rks[None, :], mask=m_mask, other=0.0)
    acc = tl.dot_scaled(xq, xs, "e2m1", w.T, ws, "e2m1", tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32))
    for k in range(BLOCK_K, K, BLOCK_K):
        w = tl.load(w_rows + (k // 2 + rkh)[None, :])
        ws = tl.load(ws_ptr + scale_offsets(rn[:, None], (k // 16 + rks)[None, :], K // 16, SCALE_BLOCKED))
        xq = tl.load(xq_ptr + rm[:, None].to(tl.int64) * (K // 2) + (k // 2 + rkh)[None, :], mask=m_mask, other=0)
        xs = tl.load(xs_ptr + rm[:, None].to(tl.int64) * (K // 16) + (k // 16 + rks)[None, :], mask=m_mask,
                     other=0.0)
        acc = tl.dot_scaled(xq, xs, "e2m1", w.T, ws, "e2m1", acc)
    alpha = tl.math.div_rn(1.0, tl.load(x_enc_ptr)) * tl.load(w_dec_ptr)
    _epilogue(acc, alpha, bias_ptr, out_ptr, rm, rn, M, N, HAS_BIAS)


# --------------------------------------------------------------------------------------------------------------
# Torch entry points
# --------------------------------------------------------------------------------------------------------------

_FUSED = CachedLauncher(nvfp4_linear_fused_kernel)
_QUANT = CachedLauncher(quantize_nvfp4_pdl_kernel)
_PDL_GEMM = CachedLauncher(nvfp4_linear_pdl_gemm_kernel)

#: fp32 [1] device tensors of given encode scales, per (x_global_scale, device): a float argument is converted
#: (a host->device copy) once, not on every call.
_ENCODE_SCALES: dict[tuple, torch.Tensor] = {}


def amax_encode_scale(x: torch.Tensor) -> torch.Tensor:
    """S_enc = min(2688 / amax(x), FLT_MAX) (1 if amax is 0) as fp32 [1], bit-equal to
    `bwtriton.formats.nvfp4_global_encode_scale` but with no host->device copy (that one builds its 2688 with
    torch.tensor on the device), so it can be captured in a CUDA graph. full_like / div is a true fp32
    division; `2688 / tensor` in torch is reciprocal-then-multiply, which can differ in the last bit."""
    amax = x.abs().amax().float().reshape(1)
    s_enc = torch.div(torch.full_like(amax, E4M3_MAX * E2M1_MAX), amax).clamp(max=FP32_MAX)
    return torch.where(amax == 0, torch.ones_like(s_enc), s_enc)


def _encode_scale(x: torch.Tensor, x_global_scale, device: torch.device, *,
                  in_kernel: bool = False) -> "torch.Tensor | None":
    """S_enc of x as fp32 [1] on `device`; None when `in_kernel` (the form's first kernel can compute it) and x is
    small enough for that (`amax_in_kernel`): then no separate amax launch."""
    if x_global_scale is None:
        if in_kernel and amax_in_kernel(x):
            return None
        if x.numel() <= DEVICE_AMAX_MAX_ELEMENTS and x.stride(1) == 1:
            return device_encode_scale(x)  # one launch, bit-equal to amax_encode_scale
        return amax_encode_scale(x)
    if isinstance(x_global_scale, torch.Tensor):
        g = x_global_scale.to(device=device, dtype=torch.float32).reshape(1)
        return 1.0 / g
    key = (float(x_global_scale), device)
    s_enc = _ENCODE_SCALES.get(key)
    if s_enc is None:
        g = torch.tensor([float(x_global_scale)], dtype=torch.float32, device=device)
        s_enc = 1.0 / g
        # Entries are never evicted: a CUDA graph captured with one keeps reading it. A caller passing a new
        # float every call gets fresh (uncached) tensors once 1024 are cached, instead of unbounded growth.
        if len(_ENCODE_SCALES) < 1024:
            _ENCODE_SCALES[key] = s_enc
    return s_enc


def _validate(op: str, x, w_q, bias, x_global_scale):
    check_quantized(op, "w_q", w_q, ("nvfp4",))
    m, n, k = check_bf16_activations(op, x, w_q)
    if n % 64 or k % 128:
        raise InputError(f"{op}: N={n} must be a multiple of 64 and K={k} of 128; pad the weight")
    if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (n,)):
        raise InputError(f"{op}: bias must be a tensor of shape ({n},), got "
                         f"{tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__}")
    if bias is not None and bias.stride(0) != 1:
        raise InputError(f"{op}: bias must be contiguous; pass bias.contiguous()")
    device = InputChecker(op).on_cuda({"x": x, "w_q.data": w_q.data, "w_q.scales": w_q.scales, "bias": bias})
    return m, n, k, device


def _blocks(m: int, n: int) -> tuple[int, int, int]:
    block_m = 128 if m > 64 else 64
    block_n = 128 if n % 128 == 0 else 64
    return block_m, block_n, 128


def _fused(x, w_q, bias, m, n, k, device, s_enc) -> tuple[torch.Tensor, tuple]:
    out = torch.empty((m, n), dtype=torch.bfloat16, device=device)
    w_dec = decode_scale_arg(w_q, device)
    block_m, block_n, block_k = _blocks(m, n)
    grid = (triton.cdiv(m, block_m) * (n // block_n),)
    blocked = w_q.scale_layout == "blocked_128x4"
    from_amax = s_enc is None  # S_enc computed in the kernel; w_dec stands in for the unread x_enc_ptr
    args = (x, w_dec if from_amax else s_enc, w_q.data, w_q.scales, w_dec, bias if bias is not None else out, out,
            m, n, k, x.stride(0))
    kwargs = dict(HAS_BIAS=bias is not None, SCALE_BLOCKED=blocked, BLOCK_M=block_m, BLOCK_N=block_n,
                  BLOCK_K=block_k, GROUP_M=8, S_ENC_FROM_AMAX=from_amax, num_warps=8, num_stages=3)
    entry = _FUSED.launch(("fused", m, n, k, x.stride(0), bias is not None,
                           bias.dtype if bias is not None else None, blocked, from_amax), grid, device, args, kwargs)
    return out, (entry,)


def _two_kernel(x, w_q, bias, m, n, k, device, s_enc, use_pdl: bool) -> tuple[torch.Tensor, tuple]:
    from_amax = s_enc is None  # the quantizer computes S_enc from amax and writes it here for the GEMM
    if from_amax:
        s_enc = torch.empty(1, dtype=torch.float32, device=device)
    xq, xs, q_entry = _quantize(x, s_enc, use_pdl, device, from_amax)
    out = torch.empty((m, n), dtype=torch.bfloat16, device=device)
    w_dec = decode_scale_arg(w_q, device)
    block_m, block_n, block_k = _blocks(m, n)
    grid = (n // block_n, triton.cdiv(m, block_m))
    blocked = w_q.scale_layout == "blocked_128x4"
    args = (xq, xs, s_enc, w_q.data, w_q.scales, w_dec, bias if bias is not None else out, out, m, n, k)
    kwargs = dict(HAS_BIAS=bias is not None, SCALE_BLOCKED=blocked, USE_PDL=use_pdl, BLOCK_M=block_m,
                  BLOCK_N=block_n, BLOCK_K=block_k, num_warps=8, num_stages=3, launch_pdl=use_pdl)
    entry = _PDL_GEMM.launch(("gemm", m, n, k, bias is not None, bias.dtype if bias is not None else None, blocked,
                              use_pdl), grid, device, args, kwargs)
    return out, (q_entry, entry)


def _dequant_decode_ok(m: int, k: int) -> bool:
    """Whether the 'dequant_decode' form tiles this shape (the decode kernels' limits)."""
    return k % 256 == 0


def _qdq_decode_ok(m: int, k: int) -> bool:
    """Whether the 'qdq_decode' form may take this shape (the frag kernel's M and K limits)."""
    return m <= _frag.FRAG_MAX_M and k % 256 == 0


def _mixed(x, w_q, bias, m, n, k, device, s_enc, cfg: dict) -> tuple[torch.Tensor, tuple]:
    """One launch: the mixed-input wgmma GEMM with x's NVFP4 quantize-dequantize in its prologue
    (`mixed_gemm.nvfp4_mixed_gemm_kernel`, QUANT_X) and alpha = S_dec(x) * S_dec(w) + bias in its epilogue."""
    w_dec = decode_scale_arg(w_q, device)
    from_amax = s_enc is None  # each program computes S_enc from amax(x); w_dec stands in for the unread pointer
    out, launch = _mg.launch_mixed(x, w_q, w_dec if from_amax else s_enc, w_dec, bias, cfg, quant_x=True,
                                      from_amax=from_amax)
    return out, (launch,)


def _dequant_gemm(x, w_q, bias, m, n, k, device, s_enc) -> tuple[torch.Tensor, tuple]:
    """Large M: x quantize-dequantized to exact bf16 values, the weight dequantized to bf16 (both without their
    global scales), then the bf16 wgmma GEMM (`kernels.matmul`) with alpha = S_dec(x) * S_dec(w) as its fp32
    epilogue scale; with a bias the GEMM writes fp32 and one elementwise kernel adds it before the single rounding
    to bf16. Three or four launches, O((M + N) K) extra bytes."""
    xd, alpha, _ = quant_dequant_nvfp4(x, s_enc, decode_scale_arg(w_q, device))
    if bias is None:
        return matmul(xd, dequantize_nvfp4_bf16(w_q).T, a_scale=alpha), ()
    # the bias is added to the fp32 result: one rounding to bf16, as in the other forms
    out = matmul(xd, dequantize_nvfp4_bf16(w_q).T, a_scale=alpha, out_dtype=torch.float32)
    return (out + bias).to(torch.bfloat16), ()


def _dequant_decode(x, w_q, bias, m, n, k, device, s_enc) -> tuple[torch.Tensor, tuple]:
    """Small M: x -> NVFP4 -> bf16 (exact, global scale left out) in one small kernel, then the weight-only decode
    kernel with alpha = S_dec(x) * S_dec(w) and the bias in its epilogue. Same products as the NVFP4 MMA (each
    e2m1 * e4m3 value is exact in bf16), so only the fp32 accumulation order differs from the other forms."""
    xd, alpha, q_entry = quant_dequant_nvfp4(x, s_enc, decode_scale_arg(w_q, device))
    out, replay = decode_scaled(xd, w_q, alpha, bias, device)
    return out, (q_entry, replay)


def _qdq_decode(x, w_q, bias, m, n, k, device, s_enc, cfg: dict) -> tuple[torch.Tensor, tuple]:
    """Small M, one launch: the frag decode kernel with x's quantize-dequantize in its prologue
    (`decode.decode_qdq`); same values and summation as 'dequant_decode' with that frag config."""
    out, launch = decode_qdq(x, w_q, s_enc, decode_scale_arg(w_q, device), bias, cfg, device)
    return out, (launch,)


#: Chosen frag config per tuning key of the 'qdq_decode' form (see `_pick_form`).
_QDQ_CFG: dict[tuple, dict] = {}


def _qdq_cfg(key: tuple, x, w_q, device) -> dict:
    cfg = _QDQ_CFG.get(key)
    if cfg is None:
        cands = qdq_decode_candidates(x, w_q, device)  # the fastest first
        if not cands:
            raise InputError(f"nvfp4_linear: form='qdq_decode' has no frag config for M={x.shape[0]}, "
                             f"N={w_q.shape[0]}, K={x.shape[1]} (M <= {_frag.FRAG_MAX_M}, K % 256 == 0, "
                             f"N % 64 == 0); use form='auto'")
        cfg = cands[0]
    return cfg


#: Chosen form (one of `_FORMS` but 'auto') per (device, M bucket, N, K, bias, scale layout);
#: TUNING_LOG: the kernel times (us, CUDA-graph replay) every form got when the choice was made.
_FORM: dict[tuple, str] = {}
TUNING_LOG: dict[tuple, dict[str, float]] = {}

#: Without tuning (under graph capture, or BWTRITON_LINEAR_TUNE=0): fused up to this M. Measured on the H200
#: (module docstring): fused 1.12-1.16x faster at M = 16, slower from M = 256 on.
FUSED_MAX_M = 64

#: Largest M for which the one-launch 'mixed' form (x re-quantized by every program) is tried: each program
#: quantizes BLOCK_M x BLOCK_K activations per K step next to its BLOCK_N x BLOCK_K weight decodes.
MIXED_MAX_M = 64

#: Smallest M for which 'dequant_gemm' is tried: below it the per-call dequantized weight (2 bytes per weight
#: written and read back) costs more than the GEMM saves.
DEQUANT_GEMM_MIN_M = 64

#: Chosen mixed-GEMM config per tuning key of the 'mixed' form (see `_pick_form`).
_MIXED_CFG: dict[tuple, dict] = {}


def default_form(m: int, k: int, native_nvfp4_mma: bool) -> str:
    """The untuned choice. Without a native NVFP4 MMA (it would be emulated), by the H200's measurements: up to
    MIXED_MAX_M 'dequant_decode' (the decode kernels, fastest there), or the one-launch 'mixed' form where K does
    not tile them (K % 256); above, 'dequant_gemm' (the bf16 GEMM at wgmma speed). With one: fused up to
    FUSED_MAX_M, two-kernel above."""
    if not native_nvfp4_mma:
        if m <= MIXED_MAX_M:
            return "dequant_decode" if _dequant_decode_ok(m, k) else "mixed"
        return "dequant_gemm"
    return "fused" if m <= FUSED_MAX_M else "two_kernel"


def _mixed_cfg(key: tuple, m: int, n: int, k: int, device: torch.device) -> dict:
    cfg = _MIXED_CFG.get(key)
    return cfg if cfg is not None else _mg.mixed_candidates(m, n, k, sm_count(device))[0]


def _m_bucket(m: int) -> int:
    return triton.next_power_of_2(m)


def _form_key(device, m: int, n: int, k: int, bias, w_q) -> tuple:
    return (device.index, _m_bucket(m), n, k, bias is not None, w_q.scale_layout)


def _pick_form(x, w_q, bias, m, n, k, device, s_enc) -> str:
    import os
    key = _form_key(device, m, n, k, bias, w_q)
    form = _FORM.get(key)
    if form is not None:
        return form
    native = tcgen05_block_scaled(device)
    if os.environ.get("BWTRITON_LINEAR_TUNE") == "0" or torch.cuda.is_current_stream_capturing():
        return default_form(m, k, native)
    runs = {}  # form -> fn(weight): each form is timed over `tuning_copies` of the weight, as the decode tuner does
    if native or m <= FUSED_MAX_M:  # without a native NVFP4 MMA these emulate it: tried only where M is small
        runs["fused"] = lambda w: _fused(x, w, bias, m, n, k, device, s_enc)
    if native:
        runs["two_kernel"] = lambda w: _two_kernel(x, w, bias, m, n, k, device, s_enc, True)
    if _dequant_decode_ok(m, k):
        runs["dequant_decode"] = lambda w: _dequant_decode(x, w, bias, m, n, k, device, s_enc)
    qdq_cands = qdq_decode_candidates(x, w_q, device) if _qdq_decode_ok(m, k) else []
    for cfg in qdq_cands:
        runs[f"qdq_decode {config_label(cfg)}"] = (
            lambda w, cfg=cfg: _qdq_decode(x, w, bias, m, n, k, device, s_enc, cfg))
    mixed_cands = _mg.mixed_candidates(m, n, k, sm_count(device)) if m <= MIXED_MAX_M else []
    if m <= MIXED_MAX_M:
        for cfg in mixed_cands:
            runs[f"mixed {_mg.mixed_label(cfg)}"] = (
                lambda w, cfg=cfg: _mixed(x, w, bias, m, n, k, device, s_enc, cfg))
    if m >= DEQUANT_GEMM_MIN_M and not native:
        runs["dequant_gemm"] = lambda w: _dequant_gemm(x, w, bias, m, n, k, device, s_enc)
    copies = tuning_copies(w_q, device)
    times = {}
    for name, fn in runs.items():
        fn(w_q)  # compile + warm up
        times[name] = rotated_kernel_time_us([lambda fn=fn, w=w: fn(w) for w in copies])
    TUNING_LOG[key] = times
    best = min(times, key=times.get)
    if best.startswith("qdq_decode "):
        _QDQ_CFG[key] = next(c for c in qdq_cands if best == f"qdq_decode {config_label(c)}")
        best = "qdq_decode"
    if best.startswith("mixed "):
        _MIXED_CFG[key] = next(c for c in mixed_cands if best == f"mixed {_mg.mixed_label(c)}")
        best = "mixed"
    form = _FORM[key] = best
    return form


def nvfp4_linear(x: torch.Tensor, w_q, bias: Optional[torch.Tensor] = None, *,
                 x_global_scale: "Optional[float | torch.Tensor]" = None, form: str = "auto") -> torch.Tensor:
    """y = quant_nvfp4(x) @ dequant(w_q)^T + bias in bf16.

    x: bf16 [M, K]; w_q: NVFP4 QuantizedTensor [N, K] (plain or blocked scales); bias: [N] or None.
    x_global_scale: the activations' global decode scale (amax / 2688, e.g. calibrated); None computes it from
    amax(x), as `bwtriton.formats.quantize_nvfp4(x)` does, so the result matches quantizing x with it.
    form: 'fused' (one kernel quantizes x tiles in the GEMM's prologue), 'two_kernel' (quantize kernel + GEMM
    chained with PDL), 'dequant_decode' (K % 256 == 0: x quantized and dequantized to exact bf16 values in one
    small kernel, then the weight-only decode kernels, tuned per shape, with the global scales and bias in their
    epilogue), 'qdq_decode' (M <= 16, K % 256 == 0: one launch, the frag decode kernel with x's
    quantize-dequantize in its prologue), 'mixed' (one launch: the mixed-input wgmma GEMM, x's quantize-dequantize
    in its prologue),
    'dequant_gemm' (x and the weight dequantized to bf16, then the bf16 GEMM) or 'auto': the first call per
    (M rounded up to a power of two, N, K) times the forms that suit the shape and target under CUDA-graph replay
    (over `decode.tuning_copies` of the weight, rotated past L2) and keeps the fastest (same products either way;
    only the fp32 summation order differs)."""
    if isinstance(x, torch.Tensor) and isinstance(w_q, QuantizedTensor):
        key = _plan_key(x, w_q, bias, x_global_scale, form)
        plan = _PLANS.get(key)
        if plan is not None:
            return plan(x, w_q, bias, x_global_scale)
    op = "nvfp4_linear"
    if form not in _FORMS:
        raise InputError(f"{op}: form must be one of {', '.join(map(repr, _FORMS))}, got {form!r}")
    m, n, k, device = _validate(op, x, w_q, bias, x_global_scale)
    if form == "dequant_decode" and not _dequant_decode_ok(m, k):
        raise InputError(f"{op}: form='dequant_decode' needs K % 256 == 0, got K={k}; use form='auto'")
    if form == "qdq_decode" and not _qdq_decode_ok(m, k):
        raise InputError(f"{op}: form='qdq_decode' needs M <= {_frag.FRAG_MAX_M} and K % 256 == 0, got M={m}, "
                         f"K={k}; use form='auto'")
    chosen = form
    if form == "auto":
        chosen = _pick_form(x, w_q, bias, m, n, k, device, _encode_scale(x, x_global_scale, device))
    s_enc = _encode_scale(x, x_global_scale, device, in_kernel=True)
    if chosen == "fused":
        out, entries = _fused(x, w_q, bias, m, n, k, device, s_enc)
    elif chosen == "mixed":
        cfg = _mixed_cfg(_form_key(device, m, n, k, bias, w_q), m, n, k, device)
        out, entries = _mixed(x, w_q, bias, m, n, k, device, s_enc, cfg)
    elif chosen == "dequant_gemm":
        out, entries = _dequant_gemm(x, w_q, bias, m, n, k, device, _encode_scale(x, x_global_scale, device))
    elif chosen == "dequant_decode":
        out, entries = _dequant_decode(x, w_q, bias, m, n, k, device, s_enc)
    elif chosen == "qdq_decode":
        cfg = _qdq_cfg(_form_key(device, m, n, k, bias, w_q), x, w_q, device)
        out, entries = _qdq_decode(x, w_q, bias, m, n, k, device, s_enc, cfg)
    else:
        out, entries = _two_kernel(x, w_q, bias, m, n, k, device, s_enc, True)
    if chosen != "dequant_gemm" and (form != "auto" or _form_key(device, m, n, k, bias, w_q) in _FORM):
        _remember_plan(_plan_key(x, w_q, bias, x_global_scale, form), w_q, chosen, entries, m, n, k, device,
                       x_global_scale, s_enc)
    return out


_FORMS = ("auto", "fused", "two_kernel", "dequant_decode", "qdq_decode", "mixed", "dequant_gemm")

#: Replayable launches per call signature: a call whose weight tensors, x (shape, strides, dtype, device,
#: alignment), bias signature, kind of x scale and form match an earlier one skips validation and dispatch.
_PLANS: dict[tuple, Callable] = {}


def _tensor_sig(t: "torch.Tensor | None") -> tuple:
    return () if t is None else (t.dtype, t.device, t.shape, t.stride(), t.data_ptr() % 16)


def _weight_key(w_q) -> tuple:
    """The weight's identity for plans: its tensors, not the `QuantizedTensor` wrapper, so that a wrapper built
    anew around the same tensors on every call (`torch.ops.bwtriton.nvfp4_linear`, i.e. `nn.NVFP4Linear`) still
    finds its plan and the weight is validated once. Plans go when one of the tensors does (`_drop_with`), so an
    id in here always names the live tensor it was made from."""
    return (id(w_q.data), id(w_q.scales), id(w_q.global_scale), w_q.scale_layout, w_q.format)


def _plan_key(x: torch.Tensor, w_q, bias, x_global_scale, form: str) -> tuple:
    if x_global_scale is None or isinstance(x_global_scale, torch.Tensor):
        scale_kind = "amax" if x_global_scale is None else "tensor"
    else:  # the value itself: a plan then has one constant x scale (see the dequant_decode plan's alpha)
        scale_kind = ("float", x_global_scale) if isinstance(x_global_scale, (int, float)) else "other"
    return (_weight_key(w_q), x.shape, x.stride(), x.dtype, x.device, x.data_ptr() % 16,
            _tensor_sig(bias) if isinstance(bias, torch.Tensor) else bias, scale_kind, form)


def cached_plan(x: torch.Tensor, w_q, bias, x_global_scale, form: str = "auto") -> "Callable | None":
    """The replay `nvfp4_linear(x, w_q, bias, x_global_scale=..., form=...)` runs for these arguments (called as
    plan(x, w_q, bias, x_global_scale)), or None before a call of that signature made one. For callers that keep
    it beside the facts of its key (`nn.NVFP4Linear`'s fast path); the key is `_plan_key`."""
    return _PLANS.get(_plan_key(x, w_q, bias, x_global_scale, form))


def _scale_source(x_global_scale, s_enc: "torch.Tensor | None", device: torch.device) -> Callable:
    """s_enc_of(x, x_global_scale) for a plan: a float scale's cached tensor as is (it is in the plan key), None
    when the first kernel computes S_enc from amax itself, else the per-call computation."""
    if isinstance(x_global_scale, (int, float)) and s_enc is not None:
        return lambda x, g: s_enc
    if x_global_scale is None and s_enc is None:
        return lambda x, g: None
    return lambda x, g: _encode_scale(x, g, device)


def _drop_with(w_q, key: tuple) -> None:
    # The plans do not hold the weight's data/scales (each call passes its w_q), so these fire when the user drops
    # the weight; global_scale may be held through w_dec (a view of it), which keeps its id from being reused.
    for t in (w_q.data, w_q.scales, w_q.global_scale):
        weakref.finalize(t, _PLANS.pop, key, None)


def _remember_plan(key: tuple, w_q, form: str, entries: tuple, m: int, n: int, k: int, device: torch.device,
                   x_global_scale, s_enc: "torch.Tensor | None") -> None:
    if key in _PLANS or len(_PLANS) >= 4096:
        return
    w_dec = decode_scale_arg(w_q, device)
    s_enc_of = _scale_source(x_global_scale, s_enc, device)
    block_m, block_n, _ = _blocks(m, n)
    bf16 = torch.bfloat16
    if form == "mixed":
        (launch,) = entries

        def plan(x, w_q, bias, g):
            s = s_enc_of(x, g)
            return launch.run(x, w_q.data, w_q.scales, w_dec if s is None else s, w_dec, bias)
    elif form == "fused":
        (entry,) = entries
        grid = (triton.cdiv(m, block_m) * (n // block_n), 1, 1)

        def plan(x, w_q, bias, g):
            s = s_enc_of(x, g)
            out = torch.empty((m, n), dtype=bf16, device=device)
            run_entry(entry, grid, device, (x, w_dec if s is None else s, w_q.data, w_q.scales, w_dec,
                                            out if bias is None else bias, out, m, n, k, x.stride(0)))
            return out
    elif form == "qdq_decode":
        (launch,) = entries
        frag_weight = _frag.frag_weight_lookup(w_q)

        def plan(x, w_q, bias, g):
            return launch.run(x, frag_weight(), w_dec, bias, s_enc_of(x, g))
    elif form == "dequant_decode":
        q_entry, replay = entries
        q_grid = qdq_grid(m, k)
        # x_dq and alpha (S_dec(x) * S_dec(w)) are written by the first kernel and read by the decode kernel only
        scratch = StreamScratch(lambda: (torch.empty((m, k), dtype=bf16, device=device),
                                         torch.empty(1, dtype=torch.float32, device=device)), device, 2 * m * k + 4)

        def plan(x, w_q, bias, g):
            s = s_enc_of(x, g)
            xd, alpha = scratch.get()
            run_entry(q_entry, q_grid, device, (x, w_dec if s is None else s, w_dec, alpha, xd, m, k, x.stride(0)))
            return replay(xd, alpha, bias)
    else:
        q_entry, g_entry = entries
        q_grid, g_grid = (triton.cdiv(m, 32), k // 128, 1), (n // block_n, triton.cdiv(m, block_m), 1)
        # x_q, its scales and (S_ENC_FROM_AMAX) S_enc: written by the quantizer, read by the GEMM only
        scratch = StreamScratch(lambda: (torch.empty((m, k // 2), dtype=torch.uint8, device=device),
                                         torch.empty((m, k // 16), dtype=torch.float8_e4m3fn, device=device),
                                         torch.empty(1, dtype=torch.float32, device=device)),
                                device, m * k // 2 + m * k // 16 + 4)

        def plan(x, w_q, bias, g):
            s = s_enc_of(x, g)
            xq, xs, s_buf = scratch.get()
            s = s_buf if s is None else s
            run_entry(q_entry, q_grid, device, (x, s, xq, xs, m, k, x.stride(0)))
            out = torch.empty((m, n), dtype=bf16, device=device)
            run_entry(g_entry, g_grid, device, (xq, xs, s, w_q.data, w_q.scales, w_dec,
                                                out if bias is None else bias, out, m, n, k))
            return out
    _PLANS[key] = plan
    _drop_with(w_q, key)


def _quantize(x, s_enc, use_pdl: bool, device, from_amax: bool = False) -> tuple:
    m, k = x.shape
    xq = torch.empty((m, k // 2), dtype=torch.uint8, device=device)
    xs = torch.empty((m, k // 16), dtype=torch.float8_e4m3fn, device=device)
    block_m, block_k = 32, 128
    entry = _QUANT.launch(("quant", m, k, x.stride(0), use_pdl, from_amax), (triton.cdiv(m, block_m), k // block_k),
                          device, (x, s_enc, xq, xs, m, k, x.stride(0)),
                          dict(BLOCK_M=block_m, BLOCK_K=block_k, USE_PDL=use_pdl, S_ENC_FROM_AMAX=from_amax,
                               num_warps=4, launch_pdl=use_pdl))
    return xq, xs, entry


def quantize_nvfp4_pdl(x: torch.Tensor, s_enc: torch.Tensor, *,
                       use_pdl: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_q uint8 [M, K/2], scales fp8e4nv [M, K/16]) from bf16 x [M, K] (K a multiple of 128) with encode
    scale `s_enc` (fp32 [1]), on the GPU; the bit-exact twin of `bwtriton.formats.quantize_nvfp4` given the same
    encode scale (use that on CPU)."""
    op = "quantize_nvfp4_pdl"
    check = InputChecker(op)
    check.tensor("x", x, ndim=2, dtypes=(torch.bfloat16,), dtype_hint="convert with x.to(torch.bfloat16)")
    check.inner_contiguous("x", x)
    check.multiple_of("K (x.shape[1])", x.shape[1], 128)
    check.tensor("s_enc", s_enc, dtypes=(torch.float32,), dtype_hint="convert with s_enc.float()")
    if s_enc.numel() != 1:
        raise check.fail(f"s_enc must hold one value (the global encode scale), got shape {tuple(s_enc.shape)}")
    device = check.on_cuda({"x": x, "s_enc": s_enc},
                           hint="on CPU, bwtriton.formats.quantize_nvfp4 computes the same bytes")
    return _quantize(x, s_enc.reshape(1), use_pdl, device)[:2]


def nvfp4_linear_two_kernel(x: torch.Tensor, w_q, bias: Optional[torch.Tensor] = None, *,
                            x_global_scale: "Optional[float | torch.Tensor]" = None,
                            use_pdl: bool = True) -> torch.Tensor:
    """Same result as `nvfp4_linear`, as quantize kernel + GEMM chained with PDL (`use_pdl=False`: plain launches)."""
    m, n, k, device = _validate("nvfp4_linear_two_kernel", x, w_q, bias, x_global_scale)
    s_enc = _encode_scale(x, x_global_scale, device, in_kernel=True)
    return _two_kernel(x, w_q, bias, m, n, k, device, s_enc, use_pdl)[0]
