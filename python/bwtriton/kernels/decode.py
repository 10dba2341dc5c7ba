"""Weight-only NVFP4 GEMM: out[M, N] = x[M, K] (bf16) @ dequant(w_q)[N, K]^T, built for decode shapes (small M)
and running at every M.

Paths the tuner times per shape (`decode_candidates`): for M <= MAX_DECODE_M (64) the CUDA-core GEMV, the
mma.sync kernel below and the frag kernel (`_decode_frag`); above M = 16 the mixed-input wgmma GEMM
(`mixed_gemm`: the dequantized weight as wgmma's register A operand, x^T in shared memory, split-K reduced in
the kernel; any M with an explicit config); on sm_90a for M = 16 .. 256 its Gluon form (`gluon_mixed`: the
weight decoded from a fragment-ordered copy straight into the register A operand, one wgmma group in flight),
timed first; from M = DEQUANT_GEMM_MIN_M the exact dequantize-to-bf16 + `kernels.matmul` path, and on sm_90a
from M = 256 `dq_wgmma` (the weight decoded into shared memory, 4.5 bits per weight in HBM). H200 winners
(graph replay, inputs rotated past L2): gemv / frag at M <= 16, wgmma at M = 64 - 128 (with a split of 2-8)
before gluon_mixed, whose own sweep (docs/nvfp4_hopper.md) beat those earlier wgmma times at M = 64 - 256.
'fragw' (`_decode_frag_wide`, M <= 128: the frag weight with its scale folded into the A fragments, every MMA
accumulating in place) is exact but measured slower than wgmma at M = 64 / 128 and level with frag at M = 16, so
the tuner times it only with BWTRITON_DECODE_FRAGW=1 (docs/nvfp4_hopper.md has the numbers and the ncu limit).
The history below is about the small-M kernels.

With M this small the GEMM is bound by reading the weight, so the kernel is built to move as few bytes as
possible: 4 bits per weight plus one UE4M3 byte per 16 weights = 4.5 bits, against 16 for a bf16 weight, so the
ceiling is ~3.5x over a bf16 GEMM that streams its weight at the same bandwidth. To get there the dequantization
must stay cheaper than the memory traffic; it is done in registers with `dequant_nvfp4_bf16` (~4 instructions per
weight, exact), and the MMA is "swapped": the dequantized weight tile [BLOCK_N, BLOCK_K] is the register A operand
and x^T [BLOCK_K, 16..64] the small B operand, so no MMA work is wasted on padding M up to 64/128 rows.
SPLIT_K > 1 splits K over more CTAs (fp32 atomics) when N alone gives too few CTAs to saturate HBM.

Three paths; the auto path times them per shape. For M <= 16 the tensor-core "frag" kernel
(`_decode_frag`: the weight repacked once into mma.sync fragment order, ~3 instructions per weight) is the usual
winner at large N x K (H200, graph replay, N = K = 8192: 18 us at M = 1 and 4, 25 us at M = 16). M <= GEMV_MAX_M
(4) takes a CUDA-core GEMV (`nvfp4_gemv_kernel`, Gluon so that one explicit 4-D
layout [M, rows, groups, 8 bytes] covers every tensor: no layout conversions, 16-byte loads, no spills); it decodes
each weight once (4 instructions, exact) and pays one FFMA per weight per activation row. Larger M takes the
tensor-core kernel above, whose auto config is now BLOCK_N 32, split 2 at N = K = 8192 (measured fastest).

Measured on the H200 (N = K = 8192, do_bench wall time per call, two runs; cuBLAS bf16 43.7-44.9 us):
GEMV M = 1: 27-31 us (1.4-1.65x cuBLAS); M = 2: 32-58 us; M = 4: 43-60 us; tensor cores M = 4..16: 46-47 us in
the first run, 80-97 us in the second. The spread between runs (same code, same configs) says host launch
overhead (Python validation + Triton launch) is part of these numbers; the 2.5x goal (<= 17.6 us) is not met.
Per weight the GEMV issues ~4 decode + M FMA + ~0.5 other instructions, ~11 us of issue at M = 1 if the SMs were
saturated, so M = 1 is latency/occupancy-bound, not issue-bound.
Auto path (this version): the first call per shape times `decode_candidates` (GEMV with 1/2/4 rows per thread,
wide 2x16-byte loads per row (GROUPS_PER_THREAD 4), two K steps in flight, tensor cores with BLOCK_N 32/64 and
split-K) under CUDA-graph replay over weight copies rotated past L2 (`tuning_copies`) and keeps the fastest
(`TUNING_LOG` has every time); later calls with the same signature replay a plan (no validation, one allocation,
one launch). BWTRITON_DECODE_TUNE=0 keeps the heuristic
`default_config`. Register budget of the GEMV candidates from `ptxas -v` (see `_GEMV_VALUE_BUDGET`).
Earlier tensor-core finding (kept): a variant that kept the nibble planes apart (two K/2 MMAs, no join) removed
17 of 18 layout conversions but measured slower (106-205 us): Triton then read the bytes from shared memory one
at a time (ld.shared.b8) in the MMA operand layout.
"""
from __future__ import annotations

import dataclasses
import math
import os
import warnings
import weakref
from typing import Callable

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..errors import InputError
from ..targets import H100_SM_COUNT
from ._device import device_capability, sm_count
from ._validate import InputChecker, check_bf16_activations, check_out_dtype, check_quantized
from ._common import decode_scale_arg, dequant_nvfp4_bf16, scale_offsets, view_as_words
from ._launcher import CachedLauncher, rotated_kernel_time_us, run_entry
from ._tiles import SWAP_AB_MIN_M
from . import _decode_frag as _frag
from . import _launcher
from . import _decode_frag_wide as _wide
from . import dq_wgmma as _dq
from . import gluon_mixed as _gluon
from . import mixed_gemm as _mixed
from .matmul import matmul
from .nvfp4_dequant import dequantize_nvfp4_bf16

__all__ = ["nvfp4_decode_matmul", "decode_scaled", "MAX_DECODE_M", "GEMV_MAX_M"]

MAX_DECODE_M = 64


@triton.jit
def nvfp4_decode_kernel(x_ptr, w_ptr, ws_ptr, out_ptr, alpha_ptr, bias_ptr, M, N, K, stride_xm, stride_om,
                        SCALE_BLOCKED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr = False):
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
    if HAS_BIAS:
        if pid_k == 0:  # split-K: one K slice adds the bias
            acc += tl.load(bias_ptr + rn).to(tl.float32)[:, None]
    ptrs = out_ptr + rm[None, :] * stride_om + rn[:, None]
    if SPLIT_K == 1:
        tl.store(ptrs, acc.to(out_ptr.dtype.element_ty), mask=m_mask[None, :])
    else:
        tl.atomic_add(ptrs, acc, mask=m_mask[None, :], sem="relaxed")


# --------------------------------------------------------------------------------------------------------------
# CUDA-core GEMV path (small M), written in Gluon so that every tensor has the layout we choose: with plain
# Triton the 3-D broadcast and the group reshape got 7 layout conversions (shared-memory round trips) per step.
# --------------------------------------------------------------------------------------------------------------

