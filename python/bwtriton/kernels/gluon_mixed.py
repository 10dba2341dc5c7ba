"""Weight-only NVFP4 GEMM for M = 16 .. 256 on Hopper in Gluon: the weight decoded in registers straight into
wgmma's register-A fragments, one wgmma group kept in flight while the next K step is decoded.

out[M, N] = alpha * x[M, K] @ (e2m1 * e4m3 of w_q)[N, K]^T (+ bias), computed swapped (y^T = W x^T): a CTA owns
BLOCK_N weight rows (wgmma's M side, 64 per warpgroup) and BLOCK_M activation rows (wgmma's N side, 16 .. 256).

* The weight is repacked once (`_decode_frag.frag_weight_of(..., natural_k=True)`, cached per weight tensor):
  lane l = 4g + t of a 16 x 16 tile holds its 8 A-fragment codes (rows g, g + 8; k = 2t, 2t + 1, 2t + 8, 2t + 9,
  the wgmma / mma.m16n8k16 register-A layout) in one 32-bit word, and a lane's words of 4 consecutive K tiles are
  16 contiguous bytes, next to 8 bytes of its rows' scale pairs. Each thread's global loads are therefore 16- and
  8-byte vectors holding exactly its own fragments: no shared memory and no layout conversion for the weight.
* The decode is `_decode_frag_wide`'s exact table decode: prmt lookups of e2m1 * 2^120 in bf16, times
  (scale byte << 4) read as bf16 = scale * 2^-120 (`mul.rn.bf16x2`, exact: <= 6 significant bits), ~21
  instructions per 8 weights and lane. The joins / permute / reshape that turn the decoded registers into the
  [BLOCK_N, BLOCK_K] operand are register renamings (`convert_layout(..., assert_trivial=True)` pins that).
* Two K loops (`STAGES`). The register loop (0): x^T in 3 rotating shared buffers (with two warpgroups a buffer
  is rewritten only after both finished the wgmma that read it), written from registers loaded one K step ahead
  (as int32 pairs: bf16 elements made LLVM repack halves with PRMT), the weight of step k + 1 loaded while step
  k decodes. The staged loop (4 - 8, `_staged_loop`): weight words, scale pairs and x^T all by cp.async into a
  STAGES-slot shared ring, several steps ahead, so the bytes in flight cost shared memory, not registers. In
  both, `warpgroup_mma_wait(1)` leaves step k's wgmma running while step k + 1 decodes.
* The loop body is two K steps. A register A operand of a wgmma in flight must not be written, and neither
  Triton nor ptxas guards it: with one step per iteration the decode of step k + 1 reused the registers of step
  k's A (wrong output rows on the H200). Two steps give two A values in two register sets, each a dependency of
  the wait that retires its wgmma (`tests/kernels/test_kernels_gluon_mixed.py` checks the SASS for the hazard).
* `X_TMA` (staged loop only): x^T by TMA instead of cp.async. The cp.async form needs `fence.proxy.async` before
  each wgmma (x^T written by the generic proxy, read by the async one), a MEMBAR.ALL.CTA in SASS that also waits
  for the weight's cp.asyncs in flight; by TMA the step waits on its mbarrier only (5% faster at M = 128 on the
  H200, level at M = 16 - 64).
* Split K (the grid's third axis) where N / BLOCK_N x M / BLOCK_M is too few CTAs: every slice stores its fp32
  partial, and they are summed in slice order from 0.0 (a fixed order, equal bits either way) by the last slice
  of a tile to arrive (acq_rel counter; one launch) or by a second kernel (`_slice_sum`; config "SLICE_SUM").

Exact up to the fp32 summation order (e2m1 * e4m3 is exact in bf16, bf16 x bf16 products are exact in fp32);
NaN scales (0x7F, never produced by quantization) are not propagated.

sm_90a SASS per weight and thread in the K loop (decode, x staging, addressing and the wgmmas): 3.4 - 3.7 at
BLOCK_M 16 - 64, 4.5 at 128. Measured on the H200 (docs/nvfp4_hopper.md: graph replay, weights rotated past L2,
cuBLAS bf16 `F.linear` in the same run), staged loop: 1.60x cuBLAS at M = 16 (N = K = 8192), 1.23x at M = 64,
0.72 - 0.88x at M = 128. What limits it (ncu): at M = 16 half issue-bound (0.55 warps issued per scheduler per
cycle at 25% occupancy, the decode's instructions), at M = 128 latency-bound (one CTA and 1 warp per scheduler).
"""
from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from ..compat.gluon import backfill
from ..errors import InputError
from ..targets import H100_SM_COUNT
from . import _decode_frag as _frag
from . import _decode_frag_wide as _wide
from ._launcher import CachedLauncher, StreamScratch, run_entry
from ._slice_sum import SliceSum, split_scratch
from .dq_wgmma import x_descriptor
from ._tiles import SWAP_AB_MAX_M as MAX_M, k_split, swap_ab_block_m

__all__ = ["gluon_mixed_kernel", "gluon_candidates", "gluon_config", "launch_gluon", "gluon_label", "MIN_M",
           "MAX_M"]

backfill()  # buf.reinterpret(...) and gl.barrier() below are Triton 3.9 spellings; older releases get them here

