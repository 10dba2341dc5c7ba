"""Block-scaled GEMMs on `QuantizedTensor` inputs: `nvfp4_matmul`, `mxfp4_matmul`, `mxfp8_matmul`.

C[M, N] = dequant(A)[M, K] @ dequant(B)[N, K]^T, both operands quantized along K (B is the weight in [N, K]).
Every kernel here uses `tl.dot_scaled`, so:

* sm_100a gets Triton's native block-scaled tcgen05 MMA (`kind::mxf4nvf4.block_scale.scale_vec::4X` for NVFP4,
  `kind::mxf4` / `kind::mxf8f6f4` for MX). With the 128x4 ("blocked") scale layout the TMA kernel loads the
  scales as the 5-D tiles cuBLAS uses and Triton moves them to TMEM with `tcgen05.cp ... 32x128b.warpx4`.
* Hopper (sm_90) and other targets get bwtriton's `lower-dot-scaled-portable` pass for NVFP4 (Triton 3.6 itself
  crashes there) and Triton's own decomposition for MX. Kernels are launched through `_launcher.CachedLauncher`:
  the first launch per shape compiles inside `bwtriton_pipeline()` (bwtriton's stage hook), later ones call the
  compiled kernel directly.

On Hopper, `nvfp4_matmul` takes a third way for large shapes (`use_dequant_gemm`): both operands dequantized
exactly to bf16 (`nvfp4_dequant`, global scales left out) and `kernels.matmul` with alpha on the fp32
accumulator; H200, 8192^3: the dot_scaled kernel ran at 189 TFLOP/s, the bf16 GEMM at 682.

The helpers these kernels share with `nvfp4_linear` and `decode` (scale offsets, E2M1 decode, alpha) live in
`_common`, the pipeline launch in `_launcher`, the input checks in `_validate`.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..errors import InputError
from ._common import alpha_tensor, scale_offsets, tcgen05_block_scaled
from ._device import device_capability
# bwtriton_pipeline: re-exported because tests/passes/test_nvfp4_lowering.py imports it from this module.
from ._launcher import CachedLauncher, bwtriton_pipeline  # noqa: F401
from ._tiles import grouped_tile_coords
from ._validate import CPU_REFERENCE_HINT, InputChecker, check_out_dtype, check_quantized

__all__ = ["nvfp4_matmul", "mxfp4_matmul", "mxfp8_matmul"]

#: tl.dot_scaled element format per QuantizedTensor format.
_DOT_FORMAT = {"nvfp4": "e2m1", "mxfp4": "e2m1", "mxfp8_e4m3": "e4m3", "mxfp8_e5m2": "e5m2"}


# --------------------------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------------------------

@triton.jit
def block_scaled_matmul_kernel(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, c_ptr, alpha_ptr, M, N, K,
                               FMT: tl.constexpr, VEC: tl.constexpr, SCALE_BLOCKED: tl.constexpr,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                               GROUP_M: tl.constexpr):
    """Pointer-load block-scaled GEMM: C = alpha * dot_scaled(A, B^T). A [M, K/epb], B [N, K/epb] row-major bytes
    (epb = 2 for e2m1), scales plain [rows, K/VEC] or 128x4-blocked. M, N, K multiples of the blocks."""
    EPB: tl.constexpr = 2 if FMT == "e2m1" else 1
    pid = tl.program_id(0)
    num_m = M // BLOCK_M
    num_n = N // BLOCK_N
    pid_m, pid_n = grouped_tile_coords(pid, num_m, num_n, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rkd = tl.arange(0, BLOCK_K // EPB)
    rks = tl.arange(0, BLOCK_K // VEC)
    kd = K // EPB
    n_kb = K // VEC
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K // BLOCK_K):
        a = tl.load(a_ptr + rm[:, None].to(tl.int64) * kd + (k * (BLOCK_K // EPB) + rkd)[None, :])
        b = tl.load(b_ptr + rn[:, None].to(tl.int64) * kd + (k * (BLOCK_K // EPB) + rkd)[None, :])
        kb = k * (BLOCK_K // VEC) + rks
        sa = tl.load(a_scale_ptr + scale_offsets(rm[:, None], kb[None, :], n_kb, SCALE_BLOCKED))
        sb = tl.load(b_scale_ptr + scale_offsets(rn[:, None], kb[None, :], n_kb, SCALE_BLOCKED))
        acc = tl.dot_scaled(a, sa, FMT, b.T, sb, FMT, acc)
    alpha = tl.load(alpha_ptr)
    tl.store(c_ptr + rm[:, None].to(tl.int64) * N + rn[None, :], (acc * alpha).to(c_ptr.dtype.element_ty))


@triton.jit
def block_scaled_matmul_tma_kernel(a_desc, a_scale_desc, b_desc, b_scale_desc, c_ptr, alpha_ptr, M, N, K,
                                   FMT: tl.constexpr, VEC: tl.constexpr, BLOCK_M: tl.constexpr,
                                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NUM_STAGES: tl.constexpr):
    """sm_100a block-scaled GEMM: TMA tiles for data and for the 128x4-blocked scales, viewed as 5-D
    [1, rows/128, K/VEC/4, 2, 256] so each tile is whole 512-byte blocks. The in-kernel un-swizzle
    (reshape + trans(0, 3, 2, 1, 4)) is what lets Triton copy the scales to TMEM with tcgen05.cp."""
    EPB: tl.constexpr = 2 if FMT == "e2m1" else 1
    REP_M: tl.constexpr = BLOCK_M // 128
    REP_N: tl.constexpr = BLOCK_N // 128
    REP_K: tl.constexpr = BLOCK_K // VEC // 4
    pid = tl.program_id(0)
    num_m = M // BLOCK_M
    pid_m = pid % num_m
    pid_n = pid // num_m
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, K // BLOCK_K, num_stages=NUM_STAGES):
        a = a_desc.load([pid_m * BLOCK_M, k * (BLOCK_K // EPB)])
        b = b_desc.load([pid_n * BLOCK_N, k * (BLOCK_K // EPB)])
        sa = a_scale_desc.load([0, pid_m * REP_M, k * REP_K, 0, 0])
        sb = b_scale_desc.load([0, pid_n * REP_N, k * REP_K, 0, 0])
        sa = sa.reshape(REP_M, REP_K, 32, 4, 4).trans(0, 3, 2, 1, 4).reshape(BLOCK_M, BLOCK_K // VEC)
        sb = sb.reshape(REP_N, REP_K, 32, 4, 4).trans(0, 3, 2, 1, 4).reshape(BLOCK_N, BLOCK_K // VEC)
        acc = tl.dot_scaled(a, sa, FMT, b.T, sb, FMT, acc)
    alpha = tl.load(alpha_ptr)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + rm[:, None].to(tl.int64) * N + rn[None, :], (acc * alpha).to(c_ptr.dtype.element_ty))


def tma_signature(fmt: str, block_m: int = 128, block_n: int = 128, block_k: int = 256,
                  out: str = "bf16") -> tuple[dict, dict]:
    """(signature, constexprs) of `block_scaled_matmul_tma_kernel` for offline compiles (lit, tests)."""
    dot_fmt = _DOT_FORMAT[fmt]
    epb = 2 if dot_fmt == "e2m1" else 1
    vec = 16 if fmt == "nvfp4" else 32
    elem = "u8" if epb == 2 else ("fp8e4nv" if dot_fmt == "e4m3" else "fp8e5")
    scale = "fp8e4nv" if fmt == "nvfp4" else "u8"
    rep_k = block_k // vec // 4
    sig = {"a_desc": f"tensordesc<{elem}[{block_m}, {block_k // epb}]>",
           "a_scale_desc": f"tensordesc<{scale}[1, {block_m // 128}, {rep_k}, 2, 256]>",
           "b_desc": f"tensordesc<{elem}[{block_n}, {block_k // epb}]>",
           "b_scale_desc": f"tensordesc<{scale}[1, {block_n // 128}, {rep_k}, 2, 256]>",
           "c_ptr": f"*{out}", "alpha_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32"}
    const = {"FMT": dot_fmt, "VEC": vec, "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k,
             "NUM_STAGES": 3}
    return sig, const


def pointer_signature(fmt: str, blocked: bool = False, block_m: int = 128, block_n: int = 128,
                      block_k: int = 128, out: str = "bf16") -> tuple[dict, dict]:
    """(signature, constexprs) of `block_scaled_matmul_kernel` for offline compiles (lit, tests)."""
    dot_fmt = _DOT_FORMAT[fmt]
    elem = "u8" if dot_fmt == "e2m1" else ("fp8e4nv" if dot_fmt == "e4m3" else "fp8e5")
    scale = "fp8e4nv" if fmt == "nvfp4" else "u8"
    sig = {"a_ptr": f"*{elem}", "a_scale_ptr": f"*{scale}", "b_ptr": f"*{elem}", "b_scale_ptr": f"*{scale}",
           "c_ptr": f"*{out}", "alpha_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32"}
    const = {"FMT": dot_fmt, "VEC": 16 if fmt == "nvfp4" else 32, "SCALE_BLOCKED": blocked, "BLOCK_M": block_m,
             "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": 8}
    return sig, const


# --------------------------------------------------------------------------------------------------------------
# Torch entry points
# --------------------------------------------------------------------------------------------------------------

_POINTER = CachedLauncher(block_scaled_matmul_kernel)
_TMA = CachedLauncher(block_scaled_matmul_tma_kernel)


def _scales_for_kernel(q) -> torch.Tensor:
    """Scales as the kernel reads them: fp8e4nv for NVFP4, uint8 (e8m0 bytes) for MX."""
    return q.scales if q.format == "nvfp4" else q.scales.view(torch.uint8)


def _pick_blocks(m: int, n: int, k: int) -> tuple[int, int, int]:
    block_m = 128 if m % 128 == 0 else 64
    block_n = 128 if n % 128 == 0 else 64
    block_k = 128 if k % 128 == 0 else 64
    return block_m, block_n, block_k


#: Smallest M*N/(M+N) (the GEMM's arithmetic intensity per dequantized element) at which `nvfp4_matmul` on a
#: target without a native NVFP4 MMA dequantizes both operands to bf16 and runs `kernels.matmul`. Estimate from
#: the H200 figures (dot_scaled path 186-189 TFLOP/s, bf16 GEMM 682, ~3 TB/s for the dequant's 2.56 bytes per
#: element): the dequant path wins once M N / (M + N) > ~115; 128 keeps small-M shapes on dot_scaled.
DEQUANT_GEMM_MIN_INTENSITY = 128


def use_dequant_gemm(m: int, n: int, k: int, native_nvfp4_mma: bool, capability: int) -> bool:
    """Whether `nvfp4_matmul`'s auto method takes dequantize + bf16 GEMM (needs TMA: sm_90+) for this shape."""
    return (not native_nvfp4_mma and capability >= 90 and k % 128 == 0
            and m * n >= DEQUANT_GEMM_MIN_INTENSITY * (m + n))