@gluon.jit
def _e2m1x4_to_f32(packed):
    """Four packed bytes (8 E2M1 codes) -> (low-nibble values, high-nibble values) in fp32, exactly.

    Each nibble is shifted to bits 28..31 and arithmetic-shifted right by 6, which puts its sign on bit 31 and
    its 3 magnitude bits on 22..24; the and-mask drops the sign copies and the neighbours. That pattern reads as
    value * 2^-126 (code 1 = 0.5 is the subnormal 2^-127, so an exponent add cannot rebias it), and mul.rn.f32 by
    2^126 (no .ftz) makes it exact: 4 instructions per weight, no conversion instructions. The block scale is
    applied by the caller once per 16-element partial dot."""
    return gl.inline_asm_elementwise(
        asm="""{
        .reg .b32 t;
        shl.b32 t, $8, 28; shr.s32 t, t, 6; and.b32 t, t, 0x81C00000; mul.rn.f32 $0, t, 0f7E800000;
        shl.b32 t, $8, 24; shr.s32 t, t, 6; and.b32 t, t, 0x81C00000; mul.rn.f32 $4, t, 0f7E800000;
        shl.b32 t, $8, 20; shr.s32 t, t, 6; and.b32 t, t, 0x81C00000; mul.rn.f32 $1, t, 0f7E800000;
        shl.b32 t, $8, 16; shr.s32 t, t, 6; and.b32 t, t, 0x81C00000; mul.rn.f32 $5, t, 0f7E800000;
        shl.b32 t, $8, 12; shr.s32 t, t, 6; and.b32 t, t, 0x81C00000; mul.rn.f32 $2, t, 0f7E800000;
        shl.b32 t, $8, 8;  shr.s32 t, t, 6; and.b32 t, t, 0x81C00000; mul.rn.f32 $6, t, 0f7E800000;
        shl.b32 t, $8, 4;  shr.s32 t, t, 6; and.b32 t, t, 0x81C00000; mul.rn.f32 $3, t, 0f7E800000;
                           shr.s32 t, $8, 6; and.b32 t, t, 0x81C00000; mul.rn.f32 $7, t, 0f7E800000;
        }""",
        constraints="=r,=r,=r,=r,=r,=r,=r,=r,r",
        args=[packed],
        dtype=(gl.float32, gl.float32), is_pure=True, pack=4)


@gluon.jit
def _gemv_loads(w_ptr, x_ptr, ws_ptr, w_off, x_off, x_mask, rn_s, rg_s, kh, n_kb, SCALE_BLOCKED: gl.constexpr):
    """One K step's weight bytes, activation pairs and scales (kh = byte offset along the packed row)."""
    w = gl.load(w_ptr + (w_off + kh))
    xp = gl.load(x_ptr + (x_off + kh), mask=x_mask, other=0)
    s = gl.load(ws_ptr + scale_offsets(gl.expand_dims(rn_s, 1), gl.expand_dims(kh // 8 + rg_s, 0), n_kb,
                                        SCALE_BLOCKED))
    return w, xp, s


@gluon.jit
def _gemv_step(acc, w, xp, s):
    """acc[m, n, g] += s[n, g] * (8-byte partial dot of row n with activation row m)."""
    lo, hi = _e2m1x4_to_f32(w)
    xe = (xp << 16).to(gl.float32, bitcast=True)       # bf16 is the top half of an fp32: exact
    xo = (xp & -65536).to(gl.float32, bitcast=True)
    # Two separate sums: each in-thread reduction of products contracts to one FMUL + 7 FFMA, where the sum of
    # (lo*xe + hi*xo) would cost an extra FADD per byte.
    dot = (gl.sum(gl.expand_dims(lo, 0) * gl.expand_dims(xe, 1), axis=3)
           + gl.sum(gl.expand_dims(hi, 0) * gl.expand_dims(xo, 1), axis=3))
    return acc + dot * gl.expand_dims(s.to(gl.float32), 0)


@gluon.jit
def nvfp4_gemv_kernel(x_ptr, w_ptr, ws_ptr, out_ptr, alpha_ptr, bias_ptr, M, N, K, stride_xm, stride_wn, stride_om,
                      SCALE_BLOCKED: gl.constexpr, BLOCK_M: gl.constexpr, ROWS_PER_THREAD: gl.constexpr,
                      THREADS_N: gl.constexpr, SPLIT_K: gl.constexpr,
                      TWO_STEPS: gl.constexpr = False, GROUPS_PER_THREAD: gl.constexpr = 2,
                      HAS_BIAS: gl.constexpr = False):
    """out[m, n] = alpha * sum_g s[n, g] * sum_{k in g} e2m1[n, k] x[m, k] on CUDA cores, fp32 throughout.

    One 4-D layout [BLOCK_M, rows, groups, 8 bytes] holds everything: a thread owns ROWS_PER_THREAD weight rows x
    GROUPS_PER_THREAD 16-element groups (8 bytes each: 2 groups = one 16-byte load per row, 4 = two adjacent
    16-byte loads, more bytes in flight per thread) and all BLOCK_M activation rows of the same K range, so the decode
    is paid once per weight and each activation load serves ROWS_PER_THREAD rows. x_ptr is the bf16 activation
    viewed as int32 pairs [M, K/2] (stride_xm in pairs): pair p meets byte p's low and high nibble. The 8-byte
    partial dots get their UE4M3 scale in one FMA per group; groups and K are summed once at the end."""
    THREADS_K: gl.constexpr = 32 // THREADS_N
    L4: gl.constexpr = gl.BlockedLayout([BLOCK_M, ROWS_PER_THREAD, GROUPS_PER_THREAD, 8],
                                        [1, THREADS_N, THREADS_K, 1], [1, gl.num_warps(), 1, 1], [3, 2, 1, 0])
    LW: gl.constexpr = gl.SliceLayout(0, L4)       # [BLOCK_N, G, 8] weight bytes
    LX: gl.constexpr = gl.SliceLayout(1, L4)       # [BLOCK_M, G, 8] activation pairs
    LACC: gl.constexpr = gl.SliceLayout(3, L4)     # [BLOCK_M, BLOCK_N, G]
    LS: gl.constexpr = gl.SliceLayout(0, LACC)     # [BLOCK_N, G] scales
    LOUT: gl.constexpr = gl.SliceLayout(2, LACC)   # [BLOCK_M, BLOCK_N]
    BLOCK_N: gl.constexpr = ROWS_PER_THREAD * THREADS_N * gl.num_warps()
    G: gl.constexpr = GROUPS_PER_THREAD * THREADS_K
    KH: gl.constexpr = 8 * G                       # bytes (= activation pairs) per row per step
    pid_n = gl.program_id(0)
    pid_k = gl.program_id(1)
    k_span = K // SPLIT_K
    kh_lo = pid_k * (k_span // 2)
    n_kb = K // 16

    rn_w = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, gl.SliceLayout(2, LW)))
    rg_w = gl.arange(0, G, layout=gl.SliceLayout(0, gl.SliceLayout(2, LW)))
    rb_w = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, LW)))
    w_off = (gl.expand_dims(gl.expand_dims(rn_w.to(gl.int64) * stride_wn, 1), 2)
             + gl.expand_dims(gl.expand_dims(rg_w * 8, 0), 2) + gl.expand_dims(gl.expand_dims(rb_w, 0), 1))
    rm_x = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, gl.SliceLayout(2, LX)))
    rg_x = gl.arange(0, G, layout=gl.SliceLayout(0, gl.SliceLayout(2, LX)))
    rb_x = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, LX)))
    x_off = (gl.expand_dims(gl.expand_dims(rm_x * stride_xm, 1), 2)
             + gl.expand_dims(gl.expand_dims(rg_x * 8, 0), 2) + gl.expand_dims(gl.expand_dims(rb_x, 0), 1))
    x_mask = gl.expand_dims(gl.expand_dims(rm_x < M, 1), 2) & (x_off >= 0)
    rn_s = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, LS))
    rg_s = gl.arange(0, G, layout=gl.SliceLayout(0, LS))

    acc = gl.zeros([BLOCK_M, BLOCK_N, G], gl.float32, LACC)
    kh_end = kh_lo + k_span // 2
    STEP: gl.constexpr = 2 * KH if TWO_STEPS else KH
    for kh in range(kh_lo, kh_end, STEP):
        # TWO_STEPS issues the loads of two K steps before either is decoded: twice the bytes in flight per warp
        # (the kernel is latency-bound at low occupancy). Carrying the bytes across iterations instead (a
        # register double buffer) made LLVM repack every byte with PRMT.
        w, xp, s = _gemv_loads(w_ptr, x_ptr, ws_ptr, w_off, x_off, x_mask, rn_s, rg_s, kh, n_kb, SCALE_BLOCKED)
        if TWO_STEPS:
            w2, xp2, s2 = _gemv_loads(w_ptr, x_ptr, ws_ptr, w_off, x_off, x_mask, rn_s, rg_s, kh + KH, n_kb,
                                      SCALE_BLOCKED)
        acc = _gemv_step(acc, w, xp, s)
        if TWO_STEPS:
            acc = _gemv_step(acc, w2, xp2, s2)
    res = gl.sum(acc, axis=2) * gl.load(alpha_ptr)
    rm_o = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, LOUT))
    rn_o = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, LOUT))
    if HAS_BIAS:
        if pid_k == 0:  # split-K: one K slice adds the bias
            res = res + gl.expand_dims(gl.load(bias_ptr + rn_o).to(gl.float32), 0)
    o_off = gl.expand_dims(rm_o * stride_om, 1) + gl.expand_dims(rn_o, 0)
    o_mask = gl.expand_dims(rm_o < M, 1) & gl.expand_dims(rn_o >= 0, 0)
    if SPLIT_K == 1:
        gl.store(out_ptr + o_off, res.to(out_ptr.dtype.element_ty), mask=o_mask)
    else:
        gl.atomic_add(out_ptr + o_off, res, mask=o_mask, sem="relaxed")