#: The M range this kernel takes: the wgmma N side is BLOCK_M = 16 .. 256 (rows past M read row M - 1).
MIN_M = 1
#: Stage counts of the staged K loop (0: the register loop); shared memory per CTA bounds them (`stage_bytes`).
STAGE_CHOICES = (0, 4, 5, 6, 8)
#: Smallest activation tile for which the tuner also times the staged loop with x^T by TMA (`gluon_candidates`).
X_TMA_MIN_BLOCK_M = 128
#: Shared memory a config's ring may use (of the H200's 227 KB per CTA; the rest is the epilogue's scratch).
MAX_RING_BYTES = 200 * 1024
#: How a split config sums its K slices: the last slice to arrive, in the launch, or a second kernel
#: (`_slice_sum`, faster from 64-row activation tiles on the H200); configs without "SLICE_SUM" take the first.
SLICE_SUMS = ("last_slice", "second_kernel")
#: Smallest activation tile whose split configs the tuner builds with the second kernel (`gluon_config`).
SECOND_KERNEL_MIN_BLOCK_M = 64


def _decode_ptx() -> tuple[str, str]:
    """PTX of one element pair (one lane's word of one 16 x 16 tile, its scale pair and the two table words, each
    given twice: the pack of 2 that makes every output register a bf16x2): the 4 scaled bf16x2 registers, rows
    (g, g + 8) at k 2t.., then at k 2t + 8.."""
    body = (".reg .b32 th1, tl1, sm, sel, selh, hl, ll, hh, lh, sg, sa, sb, a;\n"
            f"mov.b32 th1, 0x{_wide.TABLE_HI_UPPER:08X}; mov.b32 tl1, 0xC0804000; mov.b32 sm, 0x80808080;\n")
    body += _wide._tile_ptx(0, "$4", "$6", "$8", "$10", ["$0", "$1", "$2", "$3"])
    return "{" + body + "}", ",".join(["=r"] * 4 + ["r"] * 8)


def _scale_select_ptx() -> str:
    """The scale pair of tile j from its int32 (pairs of tiles 2j', 2j' + 1): $2 = j % 2 picks the half (a
    constant per register, so ptxas folds the select into the shift)."""
    return "{ .reg .b32 sh; shl.b32 sh, $2, 4; shr.u32 $0, $1, sh; }"


_DECODE, _DECODE_CONSTRAINTS = (gl.constexpr(v) for v in _decode_ptx())
_SCALE_SELECT = gl.constexpr(_scale_select_ptx())


@gluon.jit
def _pair(v):
    """v [.., 2] = (v, v): the decode's pack of 2 then reads one copy and writes a bf16 pair per register."""
    return gl.join(v, v)


@gluon.jit
def _decode_operand(w, s, th, tl, A_LAYOUT: gl.constexpr):
    """Words w int32 [BN/2, BK/4] (element (8R + g, 16c + 4t + j): lane 4g + t's word of row tile R, K tile
    4c + j) and their scale pairs s -> the bf16 [BN, BK] wgmma A operand in A_LAYOUT (rows 16R + 8r8 + g,
    k = 64c + 16j + 8k8 + 2t + k1)."""
    BN2: gl.constexpr = w.shape[0]
    BK4: gl.constexpr = w.shape[1]
    v00, v10, v01, v11 = gl.inline_asm_elementwise(
        _DECODE, _DECODE_CONSTRAINTS, [_pair(w), _pair(s), _pair(th), _pair(tl)], dtype=(gl.bfloat16,) * 4,
        is_pure=True, pack=2)                    # (r8, k8) = (0, 0), (1, 0), (0, 1), (1, 1); each [.., k1]
    q0 = gl.join(v00, v10)                       # [.., k1, r8] at k8 = 0
    q1 = gl.join(v01, v11)
    v = gl.join(q0, q1)                          # [BN/2, BK/4, k1, r8, k8]
    v = gl.reshape(v, [BN2 // 8, 8, BK4 // 16, 4, 4, 2, 2, 2])   # [R, g, c, t, j, k1, r8, k8]
    v = gl.permute(v, [0, 6, 1, 2, 4, 7, 3, 5])                   # [R, r8, g, c, j, k8, t, k1]
    v = gl.reshape(v, [2 * BN2, 4 * BK4])
    return gl.convert_layout(v, A_LAYOUT, assert_trivial=True)


@gluon.jit
def _select_scales(s, half, WL: gl.constexpr):
    """A thread's scale pairs of 4 K tiles (2 int32 of 2 pairs each, as loaded) spread to the words'
    [BN/2, BK/4] in WL (a register renaming); tile j's pair in the low 16 bits of its element."""
    s = gl.join(s, s)
    s = gl.convert_layout(gl.reshape(s, [s.shape[0], 2 * s.shape[1]]), WL, assert_trivial=True)
    return gl.inline_asm_elementwise(_SCALE_SELECT, "=r,r,r", [s, half], dtype=gl.int32, is_pure=True, pack=1)


@gluon.jit
def _scales(sp, s_off, half, WL: gl.constexpr):
    """`_select_scales` of the pairs at sp + s_off (one 8-byte load per thread)."""
    return _select_scales(gl.load(sp + s_off), half, WL)


@gluon.jit
def _step(acc, a_prev, w, s, xv, th, tl, buf, A_LAYOUT: gl.constexpr, XS: gl.constexpr):
    """Decode this K step's weight (while the previous step's wgmma runs), stage x^T, issue the wgmma and wait
    for the previous one only. Returns (acc, this step's A operand).

    A register operand of a wgmma in flight must not be overwritten, and nothing tells ptxas so: the previous
    step's A (`a_prev`) is a dependency of this step's wait, and this step's A is carried into the next step, so
    both stay allocated until their wgmma is known complete (without that the decode reused them: wrong rows)."""
    a = _decode_operand(w, s, th, tl, A_LAYOUT)
    buf.store(xv)
    fence_async_shared()
    gl.barrier()  # every warp's part of x^T is in shared memory before either warpgroup's wgmma
    xt = buf.reinterpret(gl.bfloat16, [buf.shape[0], 2 * buf.shape[1]], XS).permute((1, 0))
    acc = warpgroup_mma(a, xt, acc, is_async=True)
    acc, a_prev = warpgroup_mma_wait(num_outstanding=1, deps=[acc, a_prev])
    return acc, a


@gluon.jit
def _store_out(acc, out_ptr, bias_ptr, alpha, pid_n, pid_m, M, stride_om, BLOCK_N: gl.constexpr,
               BLOCK_M: gl.constexpr, HAS_BIAS: gl.constexpr, LAYOUT: gl.constexpr):
    """out[m, n] = acc[n, m] * alpha (+ bias[n]) in the output dtype, activation rows past M masked."""
    rn = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, LAYOUT))
    rm = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, LAYOUT))
    res = acc * alpha
    if HAS_BIAS:
        res = res + gl.expand_dims(gl.load(bias_ptr + rn).to(gl.float32), 1)
    ptrs = out_ptr + (gl.expand_dims(rm.to(gl.int64) * stride_om, 0) + gl.expand_dims(rn, 1))
    mask = gl.expand_dims(rm < M, 0) & gl.expand_dims(rn >= 0, 1)
    gl.store(ptrs, res.to(out_ptr.dtype.element_ty), mask=mask)