def _block_scaled_matmul(op: str, a_q, b_q, out_dtype: torch.dtype, formats: tuple[str, ...],
                         method: str = "dot_scaled") -> torch.Tensor:
    check_quantized(op, "a_q", a_q, formats)
    check_quantized(op, "b_q", b_q, formats)
    if a_q.format != b_q.format:
        raise InputError(f"{op}: a_q is {a_q.format} but b_q is {b_q.format}; quantize both the same way")
    check_out_dtype(op, out_dtype)
    if method not in ("auto", "dot_scaled", "dequant"):
        raise InputError(f"{op}: method must be 'auto', 'dot_scaled' or 'dequant', got {method!r}")
    (m, k), (n, kb) = a_q.shape, b_q.shape
    if k != kb:
        raise InputError(f"{op}: K mismatch: a_q is [{m}, {k}] and b_q is [{n}, {kb}] (b_q is the [N, K] weight, "
                         f"quantized along K)")
    for what, value, block in (("M", m, 64), ("N", n, 64), ("K", k, 64)):
        if value % block:
            raise InputError(f"{op}: {what}={value} must be a multiple of {block}; pad the operand")
    if a_q.scale_layout != b_q.scale_layout:
        raise InputError(f"{op}: a_q scales are {a_q.scale_layout} but b_q scales are {b_q.scale_layout}; call "
                         f".to_blocked() (or .to_plain()) on one of them")
    device = InputChecker(op).on_cuda({"a_q.data": a_q.data, "a_q.scales": a_q.scales, "b_q.data": b_q.data,
                                       "b_q.scales": b_q.scales}, hint=CPU_REFERENCE_HINT)
    alpha = alpha_tensor(a_q, b_q, device)
    fmt = _DOT_FORMAT[a_q.format]
    blocked = a_q.scale_layout == "blocked_128x4"
    native = tcgen05_block_scaled(device)
    if method != "dequant" and native and blocked and m % 128 == 0 and n % 128 == 0 and k % 256 == 0:
        c = torch.empty((m, n), dtype=out_dtype, device=device)
        _launch_tma(a_q, b_q, c, alpha, fmt)
        return c
    if method == "auto":
        method = "dequant" if a_q.format == "nvfp4" and use_dequant_gemm(m, n, k, native,
                                                                          device_capability(device)) else "dot_scaled"
    if method == "dequant":
        if a_q.format != "nvfp4" or k % 128:
            raise InputError(f"{op}: method='dequant' takes NVFP4 operands with K % 128 == 0; use method='auto'")
        from .matmul import matmul  # cycle: kernels.matmul imports this module
        from .nvfp4_dequant import dequantize_nvfp4_bf16  # cycle: kernels.nvfp4_dequant imports this module
        # e2m1 * e4m3 is exact in bf16 and bf16 products are exact in fp32: the global scales (alpha) go on the
        # fp32 accumulator, as in the dot_scaled kernels (see nvfp4_dequant).
        return matmul(dequantize_nvfp4_bf16(a_q), dequantize_nvfp4_bf16(b_q).t(), out_dtype=out_dtype,
                      a_scale=alpha)
    c = torch.empty((m, n), dtype=out_dtype, device=device)
    block_m, block_n, block_k = _pick_blocks(m, n, k)
    grid = ((m // block_m) * (n // block_n),)
    _POINTER.launch(("ptr", m, n, k, fmt, a_q.format, blocked, out_dtype), grid, device,
                    (a_q.data, _scales_for_kernel(a_q), b_q.data, _scales_for_kernel(b_q), c, alpha, m, n, k),
                    dict(FMT=fmt, VEC=a_q.block_size, SCALE_BLOCKED=blocked, BLOCK_M=block_m, BLOCK_N=block_n,
                         BLOCK_K=block_k, GROUP_M=8, num_warps=8, num_stages=3))
    return c


def _launch_tma(a_q, b_q, c, alpha, fmt: str) -> None:
    from triton.tools.tensor_descriptor import TensorDescriptor
    m, k = a_q.shape
    n = b_q.shape[0]
    block_m, block_n, block_k = 128, 128, 256
    epb = 2 if fmt == "e2m1" else 1
    vec = a_q.block_size
    rep_k = block_k // vec // 4

    def scale_desc(q, rows):
        s5 = _scales_for_kernel(q).reshape(1, -(-rows // 128), -(-(k // vec) // 4), 2, 256)
        return TensorDescriptor.from_tensor(s5, [1, (block_m if q is a_q else block_n) // 128, rep_k, 2, 256])
    a_desc = TensorDescriptor.from_tensor(a_q.data, [block_m, block_k // epb])
    b_desc = TensorDescriptor.from_tensor(b_q.data, [block_n, block_k // epb])
    grid = ((m // block_m) * (n // block_n),)
    _TMA.launch(("tma", m, n, k, fmt, a_q.format, c.dtype), grid, c.device,
                (a_desc, scale_desc(a_q, m), b_desc, scale_desc(b_q, n), c, alpha, m, n, k),
                dict(FMT=fmt, VEC=vec, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, NUM_STAGES=3, num_warps=4))


def nvfp4_matmul(a_q, b_q, out_dtype: torch.dtype = torch.bfloat16, *, method: str = "auto") -> torch.Tensor:
    """C[M, N] = dequant(a_q) @ dequant(b_q)^T for NVFP4 `a_q` [M, K] and weight `b_q` [N, K].

    The global scales are folded into the epilogue (alpha = a.global_scale * b.global_scale). M, N, K must be
    multiples of 64; both operands use the same scale layout (plain, or blocked_128x4 which sm_100a prefers).
    method: 'dot_scaled' (one block-scaled GEMM kernel), 'dequant' (both operands dequantized exactly to bf16,
    global scales kept out, then `kernels.matmul` with alpha on the fp32 accumulator; K % 128 == 0) or 'auto':
    sm_100a's native MMA when it applies, else 'dequant' for large shapes (`use_dequant_gemm`)."""
    return _block_scaled_matmul("nvfp4_matmul", a_q, b_q, out_dtype, ("nvfp4",), method)


def mxfp4_matmul(a_q, b_q, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """C = dequant(a_q) @ dequant(b_q)^T for MXFP4 operands (E2M1 data, UE8M0 scales per 32)."""
    return _block_scaled_matmul("mxfp4_matmul", a_q, b_q, out_dtype, ("mxfp4",))


def mxfp8_matmul(a_q, b_q, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """C = dequant(a_q) @ dequant(b_q)^T for MXFP8 operands (E4M3 or E5M2 data, UE8M0 scales per 32)."""
    return _block_scaled_matmul("mxfp8_matmul", a_q, b_q, out_dtype, ("mxfp8_e4m3", "mxfp8_e5m2"))