#: Largest M that the CUDA-core GEMV path takes by default: its FMA work grows with M (one FFMA per weight per
#: activation row on top of ~4 decode instructions per weight), the tensor-core path's does not.
GEMV_MAX_M = 4


def decode_config(m: int, n: int, k: int, num_sms: int = H100_SM_COUNT) -> dict:
    """Tensor-core path launch config: BLOCK_N 32 weight rows per CTA (measured fastest on the H200 at N = K =
    8192 for M = 1, 4, 16: 46-49 us against 58-66 us for BLOCK_N 64), K split until there are >= 2 CTAs per SM."""
    block_m = max(16, triton.next_power_of_2(m))
    block_n, block_k = 32, 256
    split = 1
    while (n // block_n) * split < 2 * num_sms and k % (split * 2 * block_k) == 0 and split < 8:
        split *= 2
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split, "num_warps": 4,
            "num_stages": 4}


def gemv_config(m: int, n: int, k: int, num_sms: int = H100_SM_COUNT) -> dict:
    """CUDA-core path launch config. A warp covers 32 * 32 / THREADS_N weights of a row per step, so THREADS_N is
    the smallest of 1, 2, 4 that divides K into whole steps; 4 rows per thread share each activation load; K is
    split (fp32 atomics) only when N alone gives fewer than 2 CTAs per SM."""
    threads_n = next(t for t in (1, 2, 4) if k % (1024 // t) == 0)
    # 2 rows per thread for M = 1 (27-31 us at N = K = 8192 on the H200, against 40-53 us with 4 rows), 4 rows
    # for M = 2..4 (fastest in one of two runs, equal in the other; see the module docstring).
    rows, warps = (2 if m == 1 else 4), 4
    block_n = rows * threads_n * warps
    while n % block_n:
        rows //= 2
        block_n //= 2
    block_k = 1024 // threads_n
    split = 1
    while (n // block_n) * split < 2 * num_sms and k % (split * 2 * block_k) == 0 and split < 8:
        split *= 2
    return {"BLOCK_M": triton.next_power_of_2(m), "ROWS_PER_THREAD": rows, "THREADS_N": threads_n,
            "SPLIT_K": split, "num_warps": warps, "TWO_STEPS": False}


#: Largest M for which the tuner tries the CUDA-core GEMV path (BLOCK_M 16 spills there: see `_gemv_fits`).
GEMV_TUNE_MAX_M = 8

#: Per-thread register budget of the GEMV in "values": BLOCK_M * ROWS_PER_THREAD * GROUPS_PER_THREAD * steps in
#: flight. From `ptxas -v` on sm_90a (num_warps 4): budgets <= 16 compile without spills (M = 1: all 9 shapes
#: below, 32-103 registers; M = 4: 100-165 registers; M = 8: R1 G2, 198 registers), while 32 spills (M = 8 with
#: R4 G2: 500 bytes of spill stores).
_GEMV_VALUE_BUDGET = 16

#: (ROWS_PER_THREAD, GROUPS_PER_THREAD, TWO_STEPS) shapes the tuner tries: one 16-byte load per row (G2), two
#: adjacent loads per row (G4: wider per-thread loads), or two K steps' loads issued before decoding either.
#: Wide loads and two steps together (1, 4, True), (2, 4, True) put 4x the bytes of R1 G2 in flight per thread
#: (73 / 96 registers at M = 1): a CTA at M = 1 lives for only K / 1024 steps, each waiting a full HBM latency.
#: The fourth field is warps per CTA (default 4): 8 warps puts twice the warps per SM at the same register count; R4
#: G2 two-step with 8 warps was the fastest M = 1 config of an H200 sweep at N = K = 8192 (18.1 us against 19.0 us
#: for the best 4-warp one; cuBLAS bf16 33.4 us, all under graph replay).
_GEMV_SHAPES = ((1, 2, False), (2, 2, False), (4, 2, False), (1, 4, False), (2, 4, False), (1, 2, True),
                (2, 2, True), (1, 4, True), (2, 4, True), (2, 2, True, 8), (4, 2, True, 8))


def _gemv_fits(m: int, rows: int, groups: int, two_steps: bool) -> bool:
    return triton.next_power_of_2(m) * rows * groups * (2 if two_steps else 1) <= _GEMV_VALUE_BUDGET


def _gemv_candidate(m: int, n: int, k: int, num_sms: int, rows: int, groups: int, two_steps: bool,
                    warps: int = 4) -> "dict | None":
    """A GEMV config of that shape which tiles (N, K), K split until >= 2 CTAs per SM; None if none tiles."""
    for threads_n in (1, 2, 4):
        block_n = rows * threads_n * warps
        block_k = 512 * groups // threads_n * (2 if two_steps else 1)
        if n % block_n == 0 and k % block_k == 0:
            split = 1
            while (n // block_n) * split < 2 * num_sms and k % (split * 2 * block_k) == 0 and split < 8:
                split *= 2
            return {"path": "gemv", "BLOCK_M": triton.next_power_of_2(m), "ROWS_PER_THREAD": rows,
                    "THREADS_N": threads_n, "SPLIT_K": split, "num_warps": warps, "TWO_STEPS": two_steps,
                    "GROUPS_PER_THREAD": groups}
    return None


def decode_candidates(m: int, n: int, k: int, num_sms: int = H100_SM_COUNT, hopper: bool = True) -> list[dict]:
    """Every config the auto path times for this shape (each a full config with its 'path'): the frag path's
    (M <= 16; BWTRITON_DECODE_FRAG=0 leaves it out, and with it the weight's repacked copy), the GEMV's
    (M <= GEMV_TUNE_MAX_M) and the mma.sync kernel's (M <= MAX_DECODE_M), then at every M the mixed-input wgmma
    GEMM's (above the frag path's M <= 16), on sm_90a (`hopper`) the Gluon mixed GEMM's (M = 16 .. 256), from
    DEQUANT_GEMM_MIN_M dequantize + bf16 GEMM, and on sm_90a from dq_wgmma.MIN_M the shared-memory decode GEMM."""
    # wgmma only past the frag path's range: at M <= 16 the frag / GEMV kernels measured 2x faster on the H200
    # (N = K = 8192: 15.2 against 31.8 us at M = 1, 23.0 against 33.8 us at M = 16)
    mixed = _mixed.mixed_candidates(m, n, k, num_sms) if m > _frag.FRAG_MAX_M else []
    # the Gluon wgmma kernel (sm_90a only: `hopper`), M = 16 .. 256, first: it is the fastest there on the H200
    mixed = (_gluon.gluon_candidates(m, n, k, num_sms) if hopper and m >= SWAP_AB_MIN_M else []) + mixed
    frag_on = os.environ.get("BWTRITON_DECODE_FRAG") != "0"
    # the scaled-weight frag kernel, tuned only on request (BWTRITON_DECODE_FRAGW=1): on the H200 it never won
    # (N = K = 8192: 58 against 49 us for wgmma at M = 64, 104 against 85 at M = 128, a tie with frag at M = 16;
    # docs/nvfp4_hopper.md), and each candidate is a compile on a shape's first call
    wide_on = frag_on and os.environ.get("BWTRITON_DECODE_FRAGW") == "1"
    wide = _wide.wide_candidates(m, n, k) if wide_on and 8 <= m <= _wide.WIDE_MAX_M else []
    if m > MAX_DECODE_M:
        mixed = wide + mixed
    if m >= DEQUANT_GEMM_MIN_M:
        mixed = mixed + [{"path": "dequant_gemm", "SPLIT_K": 1}]
    if hopper:  # the weight decoded into shared memory for SS wgmma: M >= dq_wgmma.MIN_M
        mixed = mixed + _dq.dq_candidates(m, n, k)
    if m > MAX_DECODE_M:  # the CUDA-core and mma.sync kernels are built for decode shapes only
        return mixed
    cands = [] if not frag_on else _frag.frag_candidates(m, n, k)
    cands += wide
    if m <= GEMV_TUNE_MAX_M:
        for rows, groups, two_steps, *warps in _GEMV_SHAPES:
            if _gemv_fits(m, rows, groups, two_steps):
                cfg = _gemv_candidate(m, n, k, num_sms, rows, groups, two_steps, *warps)
                if cfg is not None and cfg not in cands:
                    cands.append(cfg)
    base = decode_config(m, n, k, num_sms)
    for block_n, split_factor in ((32, 1), (64, 1), (32, 2)):
        cfg = dict(base, path="mma", BLOCK_N=block_n)
        split = cfg["SPLIT_K"] * split_factor
        if n % block_n == 0 and k % (split * cfg["BLOCK_K"]) == 0:
            cfg["SPLIT_K"] = split
            if cfg not in cands:
                cands.append(cfg)
    return cands + mixed


def default_config(m: int, n: int, k: int, num_sms: int = H100_SM_COUNT) -> dict:
    """The untuned choice (used under CUDA-graph capture before a shape was tuned, or with
    BWTRITON_DECODE_TUNE=0): GEMV for M <= GEMV_MAX_M, mma.sync up to MAX_DECODE_M, the wgmma mixed GEMM above."""
    if m > MAX_DECODE_M:
        return _mixed.mixed_candidates(m, n, k, num_sms)[0]
    if m <= GEMV_MAX_M:
        return dict(gemv_config(m, n, k, num_sms), path="gemv", GROUPS_PER_THREAD=2)
    return dict(decode_config(m, n, k, num_sms), path="mma")


#: Tuned config per (capability, M, N, K, scale layout, out dtype); TUNING_LOG keeps every candidate's time (us).
_TUNED: dict[tuple, dict] = {}
TUNING_LOG: dict[tuple, dict[str, float]] = {}
#: Candidates that raised while being tuned (label -> error), per tuning key: skipped, and warned about.
TUNING_FAILURES: dict[tuple, dict[str, str]] = {}

_MMA_LAUNCHER = CachedLauncher(nvfp4_decode_kernel, pipeline=False)
_GEMV_LAUNCHER = CachedLauncher(nvfp4_gemv_kernel, pipeline=False)
_FRAG_LAUNCHER = _frag.LAUNCHER
_WIDE_LAUNCHER = CachedLauncher(_wide.nvfp4_frag_wide_kernel, pipeline=False)
_PATHS = ("gemv", "mma", "frag", "fragw", "wgmma", "gluon_mixed", "dq_wgmma", "dequant_gemm")

#: Smallest M for which the tuner also tries dequantizing the weight to bf16 and running the bf16 GEMM
#: (`kernels.matmul`): 2 bytes per weight written and read back per call, paid off only where the GEMM is long.
DEQUANT_GEMM_MIN_M = 64


def _dequant_gemm(x: torch.Tensor, data: torch.Tensor, scales: torch.Tensor, layout: str, shape: tuple,
                  alpha: torch.Tensor, bias, out_dtype: torch.dtype) -> torch.Tensor:
    """x @ (e2m1 * e4m3 of the weight)^T * alpha (+ bias) via the exact bf16 dequantization and the bf16 GEMM."""
    from types import SimpleNamespace  # a stand-in QuantizedTensor for the replay (which holds no weight)
    w = SimpleNamespace(data=data, scales=scales, scale_layout=layout, shape=shape)
    if bias is None:
        return matmul(x, dequantize_nvfp4_bf16(w).T, a_scale=alpha, out_dtype=out_dtype)
    # the bias is added to the fp32 result: one rounding to the output type, as in the other paths
    return (matmul(x, dequantize_nvfp4_bf16(w).T, a_scale=alpha, out_dtype=torch.float32) + bias).to(out_dtype)


def config_label(cfg: dict) -> str:
    """Short name of a config, e.g. 'gemv R2 G2 split1', 'mma BN32 split2' or 'frag T4 C2 w8 split16'."""
    if cfg["path"] == "wgmma":
        return _mixed.mixed_label(cfg)
    if cfg["path"] == "gluon_mixed":
        return _gluon.gluon_label(cfg)
    if cfg["path"] == "dq_wgmma":
        return _dq.dq_label(cfg)
    if cfg["path"] == "dequant_gemm":
        return "dequant_gemm (bf16 weight + kernels.matmul)"
    if cfg["path"] in ("frag", "fragw"):
        return (f"{cfg['path']} T{cfg['TILES_PER_THREAD']} C{cfg['CHUNKS_PER_STEP']} w{cfg['num_warps']} "
                f"split{cfg['SPLIT_K']}{' fixup' if _frag.fixup(cfg) else ''}"
                f"{' pf' + str(cfg['PREFETCH']) if cfg.get('PREFETCH') else ''}")
    if cfg["path"] == "gemv":
        return (f"gemv R{cfg['ROWS_PER_THREAD']} G{cfg.get('GROUPS_PER_THREAD', 2)} T{cfg['THREADS_N']}"
                f"{' 2step' if cfg.get('TWO_STEPS') else ''} w{cfg['num_warps']} split{cfg['SPLIT_K']}")
    return f"mma BN{cfg['BLOCK_N']} BK{cfg['BLOCK_K']} w{cfg['num_warps']} split{cfg['SPLIT_K']}"


#: The tuner times every candidate round-robin over copies of the weight that put this many L2 caches' worth of
#: weight bytes between two uses of one copy: the regime of a model whose other layers' weights pass through L2
#: in between (timed with one L2-resident copy, the H200 ranked configs differently: at M = 1, N = K = 8192 its
#: pick took 21.9 us with the weights rotated, against 18.3 for the one it picks this way).
TUNING_L2_MULTIPLE = 1.5
#: At most this many copies: a weight under 1.5 L2 / 15 (5 MB on the H200) is timed partly L2-resident.
TUNING_MAX_COPIES = 16


def tuning_copies(w_q, device: torch.device) -> list:
    """w_q and the copies of its codes and scales that the tuner rotates over (just w_q off CUDA)."""
    if device.type != "cuda":
        return [w_q]
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    nbytes = w_q.data.numel() * w_q.data.element_size() + w_q.scales.numel() * w_q.scales.element_size()
    count = min(TUNING_MAX_COPIES, 1 + math.ceil(TUNING_L2_MULTIPLE * l2 / max(nbytes, 1)))
    return [w_q] + [dataclasses.replace(w_q, data=w_q.data.clone(), scales=w_q.scales.clone())
                    for _ in range(count - 1)]


def _tuned(op: str, x, w_q, m: int, n: int, k: int, out_dtype, device, num_sms: int) -> dict:
    key = (device.index, m, n, k, w_q.scale_layout, out_dtype)
    cfg = _TUNED.get(key)
    if cfg is not None:
        return cfg
    if os.environ.get("BWTRITON_DECODE_TUNE") == "0" or torch.cuda.is_current_stream_capturing():
        return default_config(m, n, k, num_sms)  # not cached: a later call outside capture still tunes
    timings = {}
    hopper = device.type == "cuda" and device_capability(device) == 90  # the Gluon wgmma kernel's target
    copies = tuning_copies(w_q, device)
    for cand in decode_candidates(m, n, k, num_sms, hopper=hopper):
        try:
            _decode(op, x, w_q, cand, out_dtype, device)  # compile + warm up outside the timing
            us = rotated_kernel_time_us([lambda c=cand, w=w: _decode(op, x, w, c, out_dtype, device)
                                         for w in copies])
            timings[config_label(cand)] = (us, cand)
        except Exception as exc:  # noqa: BLE001 - a candidate that fails to compile or launch is skipped, loudly
            TUNING_FAILURES.setdefault(key, {})[config_label(cand)] = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"nvfp4 decode tuning: candidate {config_label(cand)} failed for M={m} N={n} K={k} and "
                          f"was skipped ({type(exc).__name__}: {str(exc)[:200]})", RuntimeWarning, stacklevel=3)
            continue
    if not timings:
        cfg = default_config(m, n, k, num_sms)
    else:
        cfg = min(timings.values(), key=lambda tc: tc[0])[1]
    TUNING_LOG[key] = {label: t for label, (t, _) in timings.items()}
    _TUNED[key] = cfg
    return cfg


def tuned_decode_config(m: int, n: int, k: int, *, device_index: int = 0, scale_layout: str = "plain",
                        out_dtype: torch.dtype = torch.bfloat16) -> "dict | None":
    """The config the auto path settled on for this shape (None before its first call)."""
    return _TUNED.get((device_index, m, n, k, scale_layout, out_dtype))


def nvfp4_decode_matmul(x: torch.Tensor, w_q, *, out_dtype: torch.dtype = torch.bfloat16,
                        config: dict | None = None) -> torch.Tensor:
    """out[M, N] = x @ dequant(w_q)^T for bf16 activations x [M, K] (any M >= 1) and an NVFP4 weight w_q [N, K].

    The weight's global scale is applied in the epilogue. N must be a multiple of 64 and K of 256. Without
    `config`, the first call for a shape times every `decode_candidates` config under CUDA-graph replay (over
    `tuning_copies` of the weight, rotated past L2) and keeps the fastest (`tuned_decode_config`); later calls
    reuse it. `config` overrides that: 'path' ('gemv' for the CUDA-core kernel, 'mma' / 'frag' for the mma.sync
    kernels (M <= 64 / 16), 'wgmma' for the mixed-input GEMM, 'gluon_mixed' for its Gluon form (sm_90a,
    M = 1 .. 256), 'dequant_gemm' for dequantize + bf16 GEMM; default as `default_config`) plus any keys of that
    path's defaults (`gemv_config` / `decode_config` / `mixed_gemm.mixed_candidates` /
    `gluon_mixed.gluon_candidates`, GROUPS_PER_THREAD for the GEMV).

    Host cost: a call whose (weight object, x shape/strides/dtype/device/alignment, out_dtype) matches an
    earlier auto-path call replays that call's plan: no re-validation, one allocation, the config's launches."""
    if config is None and isinstance(x, torch.Tensor):
        plan = cached_plan(x, w_q, out_dtype)
        if plan is not None:
            return plan(x)
    op = "nvfp4_decode_matmul"
    m, n, k, device = _validated(op, x, w_q, out_dtype)
    num_sms = sm_count(device)
    if config is None:
        cfg = _tuned(op, x, w_q, m, n, k, out_dtype, device, num_sms)
    else:
        cfg = _user_config(op, config, m, n, k, num_sms)
    out, entry = _decode(op, x, w_q, cfg, out_dtype, device)
    if config is None and cfg is _TUNED.get((device.index, m, n, k, w_q.scale_layout, out_dtype)):
        _remember_plan(x, w_q, cfg, entry, out_dtype, device)
    return out


def decode_scaled(x: torch.Tensor, w_q, alpha: torch.Tensor, bias: "torch.Tensor | None",
                  device: torch.device) -> tuple[torch.Tensor, Callable]:
    """(out bf16 [M, N], replay) with out = (x @ (e2m1 * scale of w_q)^T) * alpha[0] + bias, for inputs the caller
    validated (x bf16 [M, K], N % 64 == 0, K % 256 == 0). The config is the auto path's
    (tuned once per shape); `replay(x, alpha, bias)` launches it again for a new call of the same signature.
    `nvfp4_linear`'s 'dequant_decode' form uses it with alpha = S_dec(x) * S_dec(w)."""
    m, k = x.shape
    n = w_q.shape[0]
    cfg = _tuned("nvfp4_linear", x, w_q, m, n, k, torch.bfloat16, device, sm_count(device))
    out, entry = _decode("nvfp4_linear", x, w_q, cfg, torch.bfloat16, device, alpha, bias)
    return out, make_replay(w_q, cfg, entry, m, torch.bfloat16, device)


def qdq_decode_candidates(x: torch.Tensor, w_q, device: torch.device, limit: int = 2) -> list[dict]:
    """The frag configs `decode_qdq` is timed with for this shape: of the weight-only tuner's frag configs (tuned
    here for x's shape if that has not happened) whose CTAs can quantize their x slice (`_decode_frag.qdq_fits`),
    the `limit` fastest, and the fastest one-launch config (split-K reduced inside the launch, or none) if those
    are not, each with L2 prefetches of its first weight chunks ahead of the x prologue (PREFETCH). Each is one
    more compile, hence the limit."""
    m, k = x.shape
    n = w_q.shape[0]
    _tuned("nvfp4_linear", x, w_q, m, n, k, torch.bfloat16, device, sm_count(device))
    timed = TUNING_LOG.get((device.index, m, n, k, w_q.scale_layout, torch.bfloat16), {})
    cands = [c for c in _frag.frag_candidates(m, n, k) if _frag.qdq_fits(m, k, c)]
    if timed:  # untuned (BWTRITON_DECODE_TUNE=0, graph capture): the candidates' own order
        cands = sorted((c for c in cands if config_label(c) in timed), key=lambda c: timed[config_label(c)])
    one_launch = next((c for c in cands if c["SPLIT_K"] == 1 or _frag.fixup(c)), None)
    picked = cands[:limit] + ([one_launch] if one_launch is not None and one_launch not in cands[:limit] else [])
    return [dict(c, PREFETCH=_frag.QDQ_PREFETCH_CHUNKS) for c in picked]


def decode_qdq(x: torch.Tensor, w_q, s_enc: "torch.Tensor | None", w_dec: torch.Tensor,
               bias: "torch.Tensor | None", cfg: dict,
               device: torch.device) -> tuple[torch.Tensor, _frag.FragLaunch]:
    """(out bf16 [M, N], launch): the W4A4 linear in one launch of the frag kernel, x (bf16, validated by the
    caller, M <= 16) quantized to NVFP4 with S_enc (`s_enc`, or from amax(x) in the kernel when None) and
    dequantized to its exact values in the kernel's prologue; out = (x_q @ w^T) * div_rn(1, S_enc) * w_dec + bias,
    bit-equal to `nvfp4_dequant.quant_dequant_nvfp4` followed by the frag kernel. `launch.run(x, fw, w_dec, bias,
    s_enc)` launches it again."""
    m, k = x.shape
    n = w_q.shape[0]
    _check_frag_tiles("nvfp4_linear", cfg, m, n, k)
    if not _frag.qdq_fits(m, k, cfg):
        raise InputError(f"nvfp4_linear: frag config {cfg} gives each CTA {_frag.act_rows(m)} x "
                         f"{k // cfg['SPLIT_K']} activations to quantize, over {_frag.QDQ_MAX_ELEMENTS}; "
                         f"use a larger SPLIT_K or form='dequant_decode'")
    launch = _frag.frag_launch(cfg, m, n, k, x.stride(0), torch.bfloat16, bias is not None, device, quant_x=True,
                               s_enc_from_amax=s_enc is None)
    return launch.run(x, _frag.frag_weight(w_q), w_dec, bias, s_enc), launch


#: Replayable launches per call signature (see `nvfp4_decode_matmul`); an entry goes when its weight does.
_PLANS: dict[tuple, Callable[[torch.Tensor], torch.Tensor]] = {}


def cached_plan(x: torch.Tensor, w_q, out_dtype: torch.dtype = torch.bfloat16) -> "Callable | None":
    """The replay `nvfp4_decode_matmul(x, w_q, out_dtype=...)` runs for these arguments (called as plan(x)), or
    None before an auto-path call of that signature made one (`nn.NVFP4Linear`'s fast path keeps it)."""
    return _PLANS.get(_plan_key(x, w_q, out_dtype))


def _plan_key(x: torch.Tensor, w_q, out_dtype: torch.dtype) -> tuple:
    """What a replay plan depends on: the weight object and x's shape, strides, dtype, device, 16-byte alignment."""
    return (id(w_q), x.shape, x.stride(), x.dtype, x.device, x.data_ptr() % 16, out_dtype)


def _remember_plan(x: torch.Tensor, w_q, cfg: dict, entry: tuple, out_dtype: torch.dtype,
                   device: torch.device) -> None:
    key = _plan_key(x, w_q, out_dtype)
    if key in _PLANS or len(_PLANS) >= 4096:
        return
    replay = make_replay(w_q, cfg, entry, x.shape[0], out_dtype, device)
    alpha = decode_scale_arg(w_q, device)
    _PLANS[key] = lambda x: replay(x, alpha, None)
    weakref.finalize(w_q, _PLANS.pop, key, None)  # the plan holds the weight's tensors: drop it with the weight


def make_replay(w_q, cfg: dict, entry: tuple, m: int, out_dtype: torch.dtype,
                device: torch.device) -> Callable:
    """replay(x, alpha, bias) -> out: launch `entry` (made by `decode_launch` for `cfg`, an x of M rows and the
    same bias-or-not) again for new activations, epilogue scale and bias (one allocation, the config's
    launches)."""
    n, k = w_q.shape
    split, path = cfg["SPLIT_K"], cfg["path"]
    layout, shape = w_q.scale_layout, tuple(w_q.shape)
    # Weak references: the plans that hold this replay are dropped with the weight's tensors (nvfp4_linear keys
    # them on those tensors), which a strong reference here would keep alive forever.
    data_ref, scales_ref, w_stride = weakref.ref(w_q.data), weakref.ref(w_q.scales), w_q.data.stride(0)
    if path == "wgmma":  # entry is a MixedLaunch: one launch, split-K reduced inside the kernel
        return lambda x, alpha, bias: entry.run(x, data_ref(), scales_ref(), alpha, alpha, bias)
    if path in ("gluon_mixed", "dq_wgmma"):  # a GluonLaunch / DqLaunch: its run() makes the config's launches
        return lambda x, alpha, bias: entry.run(x, data_ref(), scales_ref(), alpha, bias)
    if path == "dequant_gemm":  # no entry: the dequantize kernel and kernels.matmul keep their own caches
        return lambda x, alpha, bias: _dequant_gemm(x, data_ref(), scales_ref(), layout, shape, alpha, bias,
                                                    out_dtype)
    if path == "frag":  # a FragLaunch, which handles its split-K itself
        frag_weight = _frag.frag_weight_lookup(w_q)
        return lambda x, alpha, bias: entry.run(x, frag_weight(), alpha, bias)
    grid = (n // _block_n(cfg), split, 1)
    alloc, buf_dtype = (torch.zeros, torch.float32) if split > 1 else (torch.empty, out_dtype)
    tables = _wide.lane_tables(device)
    # On the GPU the compiled launcher reads only x.data_ptr(), so x goes in as is where its int32 / int64 view
    # would be plain (row stride a multiple of 2 / 4 elements; the plan key fixes the stride and 16-byte
    # alignment): one torch view op (2-3 us on the H200's host) less per call. The emulator's launcher checks
    # dtypes, so it gets the view.
    raw_x = _launcher.reads_only_data_ptr(device)

    def replay(x: torch.Tensor, alpha: torch.Tensor, bias) -> torch.Tensor:
        w_data, w_scales = data_ref(), scales_ref()
        out = alloc((m, n), dtype=buf_dtype, device=device)
        b = out if bias is None else bias
        if path == "fragw":
            fw = _frag.frag_weight_of(w_data, w_scales, layout, shape)  # a lookup; a repack after in-place edits
            sx = x.stride(0)
            if raw_x and sx % 4 == 0 and x.stride(1) == 1:
                xw, sxw = x, sx // 4
            else:
                xw = view_as_words(x, torch.int64)
                sxw = xw.stride(0)
            run_entry(entry, grid, device, (xw, fw.words64, fw.scales32, out, alpha, b, tables, m, n, k, sxw, n,
                                            split))
        elif path == "gemv":
            sx = x.stride(0)
            if raw_x and sx % 2 == 0 and x.stride(1) == 1:
                xp, sxp = x, sx // 2
            else:
                xp = view_as_words(x, torch.int32)
                sxp = xp.stride(0)
            run_entry(entry, grid, device, (xp, w_data, w_scales, out, alpha, b, m, n, k, sxp, w_stride, n))
        else:
            run_entry(entry, grid, device, (x, w_data, w_scales, out, alpha, b, m, n, k, x.stride(0), n))
        return out.to(out_dtype) if split > 1 else out

    return replay


def _block_n(cfg: dict) -> int:
    if cfg["path"] in ("frag", "fragw"):
        return _frag.frag_block_n(cfg)
    if cfg["path"] == "gemv":
        return cfg["ROWS_PER_THREAD"] * cfg["THREADS_N"] * cfg["num_warps"]
    return cfg["BLOCK_N"]


_VALIDATED: "weakref.WeakValueDictionary[int, object]" = weakref.WeakValueDictionary()


def _validated(op: str, x, w_q, out_dtype) -> tuple[int, int, int, torch.device]:
    """Input checks; the weight's (the expensive part) once per QuantizedTensor object (it is frozen, and its
    tensors are checked for shape/dtype, which in-place edits cannot change)."""
    if _VALIDATED.get(id(w_q)) is not w_q:
        check_quantized(op, "w_q", w_q, ("nvfp4",))
        _VALIDATED[id(w_q)] = w_q
    m, n, k = check_bf16_activations(op, x, w_q)
    if m < 1:
        raise InputError(f"{op}: x has no rows (M={m}); pass at least one activation row")
    if n % 64 or k % 256:
        raise InputError(f"{op}: N={n} must be a multiple of 64 and K={k} of 256; pad the weight")
    check_out_dtype(op, out_dtype)
    device = x.device
    if device.type != "cuda" or w_q.data.device != device or w_q.scales.device != device:
        device = InputChecker(op).on_cuda({"x": x, "w_q.data": w_q.data, "w_q.scales": w_q.scales})
    return m, n, k, device


def _user_config(op: str, config: dict, m: int, n: int, k: int, num_sms: int) -> dict:
    user = dict(config)
    path = user.pop("path", "gemv" if m <= GEMV_MAX_M else "mma" if m <= MAX_DECODE_M else "wgmma")
    if path == "fragw" and m > _wide.WIDE_MAX_M:
        raise InputError(f"{op}: the fragw path takes M <= {_wide.WIDE_MAX_M}, got M={m}; use path 'wgmma' or "
                         f"'dequant_gemm' (or no config)")
    if path in ("gemv", "mma") and m > MAX_DECODE_M:
        raise InputError(f"{op}: the {path} path takes M <= {MAX_DECODE_M}, got M={m}; use path 'wgmma' or "
                         f"'dequant_gemm' (or no config)")
    if path not in _PATHS:
        raise InputError(f"{op}: config['path'] must be 'gemv' (CUDA cores), 'mma' / 'frag' / 'fragw' (mma.sync; "
                         f"the frag ones with a fragment-ordered weight copy), 'wgmma' (mixed-input GEMM), "
                         f"'gluon_mixed' (its Gluon form, sm_90a, M {_gluon.MIN_M} .. {_gluon.MAX_M}), 'dq_wgmma' "
                         f"(the weight decoded into shared memory, sm_90a, large M) or "
                         f"'dequant_gemm' (bf16 weight + matmul), got {path!r}")
    if path == "dequant_gemm":
        defaults = {"SPLIT_K": 1}
    elif path == "gluon_mixed":
        cands = _gluon.gluon_candidates(m, n, k, num_sms)
        if not cands:
            raise InputError(f"{op}: the gluon_mixed path takes M = {_gluon.MIN_M} .. {_gluon.MAX_M} and N, K that "
                             f"its tiles divide (N % 64, K % 128), got M={m}, N={n}, K={k}; use path 'wgmma'")
        defaults = {key: v for key, v in cands[0].items() if key != "path"}
    elif path == "dq_wgmma":
        cands = _dq.dq_candidates(max(m, _dq.MIN_M), n, k)
        if not cands:
            raise InputError(f"{op}: the dq_wgmma path needs N % 128 == 0 and K % 64 == 0, got N={n}, K={k}")
        defaults = {key: v for c in reversed(cands) for key, v in c.items() if key != "path"}  # cands[0]'s win
    elif path == "wgmma":
        cands = _mixed.mixed_candidates(m, n, k, num_sms)
        if not cands:
            raise InputError(f"{op}: the wgmma path needs N % 64 == 0 and K % 64 == 0, got N={n}, K={k}")
        defaults = {key: v for key, v in cands[0].items() if key != "path"}
    elif path == "frag":
        cands = _frag.frag_candidates(m, n, k)
        defaults = cands[0] if cands else _frag.frag_candidate(m, n, k, 1, 1, 4, 1)
        if defaults is None:
            raise InputError(f"{op}: the frag path takes M <= {_frag.FRAG_MAX_M}, got M={m}; use path 'mma'")
        defaults = dict({key: v for key, v in defaults.items() if key != "path"}, PREFETCH=0)
    elif path == "fragw":
        defaults = _wide.wide_candidate(m, n, k, 1, 1, 4, 1)
        if defaults is None:
            raise InputError(f"{op}: the fragw path needs N % 64 == 0 and K % 64 == 0, got N={n}, K={k}")
        defaults = {key: v for key, v in defaults.items() if key != "path"}
    elif path == "gemv":
        defaults = dict(gemv_config(m, n, k, num_sms), GROUPS_PER_THREAD=2)
    else:
        defaults = decode_config(m, n, k, num_sms)
    unknown = set(user) - set(defaults)
    if unknown:
        raise InputError(f"{op}: unknown config keys {sorted(unknown)} for path '{path}'; valid keys: "
                         f"{sorted(defaults)} and 'path'")
    return dict(defaults, path=path, **user)


def _decode(op: str, x: torch.Tensor, w_q, cfg: dict, out_dtype: torch.dtype,
            device: torch.device, alpha: "torch.Tensor | None" = None,
            bias: "torch.Tensor | None" = None) -> tuple[torch.Tensor, tuple]:
    """One launch of `cfg` (validated inputs); fp32 atomics into a zeroed buffer when K is split. Returns the
    output and the launcher entry (for a plan). `alpha` (fp32 [1], default the weight's global decode scale)
    multiplies the fp32 result before `bias` ([N], added in fp32) and the cast."""
    m, k = x.shape
    n = w_q.shape[0]
    if alpha is None:
        alpha = decode_scale_arg(w_q, device)
    if cfg["path"] == "dequant_gemm":
        return _dequant_gemm(x, w_q.data, w_q.scales, w_q.scale_layout, tuple(w_q.shape), alpha, bias,
                             out_dtype), None
    hopper_only = {"gluon_mixed": (_gluon.check_config, _gluon.launch_gluon, "wgmma", "wgmma"),
                   "dq_wgmma": (_dq.check_dq_config, _dq.launch_dq, "wgmma and TMA", "dequant_gemm")}
    if cfg["path"] in hopper_only:  # the Gluon kernels, written for sm_90a
        check, launch, needs, instead = hopper_only[cfg["path"]]
        check(op, cfg, m, n, k)
        if device.type != "cuda" or device_capability(device) != 90:
            raise InputError(f"{op}: the {cfg['path']} path is written for sm_90 (Hopper {needs}), this device is "
                             f"{device}; use path '{instead}' or leave config unset")
        return launch(x, w_q, alpha, bias, cfg, out_dtype=out_dtype)
    if cfg["path"] == "wgmma":
        if not _mixed.mixed_tiles(cfg, m, n, k):
            raise InputError(f"{op}: wgmma config {cfg} does not tile N={n}, K={k}: N must be a multiple of BLOCK_N, "
                             f"K of BLOCK_K*SPLIT_K")
        return _mixed.launch_mixed(x, w_q, alpha, alpha, bias, cfg, out_dtype=out_dtype)
    if cfg["path"] == "frag":  # a FragLaunch, which handles its split-K itself
        return _launch_frag(op, x, w_q, alpha, bias, cfg, out_dtype)
    split = cfg["SPLIT_K"]
    if split > 1:
        out = torch.zeros((m, n), dtype=torch.float32, device=device)
    else:
        out = torch.empty((m, n), dtype=out_dtype, device=device)
    blocked = w_q.scale_layout == "blocked_128x4"
    kwargs = {key: v for key, v in cfg.items() if key != "path"}
    kwargs["HAS_BIAS"] = bias is not None
    b = out if bias is None else bias
    if cfg["path"] == "fragw":
        entry = _launch_fragw(op, x, w_q, out, alpha, b, cfg, bias is not None)
    elif cfg["path"] == "gemv":
        entry = _launch_gemv(op, x, w_q, out, alpha, b, kwargs, blocked)
    else:
        grid = (n // cfg["BLOCK_N"], split)
        args = (x, w_q.data, w_q.scales, out, alpha, b, m, n, k, x.stride(0), out.stride(0))
        key = ("mma", m, n, k, x.stride(0), out.dtype, blocked, b.dtype, tuple(sorted(kwargs.items())))
        entry = _MMA_LAUNCHER.launch(key, grid, device, args, dict(kwargs, SCALE_BLOCKED=blocked))
    return (out.to(out_dtype) if split > 1 else out), entry


def _launch_gemv(op: str, x: torch.Tensor, w_q, out: torch.Tensor, alpha: torch.Tensor, bias: torch.Tensor,
                 cfg: dict, blocked: bool) -> tuple:
    m, k = x.shape
    n = w_q.shape[0]
    block_n = cfg["ROWS_PER_THREAD"] * cfg["THREADS_N"] * cfg["num_warps"]
    block_k = 512 * cfg.get("GROUPS_PER_THREAD", 2) // cfg["THREADS_N"] * (2 if cfg.get("TWO_STEPS") else 1)
    if n % block_n or k % (block_k * cfg["SPLIT_K"]) or cfg["BLOCK_M"] < m:
        raise InputError(f"{op}: gemv config {cfg} does not tile M={m}, N={n}, K={k}: N must be a multiple of "
                         f"ROWS_PER_THREAD*THREADS_N*num_warps={block_n}, K of {block_k}*SPLIT_K, BLOCK_M >= M")
    x_pairs = view_as_words(x, torch.int32)
    grid = (n // block_n, cfg["SPLIT_K"])
    args = (x_pairs, w_q.data, w_q.scales, out, alpha, bias, m, n, k, x_pairs.stride(0), w_q.data.stride(0),
            out.stride(0))
    key = ("gemv", m, n, k, x_pairs.stride(0), out.dtype, blocked, bias.dtype, tuple(sorted(cfg.items())))
    return _GEMV_LAUNCHER.launch(key, grid, x.device, args, dict(cfg, SCALE_BLOCKED=blocked))


def _check_frag_tiles(op: str, cfg: dict, m: int, n: int, k: int) -> None:
    block_n, split = _frag.frag_block_n(cfg), cfg["SPLIT_K"]
    max_m = _wide.WIDE_MAX_M if cfg["path"] == "fragw" else _frag.FRAG_MAX_M
    if m > max_m or n % block_n or k % (64 * cfg["CHUNKS_PER_STEP"] * split):
        raise InputError(f"{op}: frag config {cfg} does not tile M={m}, N={n}, K={k}: M must be <= "
                         f"{max_m}, N a multiple of 16*TILES_PER_THREAD*num_warps={block_n}, K of "
                         f"64*CHUNKS_PER_STEP*SPLIT_K={64 * cfg['CHUNKS_PER_STEP'] * split}")


def _launch_fragw(op: str, x: torch.Tensor, w_q, out: torch.Tensor, alpha: torch.Tensor, bias: torch.Tensor,
                  cfg: dict, has_bias: bool) -> tuple:
    m, k = x.shape
    n = w_q.shape[0]
    _check_frag_tiles(op, cfg, m, n, k)
    x64 = view_as_words(x, torch.int64)
    split = cfg["SPLIT_K"]
    args = _wide.wide_args(x64, _frag.frag_weight(w_q), out, alpha, bias, split, x.device)
    kwargs = _wide.wide_kwargs(cfg, m, has_bias)
    key = ("fragw", m, n, k, x64.stride(0), out.dtype, bias.dtype, tuple(sorted(kwargs.items())), split)
    return _WIDE_LAUNCHER.launch(key, (n // _frag.frag_block_n(cfg), split), x.device, args, kwargs)


def _launch_frag(op: str, x: torch.Tensor, w_q, alpha: torch.Tensor, bias: "torch.Tensor | None", cfg: dict,
                 out_dtype: torch.dtype) -> tuple[torch.Tensor, _frag.FragLaunch]:
    m, k = x.shape
    n = w_q.shape[0]
    _check_frag_tiles(op, cfg, m, n, k)
    launch = _frag.frag_launch(cfg, m, n, k, x.stride(0), out_dtype, bias is not None, x.device)
    return launch.run(x, _frag.frag_weight(w_q), alpha, bias), launch