@gluon.jit
def gluon_mixed_kernel(x_ptr, w_ptr, s_ptr, out_ptr, alpha_ptr, bias_ptr, table_ptr, work_ptr, count_ptr,
                       M, N, K, stride_xm, stride_om, x_desc, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
                       BLOCK_K: gl.constexpr, SPLIT: gl.constexpr, HAS_BIAS: gl.constexpr = False,
                       STAGES: gl.constexpr = 0, SUM_IN_KERNEL: gl.constexpr = True):
    """out[m, n] = alpha[0] * sum_k x[m, k] * (e2m1 * s)[n, k] (+ bias[n]), fp32 accumulation in wgmma.

    w_ptr: the natural-k repacked words (int32 [N/16, K/64, 32, 4]), s_ptr: their scale pairs (int16
    [N/16, K/64, 8, 4]), table_ptr: `_decode_frag_wide.lane_tables` (int32 [32, 2]). Grid (N / BLOCK_N,
    cdiv(M, BLOCK_M), S) with K % (BLOCK_K * S) == 0, N % BLOCK_N == 0, BLOCK_N = 64 * warpgroups * reps.
    SPLIT (S > 1): work_ptr fp32 [S, tiles, BLOCK_N * BLOCK_M] partials (`_slice_sum`'s layout); with
    SUM_IN_KERNEL the last slice of a tile sums them (count_ptr int32 [tiles] arrival counters, zero between
    launches, the last slice resets its tile's), without it a second kernel does (`_slice_sum`). STAGES 0: the
    register loop (the next step's operands loaded into registers); STAGES >= 4: the staged loop (`_staged_loop`:
    a STAGES-slot cp.async ring); x_desc None, or a TMA descriptor of x bf16 [M, K] (block [BLOCK_M, BLOCK_K])
    for the staged loop to bring x^T by TMA."""
    W: gl.constexpr = gl.num_warps()
    BN2: gl.constexpr = BLOCK_N // 2
    BK4: gl.constexpr = BLOCK_K // 4
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[W, 1],
                                                  instr_shape=[16, BLOCK_M, 16])
    A_LAYOUT: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    # the words: lane 4g + t at (g, t), warp w at row tile w; 4 K tiles (16 bytes) per thread
    WL: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [W, 1], [1, 0])
    # x as int32 pairs (16 bytes = 4 pairs per thread): 16-bit elements made LLVM repack halves on the store
    XT: gl.constexpr = BLOCK_K // 8                                   # threads along K of an x row
    XL: gl.constexpr = gl.BlockedLayout([1, 4], [32 // XT, XT], [W, 1], [1, 0])
    SW: gl.constexpr = min(128, 2 * BLOCK_K)
    XS32: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=SW, element_bitwidth=32, rank=2)
    XS: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=SW, element_bitwidth=16, rank=2)

    pid_n = gl.program_id(0)
    pid_m = gl.program_id(1)
    pid_k = gl.program_id(2)
    chunks = K // 64
    k_span = gl.multiple_of(K // gl.num_programs(2), BLOCK_K)  # the host splits K in whole steps
    steps = k_span // BLOCK_K
    k_lo = pid_k * k_span

    # word / pair offsets of element (8R + g, 16c + 4t + j) at K chunk c0 = 0 (int32 / int16 units)
    rw = gl.arange(0, BN2, layout=gl.SliceLayout(1, WL))
    cw = gl.arange(0, BK4, layout=gl.SliceLayout(0, WL))
    tile = pid_n * (BLOCK_N // 16) + rw // 8
    g = rw % 8
    base = gl.expand_dims(tile.to(gl.int64) * chunks + k_lo // 64, 1)
    c_w = gl.expand_dims((cw // 16) * 128 + cw % 16, 0)          # chunk c: 128 words, lane t: 4, tile j: 1
    # scale pairs as int32 [BN/2, BK/8] (element (8R + g, 8c + 2t + j'): the pairs of K tiles 4c + 2j', + 1)
    SL: gl.constexpr = gl.BlockedLayout([1, 2], [8, 4], [W, 1], [1, 0])
    rs = gl.arange(0, BN2, layout=gl.SliceLayout(1, SL))
    cs = gl.arange(0, BLOCK_K // 8, layout=gl.SliceLayout(0, SL))
    base_s = gl.expand_dims((pid_n * (BLOCK_N // 16) + rs // 8).to(gl.int64) * chunks + k_lo // 64, 1)
    half = gl.expand_dims(cw % 2, 0) + gl.zeros([BN2, BK4], gl.int32, WL)
    w_off = (base * 128 + gl.expand_dims(g * 16, 1) + c_w).to(gl.int32)  # the host keeps N * K / 8 < 2^31
    s_off = (base_s * 16 + gl.expand_dims((rs % 8) * 2, 1) + gl.expand_dims((cs // 8) * 16 + cs % 2, 0)).to(gl.int32)
    lane = gl.expand_dims(g * 4, 1) + gl.expand_dims((cw // 4) % 4, 0)
    th = gl.load(table_ptr + 2 * lane)
    tl = gl.load(table_ptr + 2 * lane + 1)

    rm = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, XL))
    rk = gl.arange(0, BLOCK_K // 2, layout=gl.SliceLayout(0, XL))
    # rows past M read row M - 1 (their outputs are not stored): no masks, no zero fills
    x_off = gl.expand_dims(gl.minimum(rm, M - 1) * stride_xm, 1) + gl.expand_dims(rk, 0)
    STEP_WORDS: gl.constexpr = BLOCK_K * 2            # words per row tile per K step (K/64 chunks of 128)
    STEP_PAIRS: gl.constexpr = BLOCK_K // 4           # int32 words of scale pairs
    if STAGES > 0:
        acc = _staged_loop(x_ptr + (k_lo // 2 + x_off), w_ptr + w_off, s_ptr + s_off, half, th, tl, steps,
                           BLOCK_M, BLOCK_N, BLOCK_K, STAGES, STEP_WORDS, STEP_PAIRS, MMA, A_LAYOUT, WL, SL, XS32,
                           XS, x_desc, pid_m * BLOCK_M, k_lo)
    else:
        x_smem = gl.allocate_shared_memory(gl.int32, [3, BLOCK_M, BLOCK_K // 2], XS32)
        w0 = gl.load(w_ptr + w_off)
        s0 = _scales(s_ptr, s_off, half, WL)
        x0 = gl.load(x_ptr + (k_lo // 2 + x_off))
        acc = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, MMA)
        a1 = gl.zeros([BLOCK_N, BLOCK_K], gl.bfloat16, A_LAYOUT)
        # Two K steps per iteration: their A operands are different values, so ptxas gives them different
        # registers and the decode of one step never writes the registers the other step's wgmma (still in
        # flight) reads. The host keeps `steps` even.
        for i in range(0, steps - 2, 2):
            w1 = gl.load(w_ptr + ((i + 1) * STEP_WORDS + w_off))  # the next step's loads go before the decode
            s1 = _scales(s_ptr + (i + 1) * STEP_PAIRS, s_off, half, WL)
            x1 = gl.load(x_ptr + ((k_lo + (i + 1) * BLOCK_K) // 2 + x_off))
            acc, a0 = _step(acc, a1, w0, s0, x0, th, tl, x_smem.index(i % 3), A_LAYOUT, XS)
            w0 = gl.load(w_ptr + ((i + 2) * STEP_WORDS + w_off))
            s0 = _scales(s_ptr + (i + 2) * STEP_PAIRS, s_off, half, WL)
            x0 = gl.load(x_ptr + ((k_lo + (i + 2) * BLOCK_K) // 2 + x_off))
            acc, a1 = _step(acc, a0, w1, s1, x1, th, tl, x_smem.index((i + 1) % 3), A_LAYOUT, XS)
        last = steps - 1
        w1 = gl.load(w_ptr + (last * STEP_WORDS + w_off))
        s1 = _scales(s_ptr + last * STEP_PAIRS, s_off, half, WL)
        x1 = gl.load(x_ptr + ((k_lo + last * BLOCK_K) // 2 + x_off))
        acc, a0 = _step(acc, a1, w0, s0, x0, th, tl, x_smem.index((last - 1) % 3), A_LAYOUT, XS)
        acc, a1 = _step(acc, a0, w1, s1, x1, th, tl, x_smem.index(last % 3), A_LAYOUT, XS)
        acc, a1 = warpgroup_mma_wait(num_outstanding=0, deps=[acc, a1])
    alpha = gl.load(alpha_ptr)
    if not SPLIT:
        _store_out(acc, out_ptr, bias_ptr, alpha, pid_n, pid_m, M, stride_om, BLOCK_N, BLOCK_M, HAS_BIAS, MMA)
    elif SUM_IN_KERNEL:
        _reduce_slices(acc, out_ptr, bias_ptr, alpha, work_ptr, count_ptr, pid_n, pid_m, pid_k, M, stride_om,
                       BLOCK_N, BLOCK_M, HAS_BIAS, MMA)
    else:
        gl.store(work_ptr + _partial_offsets(pid_k, BLOCK_N, BLOCK_M, MMA), acc)


@gluon.jit
def _stage_copies(w_smem, s_smem, x_smem, wp, sp, xp, step, steps, STAGES: gl.constexpr,
                  STEP_WORDS: gl.constexpr, STEP_PAIRS: gl.constexpr, STEP_X: gl.constexpr, x_desc, bars, off_m,
                  k_lo):
    """cp.async of K step `step`'s weight words, scale pairs and x^T into slot step % STAGES, as one commit group;
    past the last step the copies are masked off (an empty group: every step commits one, so the waits count
    steps). A mask, not a branch: ptxas serializes every wgmma of a loop whose in-flight group spans a branch."""
    slot = step % STAGES
    live = step < steps
    async_copy.async_copy_global_to_shared(w_smem.index(slot), wp + step * STEP_WORDS,
                                           mask=gl.full(wp.shape, 1, gl.int1, wp.type.layout) & live)
    async_copy.async_copy_global_to_shared(s_smem.index(slot), sp + step * STEP_PAIRS,
                                           mask=gl.full(sp.shape, 1, gl.int1, sp.type.layout) & live)
    if x_desc is None:
        async_copy.async_copy_global_to_shared(x_smem.index(slot), xp + step * STEP_X,
                                               mask=gl.full(xp.shape, 1, gl.int1, xp.type.layout) & live)
    else:  # x by TMA: read only by the wgmma, so no proxy fence (which would wait for the cp.asyncs in flight)
        mbarrier.expect(bars.index(slot), x_desc.block_type.nbytes, pred=live)
        tma.async_copy_global_to_shared(x_desc, [off_m, k_lo + step * (2 * STEP_X)], bars.index(slot),
                                        x_smem.index(slot), pred=live)
    async_copy.commit_group()


@gluon.jit
def _staged_step(acc, a_prev, k, steps, w_smem, s_smem, x_smem, wp, sp, xp, half, th, tl, STAGES: gl.constexpr,
                 AHEAD: gl.constexpr, STEP_WORDS: gl.constexpr, STEP_PAIRS: gl.constexpr, STEP_X: gl.constexpr,
                 A_LAYOUT: gl.constexpr, WL: gl.constexpr, SL: gl.constexpr, XS: gl.constexpr, x_desc, bars,
                 off_m, k_lo):
    """K step k of the staged loop: start the copies of step k + AHEAD, wait for step k's (AHEAD later groups
    stay in flight), decode from shared memory, issue the wgmma, wait for the previous one.

    The slot refilled here, (k + AHEAD) % STAGES, was last read as x^T by the wgmma of step k + AHEAD - STAGES
    <= k - 2 (one warpgroup: retired by its wait at step k - 1, which every warp of it passed) or <= k - 3 (two
    warpgroups: the other one passed step k - 1's barrier, so its wait at step k - 2 retired step k - 3); its
    weight words were read by this thread's own shared loads. The copies go before the wait so that the wait's
    barrier separates them from this step's shared reads (no barrier of their own)."""
    _stage_copies(w_smem, s_smem, x_smem, wp, sp, xp, k + AHEAD, steps, STAGES, STEP_WORDS, STEP_PAIRS, STEP_X,
                  x_desc, bars, off_m, k_lo)
    async_copy.wait_group(AHEAD)
    slot = k % STAGES
    if x_desc is None:
        fence_async_shared()
        gl.barrier()  # every thread's copies of step k landed before either warpgroup's wgmma reads them
    else:
        if gl.num_warps() > 4:
            gl.barrier()  # both warpgroups are past step k - 1 (the slot refilled above is free)
        mbarrier.wait(bars.index(slot), (k // STAGES) & 1)
    w = w_smem.index(slot).load(WL)
    s = _select_scales(s_smem.index(slot).load(SL), half, WL)
    a = _decode_operand(w, s, th, tl, A_LAYOUT)
    buf = x_smem.index(slot)
    if x_desc is None:
        xt = buf.reinterpret(gl.bfloat16, [buf.shape[0], 2 * buf.shape[1]], XS).permute((1, 0))
    else:
        xt = buf.permute((1, 0))
    acc = warpgroup_mma(a, xt, acc, is_async=True)
    acc, a_prev = warpgroup_mma_wait(num_outstanding=1, deps=[acc, a_prev])
    return acc, a


@gluon.jit
def _staged_loop(xp, wp, sp, half, th, tl, steps, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                 BLOCK_K: gl.constexpr, STAGES: gl.constexpr, STEP_WORDS: gl.constexpr, STEP_PAIRS: gl.constexpr,
                 MMA: gl.constexpr, A_LAYOUT: gl.constexpr, WL: gl.constexpr, SL: gl.constexpr,
                 XS32: gl.constexpr, XS: gl.constexpr, x_desc, off_m, k_lo):
    """The K loop with AHEAD = STAGES - 1 - warpgroups steps of copies in flight beyond the current one: weight
    words, scale pairs and x^T all go to a STAGES-slot shared ring by cp.async (each thread's weight bytes are
    its own fragments, read back by the same thread), so the bytes in flight cost shared memory, not registers;
    with x_desc, x^T comes by TMA on one mbarrier per slot instead, and the loop needs no proxy fence."""
    PLAIN: gl.constexpr = gl.SwizzledSharedLayout(vec=4, per_phase=1, max_phase=1, order=[1, 0])
    PAIRS: gl.constexpr = gl.SwizzledSharedLayout(vec=2, per_phase=1, max_phase=1, order=[1, 0])
    STEP_X: gl.constexpr = BLOCK_K // 2
    AHEAD: gl.constexpr = STAGES - 1 - gl.num_warps() // 4
    w_smem = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N // 2, BLOCK_K // 4], PLAIN)
    s_smem = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N // 2, BLOCK_K // 8], PAIRS)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    if x_desc is None:
        x_smem = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_M, BLOCK_K // 2], XS32)
    else:
        x_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_M, BLOCK_K], x_desc.layout)
        for j in gl.static_range(STAGES):
            mbarrier.init(bars.index(j), count=1)
        fence_async_shared()
    for j in gl.static_range(AHEAD):
        _stage_copies(w_smem, s_smem, x_smem, wp, sp, xp, j, steps, STAGES, STEP_WORDS, STEP_PAIRS, STEP_X,
                      x_desc, bars, off_m, k_lo)
    acc = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, MMA)
    a1 = gl.zeros([BLOCK_N, BLOCK_K], gl.bfloat16, A_LAYOUT)
    for i in range(0, steps, 2):  # two K steps per iteration, as in the register loop (`_step`)
        acc, a0 = _staged_step(acc, a1, i, steps, w_smem, s_smem, x_smem, wp, sp, xp, half, th, tl, STAGES, AHEAD,
                               STEP_WORDS, STEP_PAIRS, STEP_X, A_LAYOUT, WL, SL, XS, x_desc, bars, off_m, k_lo)
        acc, a1 = _staged_step(acc, a0, i + 1, steps, w_smem, s_smem, x_smem, wp, sp, xp, half, th, tl, STAGES,
                               AHEAD, STEP_WORDS, STEP_PAIRS, STEP_X, A_LAYOUT, WL, SL, XS, x_desc, bars, off_m,
                               k_lo)
    acc, a1 = warpgroup_mma_wait(num_outstanding=0, deps=[acc, a1])
    async_copy.wait_group(0)
    return acc


@gluon.jit
def _partial_offsets(slice, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, LAYOUT: gl.constexpr):
    """Offsets of this program's tile in K slice `slice`'s partials (fp32 [S, tiles, BLOCK_N * BLOCK_M])."""
    tiles = gl.num_programs(0) * gl.num_programs(1)
    tile = gl.program_id(1) * gl.num_programs(0) + gl.program_id(0)
    rn = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, LAYOUT))
    rm = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, LAYOUT))
    local = gl.expand_dims(rn * BLOCK_M, 1) + gl.expand_dims(rm, 0)
    return (slice * tiles + tile).to(gl.int64) * (BLOCK_N * BLOCK_M) + local


@gluon.jit
def _reduce_slices(acc, out_ptr, bias_ptr, alpha, work_ptr, count_ptr, pid_n, pid_m, pid_k, M, stride_om,
                   BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, HAS_BIAS: gl.constexpr, LAYOUT: gl.constexpr):
    """Store this K slice's partial tile; the last slice of the tile to arrive sums all of them in slice order
    (the result does not depend on which came last), stores the output and resets the counter."""
    gl.store(work_ptr + _partial_offsets(pid_k, BLOCK_N, BLOCK_M, LAYOUT), acc, cache_modifier=".cg")
    gl.barrier()  # every thread's partial is written before the (release) arrival below
    tile = pid_m * gl.num_programs(0) + pid_n
    arrived = gl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
    if arrived == gl.num_programs(2) - 1:
        total = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, LAYOUT)
        for j in range(gl.num_programs(2)):  # .cg: earlier launches may have left these lines in this SM's L1
            total += gl.load(work_ptr + _partial_offsets(j, BLOCK_N, BLOCK_M, LAYOUT), cache_modifier=".cg")
        gl.store(count_ptr + tile, 0)
        _store_out(total, out_ptr, bias_ptr, alpha, pid_n, pid_m, M, stride_om, BLOCK_N, BLOCK_M, HAS_BIAS,
                   LAYOUT)


# --------------------------------------------------------------------------------------------------------------
# Host side: the configs the decode tuner times, and the launch (inputs validated by the caller)
# --------------------------------------------------------------------------------------------------------------

#: (BLOCK_N, BLOCK_K, num_warps, STAGES, BLOCK_M or None, split divisors) tried per activation tile height: the
#: H200 sweep's winners (docs/nvfp4_hopper.md; graph replay, weights rotated past L2) at N = K = 4096 and 8192,
#: mostly 64-row tiles in the staged loop, and one register-loop config each; at M = 64 also 128-wide K steps
#: (13.7 against 14.1 - 14.4 us at N = K = 4096, level at 8192); at M = 128 also two 64-column
#: activation tiles, at M = 256 four (each weight decoded more than once, but more CTAs: one 128-column CTA per
#: SM is latency-bound, 1 warp per scheduler in ncu). Each compiles for sm_90a without register spills (`ptxas`,
#: 255 registers); the fp32 accumulator alone is BLOCK_N * BLOCK_M / (32 * num_warps) registers per thread, so
#: M = 256 runs as 128-row tiles at most.
_SHAPES = {
    16: ((64, 128, 4, 4, None, (1, 2)), (128, 64, 4, 4, None, (1,)), (128, 64, 4, 6, None, (2,)),
         (128, 128, 4, 0, None, (1,))),
    32: ((64, 128, 4, 4, None, (1, 2)), (128, 64, 4, 4, None, (1,)), (128, 64, 4, 0, None, (1,))),
    64: ((64, 64, 4, 4, None, (1, 2)), (64, 128, 4, 4, None, (2,)), (64, 64, 4, 6, None, (2,)),
         (128, 64, 4, 6, None, (2,)), (128, 64, 4, 0, None, (1,))),
    128: ((64, 64, 4, 4, None, (2, 4)), (64, 64, 4, 6, None, (2, 4)), (128, 64, 8, 6, None, (2,)),
          (64, 64, 4, 4, 64, (1, 2)), (64, 64, 4, 0, None, (1,))),
    256: ((64, 64, 4, 4, 128, (2, 4)), (128, 64, 8, 4, 128, (1, 2)), (64, 64, 4, 4, 64, (1,)),
          (128, 64, 8, 0, 128, (1,))),
}


def gluon_config(m: int, n: int, k: int, block_n: int, block_k: int, warps: int, block_m: "int | None" = None,
                 num_sms: int = H100_SM_COUNT, split_div: int = 1, stages: int = 0) -> "dict | None":
    """A config of that shape that tiles (N, K), K split (powers of two up to MAX_SPLIT_K, at least 2 K steps
    per slice) until the grid has >= 2 CTAs per SM, then divided by `split_div`; None if the shape does not
    tile or the warps do not cover BLOCK_N (64 rows per warpgroup)."""
    bm = block_m or swap_ab_block_m(m)
    if n % block_n or k % block_k or block_n % (16 * warps) or block_n * bm > 128 * 32 * warps:
        return None
    ctas = (n // block_n) * triton.cdiv(m, bm)
    split = k_split(ctas, k, block_k, 4, num_sms, split_div)
    return {"path": "gluon_mixed", "BLOCK_N": block_n, "BLOCK_M": bm, "BLOCK_K": block_k, "SPLIT_K": split,
            "num_warps": warps, "STAGES": stages, "X_TMA": False,
            "SLICE_SUM": "second_kernel" if split > 1 and bm >= SECOND_KERNEL_MIN_BLOCK_M else "last_slice"}


def gluon_candidates(m: int, n: int, k: int, num_sms: int = H100_SM_COUNT) -> list[dict]:
    """Every config the decode tuner times at this shape (none outside MIN_M .. MAX_M; below M = 16 the tuner
    does not ask: the frag kernel is faster there)."""
    if not MIN_M <= m <= MAX_M:
        return []
    cands = []
    for bn, bk, w, stages, bm, divs in _SHAPES[swap_ab_block_m(m)]:
        for div in divs:
            cfg = gluon_config(m, n, k, bn, bk, w, bm, num_sms, div, stages)
            if cfg is not None and cfg not in cands:
                cands.append(cfg)
    # from 128-column activation tiles, each staged config also with x^T by TMA: 5% faster at M = 128,
    # N = K = 8192 on the H200 (39.7 against 41.8 us), level at M = 16 - 64
    return cands + [dict(c, X_TMA=True) for c in cands if c["STAGES"] and c["BLOCK_M"] >= X_TMA_MIN_BLOCK_M]


def gluon_label(cfg: dict) -> str:
    """Short name of a config, e.g. 'gluon_mixed 128x64x64 w4 split4'."""
    return (f"gluon_mixed {cfg['BLOCK_N']}x{cfg['BLOCK_M']}x{cfg['BLOCK_K']} w{cfg['num_warps']} "
            f"split{cfg['SPLIT_K']}{' s%d' % cfg['STAGES'] if cfg.get('STAGES') else ''}"
            f"{' tma' if cfg.get('X_TMA') else ''}{' sum2' if _sums_in_second_kernel(cfg) else ''}")


def _sums_in_second_kernel(cfg: dict) -> bool:
    """Whether a launch of `cfg` has the second kernel sum its K slices (`_slice_sum`)."""
    return cfg["SPLIT_K"] > 1 and cfg.get("SLICE_SUM", SLICE_SUMS[0]) == "second_kernel"


def check_config(op: str, cfg: dict, m: int, n: int, k: int) -> None:
    """InputError unless `cfg` is a config this kernel can run for (M, N, K)."""
    bn, bm, bk, w, split = (cfg[key] for key in ("BLOCK_N", "BLOCK_M", "BLOCK_K", "num_warps", "SPLIT_K"))
    problems = []
    if not MIN_M <= m <= MAX_M:
        problems.append(f"M must be in {MIN_M} .. {MAX_M} (got {m})")
    if bm not in (16, 32, 64, 128, 256):
        problems.append(f"BLOCK_M must be a power of two in 16 .. 256 (got {bm})")
    if w not in (4, 8) or bn % (16 * w) or bn > 256:
        problems.append(f"BLOCK_N must be a multiple of 16 * num_warps up to 256, num_warps 4 or 8 "
                        f"(got {bn}, {w})")
    if bk not in (64, 128, 256):
        problems.append(f"BLOCK_K must be 64, 128 or 256 (got {bk})")
    stages = cfg.get("STAGES", 0)
    if stages not in STAGE_CHOICES or stages * stage_bytes(bn, bm, bk) > MAX_RING_BYTES:
        problems.append(f"STAGES must be one of {STAGE_CHOICES} with STAGES * {stage_bytes(bn, bm, bk)} bytes of ring "
                        f"<= {MAX_RING_BYTES} (got {stages})")
    if cfg.get("SLICE_SUM", SLICE_SUMS[0]) not in SLICE_SUMS:
        problems.append(f"SLICE_SUM must be one of {SLICE_SUMS} (got {cfg['SLICE_SUM']!r})")
    if cfg.get("X_TMA") and not stages:
        problems.append("X_TMA (x^T by TMA) needs the staged loop (STAGES >= 4)")
    if bn * bm > 128 * 32 * w:
        problems.append(f"BLOCK_N * BLOCK_M / (32 * num_warps) accumulator registers must be <= 128 "
                        f"(got {bn} * {bm} / (32 * {w}))")
    if split < 1 or n % max(bn, 1) or k % (2 * bk * split) or n * k // 8 >= 2 ** 31:
        problems.append(f"N must be a multiple of BLOCK_N, K of 2 * BLOCK_K * SPLIT_K (an even number of K steps "
                        f"per slice), N * K < 2^34 (got N={n}, K={k}, SPLIT_K={split})")
    if problems:
        raise InputError(f"{op}: gluon_mixed config {cfg}: " + "; ".join(problems))


def stage_bytes(block_n: int, block_m: int, block_k: int) -> int:
    """Shared memory of one slot of the staged loop's ring: weight words (4 bits per weight), scale pairs (as
    each of the 4 lanes of a row pair loads them: 4 bytes per 16 x 2 weights) and x^T (bf16)."""
    return block_n * block_k // 2 + block_n * block_k // 4 + 2 * block_m * block_k


def gluon_grid(cfg: dict, m: int, n: int) -> tuple[int, int, int]:
    """The launch grid of `cfg` for an [M, N] output."""
    return (n // cfg["BLOCK_N"], triton.cdiv(m, cfg["BLOCK_M"]), cfg["SPLIT_K"])


_LAUNCHER = CachedLauncher(gluon_mixed_kernel, pipeline=False)


class GluonLaunch:
    """One compiled config for one (M, N, K, dtype, bias) signature, replayable: `run(x, data, scales, alpha,
    bias)` allocates the output and launches once (the weight's repacked copy is a dictionary lookup)."""

    def __init__(self, cfg: dict, m: int, n: int, k: int, out_dtype: torch.dtype, device: torch.device,
                 entry: tuple, scratch: "StreamScratch | None", layout: str, slice_sum: "SliceSum | None"):
        self.cfg, self.m, self.n, self.k, self.layout = cfg, m, n, k, layout
        self.out_dtype, self.device, self.entry, self.scratch = out_dtype, device, entry, scratch
        self.slice_sum = slice_sum
        self.grid = gluon_grid(cfg, m, n)
        self.tables = _wide.lane_tables(device)

    def run(self, x: torch.Tensor, data: torch.Tensor, scales: torch.Tensor, alpha: torch.Tensor,
            bias: "torch.Tensor | None") -> torch.Tensor:
        """out [M, N] for new tensors of the same signature."""
        fw = _frag.frag_weight_of(data, scales, self.layout, (self.n, self.k), natural_k=True)
        out = torch.empty((self.m, self.n), dtype=self.out_dtype, device=self.device)
        work, count = self.scratch.get() if self.scratch is not None else (out, out)
        x32 = _x_words(x)
        run_entry(self.entry, self.grid, self.device,
                  (x32, fw.words, fw.scales32, out, alpha, out if bias is None else bias, self.tables, work, count,
                   self.m, self.n, self.k, x32.stride(0), out.stride(0), _x_desc(x, self.cfg)))
        if self.slice_sum is not None:
            self.slice_sum.run(work, out, alpha, bias)
        return out


def _x_words(x: torch.Tensor) -> torch.Tensor:
    """x bf16 [M, K] as int32 pairs [M, K / 2] (a view; a copy where the strides do not allow one)."""
    from ._common import view_as_words  # noqa: PLC0415 - reason: imported where the repack runs, keeping the module import graph of decode.py unchanged
    return view_as_words(x, torch.int32)


def _x_desc(x: torch.Tensor, cfg: dict):
    """x's TMA descriptor for a staged config with X_TMA, else None."""
    if not (cfg.get("X_TMA") and cfg.get("STAGES")):
        return None
    return x_descriptor(x, cfg["BLOCK_M"], cfg["BLOCK_K"])


def launch_gluon(x: torch.Tensor, w_q, alpha: torch.Tensor, bias: "torch.Tensor | None", cfg: dict, *,
                 out_dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, GluonLaunch]:
    """(out [M, N], replayable launch) on validated inputs (`check_config` passed); alpha: fp32 [1]."""
    m, k = x.shape
    n = w_q.shape[0]
    device = x.device
    fw = _frag.frag_weight_of(w_q.data, w_q.scales, w_q.scale_layout, (n, k), natural_k=True)
    out = torch.empty((m, n), dtype=out_dtype, device=device)
    scratch = split_scratch(gluon_grid(cfg, m, n), cfg["BLOCK_N"], cfg["BLOCK_M"], device)
    work, count = scratch.get() if scratch is not None else (out, out)
    b = out if bias is None else bias
    x32 = _x_words(x)
    tables = _wide.lane_tables(device)
    args = (x32, fw.words, fw.scales32, out, alpha, b, tables, work, count, m, n, k, x32.stride(0), out.stride(0),
            _x_desc(x, cfg))
    kwargs = {"BLOCK_N": cfg["BLOCK_N"], "BLOCK_M": cfg["BLOCK_M"], "BLOCK_K": cfg["BLOCK_K"],
              "SPLIT": cfg["SPLIT_K"] > 1, "HAS_BIAS": bias is not None, "num_warps": cfg["num_warps"],
              "STAGES": int(cfg.get("STAGES", 0)), "SUM_IN_KERNEL": not _sums_in_second_kernel(cfg)}
    key = ("gluon_mixed", m, n, k, x32.stride(0), out.dtype, b.dtype, tuple(sorted(kwargs.items())),
           args[-1] is not None)
    grid = gluon_grid(cfg, m, n)
    entry = _LAUNCHER.launch(key, grid, device, args, kwargs)
    slice_sum = (SliceSum(work, out, alpha, bias, grid, cfg["BLOCK_N"], cfg["BLOCK_M"])
                 if _sums_in_second_kernel(cfg) else None)
    return out, GluonLaunch(cfg, m, n, k, out_dtype, device, entry, scratch, w_q.scale_layout, slice_sum)
