"""Mixed-input NVFP4 GEMM for every M on Hopper: the weight stays 4.5 bits in HBM and is dequantized in registers.

out[M, N] = alpha * x[M, K] @ (e2m1 * e4m3 of w_q)[N, K]^T (+ bias), computed "swapped" (y^T = W x^T, the
arrangement Marlin / Machete use): a CTA owns BLOCK_N weight rows and BLOCK_M activation rows, loads its packed
weight tile [BLOCK_N, BLOCK_K/2] and scales, dequantizes them in registers (`_common.dequant_nvfp4_bf16`, exact)
into the MMA's *A* operand, and the small activation tile x^T [BLOCK_K, BLOCK_M] is the B operand in shared
memory. On sm_90a `tl.dot` with a register A becomes `wgmma.mma_async` with A from registers (pinned by
`tests/kernels/test_kernels_mixed_gemm.py` on the emitted PTX), so no MMA work is spent padding a small M up to 64 rows:
the wgmma N dimension (BLOCK_M) can be 16. Triton's software pipeline (num_stages) keeps the weight and x loads
of the next K steps in flight (cp.async) while the current step decodes and multiplies.

Exactness: e2m1 * e4m3 is exact in bf16 and bf16 x bf16 products are exact in fp32, so the result equals the
block-scaled product up to the fp32 summation order (the global scales are the fp32 epilogue's alpha).

QUANT_X (the W4A4 linear at small M): the x tile is quantized to NVFP4 with the `formats.quantize_nvfp4` recipe
(`language.quant_dequant_nvfp4_tile`, S_enc from `s_enc_ptr` or, for tiny x, from amax(x) computed by each program)
and dequantized back to bf16 in registers before it becomes the B operand: the quantize-dequantize of x is the
kernel's prologue, one launch per call; alpha = S_dec(x) * S_dec(w) is formed in the epilogue. Each program
re-quantizes its x tile, which costs BLOCK_M x BLOCK_K quantizations per K step against BLOCK_N x BLOCK_K weight
decodes, so it is only used where M is small (`nvfp4_linear`).

Measured on the H200 (graph replay, inputs rotated past L2; the decode tuner's log): it is the fastest of our
paths at M = 64 - 128 but behind cuBLAS bf16 there (N = K = 8192: 52 us at M = 64 against 36.7 us; 85.7 against
37.3 us at M = 128), and it loses to
the frag / GEMV kernels at M <= 16 (31.8 against 15.2 us at M = 1) and to dequantize + `kernels.matmul` at large M
(3.06 ms, 359 TFLOP/s, at M = N = K = 8192). What limits it (sm_90a PTX / SASS of the 128x128x64 config): Triton
3.6 waits for each wgmma before the next K step (`wgmma.wait_group 0`: a register A operand, like a shared operand
written inside the loop, is never left in flight), so the decode of step k + 1 overlaps the MMAs of step k only
across CTAs; ~310 SASS instructions per thread per K step (~10 per weight with the x reordering) and 4 CTA
barriers per step (the reordered x tile and the scales go through shared memory).

A split K (the grid's third axis) gives more CTAs where N / BLOCK_N x M / BLOCK_M alone is too few to keep HBM
busy; the slices are reduced inside the kernel (the last slice of a tile to finish sums them in slice order).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..language.quant import quant_dequant_nvfp4_tile
from ..targets import H100_SM_COUNT
from ._common import dequant_nvfp4_bf16, scale_offsets
from ._launcher import CachedLauncher, StreamScratch, run_entry
from ._slice_sum import split_scratch
from ._tiles import k_split, swap_ab_block_m
from .nvfp4_dequant import encode_scale_from_amax

__all__ = ["nvfp4_mixed_gemm_kernel", "mixed_candidates", "mixed_config", "launch_mixed", "mixed_label"]


@triton.jit
def _mma_k_order(t):
    """[R, BK] -> [R, BK] with the columns in the order the MMA consumes them: position 8i + 2j + e holds
    natural column 2 (j * BK/8 + i) + e. A reordering of K changes no product (both operands get it), and with it
    a thread's A-fragment elements (positions 2j, 2j+1, 2j+8, 2j+9, ... for lane column j) are BK/8 adjacent
    weight bytes: one vector shared-memory load instead of one load per byte."""
    R: tl.constexpr = t.shape[0]
    BK: tl.constexpr = t.shape[1]
    return tl.reshape(tl.permute(tl.reshape(t, [R, 4, BK // 8, 2]), [0, 2, 1, 3]), [R, BK])


@triton.jit
def _x_tile(x_ptr, rm, m_mask, k, rk, stride_xm, s_enc, QUANT_X: tl.constexpr):
    """x[rm, k + rk] in bf16 [BLOCK_M, BLOCK_K]; with QUANT_X its NVFP4 quantize-dequantize without the global
    decode scale (exact in bf16: e2m1 * e4m3)."""
    x = tl.load(x_ptr + rm[:, None].to(tl.int64) * stride_xm + (k + rk)[None, :], mask=m_mask[:, None], other=0.0)
    if QUANT_X:
        x = quant_dequant_nvfp4_tile(x, s_enc).to(tl.bfloat16)
    return x


@triton.jit
def _store_tile(acc, out_ptr, bias_ptr, rn, rm, m_mask, stride_om, HAS_BIAS: tl.constexpr):
    """out[rm, rn] = acc^T (+ bias[rn]) in the output dtype, rows past M masked."""
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn).to(tl.float32)[:, None]
    ptrs = out_ptr + rm[None, :].to(tl.int64) * stride_om + rn[:, None]
    tl.store(ptrs, acc.to(out_ptr.dtype.element_ty), mask=m_mask[None, :])


@triton.jit
def nvfp4_mixed_gemm_kernel(x_ptr, w_ptr, ws_ptr, out_ptr, scale_ptr, w_dec_ptr, bias_ptr, work_ptr, count_ptr,
                            M, N, K, stride_xm, stride_om, SCALE_BLOCKED: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
                            BLOCK_K: tl.constexpr, SPLIT: tl.constexpr, QUANT_X: tl.constexpr = False,
                            S_ENC_FROM_AMAX: tl.constexpr = False, HAS_BIAS: tl.constexpr = False, K_ORDER: tl.constexpr = True):
    """out[m, n] = alpha * sum_k x'[m, k] * e2m1[n, k] * s[n, k // 16] (+ bias[n]), fp32 accumulation.

    Weight-only (QUANT_X False): x' = x and alpha = scale_ptr[0] (the caller's fp32 epilogue scale, e.g. the
    weight's global decode scale; w_dec_ptr unused). QUANT_X: x' = e2m1 * e4m3 of NVFP4(x) with encode scale
    S_enc = scale_ptr[0] (or from amax(x) with S_ENC_FROM_AMAX) and alpha = div_rn(1, S_enc) * w_dec_ptr[0].
    Grid: (N / BLOCK_N, cdiv(M, BLOCK_M), S) with S K slices (a runtime value: one compile serves every split);
    K % (BLOCK_K * S) == 0, N % BLOCK_N == 0; SPLIT must be S > 1.
    SPLIT: each K slice stores its fp32 partial tile to work_ptr ([S, tiles, BLOCK_N * BLOCK_M]) and
    bumps the tile's arrival counter (count_ptr, int32 [tiles], zero between launches); the last slice to arrive
    sums the partials in slice order (a fixed order: the result does not depend on which slice came last),
    writes the output and resets the counter. One launch, no zeroed output, no cast kernel."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = rm < M
    rkh = tl.arange(0, BLOCK_K // 2)
    rk = tl.arange(0, BLOCK_K)
    rks = tl.arange(0, BLOCK_K // 16)
    k_span = tl.multiple_of(K // tl.num_programs(2), BLOCK_K)  # the host splits K in whole BLOCK_K steps
    k_lo = pid_k * k_span
    n_kb = K // 16
    if QUANT_X:
        if S_ENC_FROM_AMAX:
            s_enc = encode_scale_from_amax(x_ptr, M, K, stride_xm, 16, 512)
        else:
            s_enc = tl.load(scale_ptr)
    else:
        s_enc = 1.0
    w_rows = w_ptr + rn[:, None].to(tl.int64) * (K // 2)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for k in range(k_lo, k_lo + k_span, BLOCK_K):
        w = tl.load(w_rows + (k // 2 + rkh)[None, :])
        s = tl.load(ws_ptr + scale_offsets(rn[:, None], (k // 16 + rks)[None, :], n_kb, SCALE_BLOCKED))
        x = _x_tile(x_ptr, rm, m_mask, k, rk, stride_xm, s_enc, QUANT_X)
        wd = dequant_nvfp4_bf16(w, s)
        if K_ORDER:
            wd = _mma_k_order(wd)
            x = _mma_k_order(x)
        acc = tl.dot(wd, tl.trans(x), acc)
    if QUANT_X:
        alpha = tl.math.div_rn(1.0, s_enc) * tl.load(w_dec_ptr)
    else:
        alpha = tl.load(scale_ptr)
    if not SPLIT:
        _store_tile(acc * alpha, out_ptr, bias_ptr, rn, rm, m_mask, stride_om, HAS_BIAS)
    else:
        tiles = tl.num_programs(0) * tl.num_programs(1)
        tile = pid_m * tl.num_programs(0) + pid_n
        local = tl.arange(0, BLOCK_N)[:, None] * BLOCK_M + tl.arange(0, BLOCK_M)[None, :]
        tl.store(work_ptr + (pid_k * tiles + tile).to(tl.int64) * (BLOCK_N * BLOCK_M) + local, acc,
                 cache_modifier=".cg")
        tl.debug_barrier()  # every thread's partial is written before the (release) arrival below
        arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == tl.num_programs(2) - 1:
            total = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
            for j in range(tl.num_programs(2)):  # .cg: past calls may have left these lines in this SM's L1
                total += tl.load(work_ptr + (j * tiles + tile).to(tl.int64) * (BLOCK_N * BLOCK_M) + local,
                                 cache_modifier=".cg")
            tl.store(count_ptr + tile, 0)
            _store_tile(total * alpha, out_ptr, bias_ptr, rn, rm, m_mask, stride_om, HAS_BIAS)


# --------------------------------------------------------------------------------------------------------------
# Host side: configs the tuners try, and the launch (inputs validated by the callers)
# --------------------------------------------------------------------------------------------------------------

#: (BLOCK_N, BLOCK_K, num_warps, num_stages) tried per activation tile height BLOCK_M. Small M: the weight stream
#: is everything, so deep rings of wide K steps (BLOCK_K 128 = 64 bytes of codes per row per stage) and split-K;
#: large M: 64-deep K steps (the 128-byte swizzle of the bf16 x tile) with one or two warpgroups.
_SHAPES = {
    16: ((128, 128, 4, 4), (64, 128, 4, 4), (128, 64, 4, 6)),
    32: ((128, 128, 4, 4), (64, 128, 4, 4)),
    64: ((128, 128, 4, 3), (128, 64, 4, 4), (128, 64, 8, 4)),
    128: ((128, 64, 8, 4), (128, 64, 4, 4)),
    256: ((128, 64, 8, 3),),
}

def mixed_config(m: int, n: int, k: int, block_n: int, block_k: int, warps: int, stages: int,
                 num_sms: int = H100_SM_COUNT, block_m: "int | None" = None, k_order: bool = True,
                 split_div: int = 1) -> "dict | None":
    """A config of that shape that tiles (N, K), with K split (powers of two, at most MAX_SPLIT_K) until the grid
    has >= 2 CTAs per SM, then divided by `split_div` (fewer, longer slices); None if the shape does not tile."""
    bm = block_m or swap_ab_block_m(m)
    if n % block_n or k % block_k:
        return None
    ctas = (n // block_n) * triton.cdiv(m, bm)
    split = k_split(ctas, k, block_k, 2, num_sms, split_div)
    return {"path": "wgmma", "BLOCK_N": block_n, "BLOCK_M": bm, "BLOCK_K": block_k, "SPLIT_K": split,
            "num_warps": warps, "num_stages": stages, "K_ORDER": k_order}


def mixed_candidates(m: int, n: int, k: int, num_sms: int = H100_SM_COUNT) -> list[dict]:
    """Every mixed-GEMM config the tuners time for this shape (the first is the untuned default)."""
    bm = swap_ab_block_m(m)
    shapes = list(_SHAPES[bm])
    if bm == 256:  # also the 128-row tile: twice the CTAs at M = 256 .. 512
        shapes += [(bn, bk, w, s, 128) for bn, bk, w, s in _SHAPES[128][:1]]
    cands = []
    for shape in shapes:
        for split_div in (1, 4) if bm <= 64 else (1,):  # the split's slices against its in-kernel reduction
            cfg = mixed_config(m, n, k, *shape[:4], num_sms=num_sms, block_m=shape[4] if len(shape) > 4 else None,
                               split_div=split_div)
            if cfg is not None and cfg not in cands:
                cands.append(cfg)
    if not cands:  # N or K not a multiple of 128: the smallest tile (N % 64, K % 64 are the callers' limits)
        cfg = mixed_config(m, n, k, 64, 64, 4, 4, num_sms=num_sms)
        cands += [cfg] if cfg is not None else []
    return cands


def mixed_label(cfg: dict) -> str:
    """Short name of a config, e.g. 'wgmma 128x16x128 w4 s4 split8'."""
    return (f"wgmma {cfg['BLOCK_N']}x{cfg['BLOCK_M']}x{cfg['BLOCK_K']} w{cfg['num_warps']} s{cfg['num_stages']} "
            f"split{cfg['SPLIT_K']}{'' if cfg.get('K_ORDER', True) else ' natural-k'}")


def mixed_grid(cfg: dict, m: int, n: int) -> tuple[int, int, int]:
    """The launch grid of `cfg` for an [M, N] output."""
    return (n // cfg["BLOCK_N"], triton.cdiv(m, cfg["BLOCK_M"]), cfg["SPLIT_K"])


def mixed_tiles(cfg: dict, m: int, n: int, k: int) -> bool:
    """Whether `cfg` tiles this problem (N by BLOCK_N, K by BLOCK_K * SPLIT_K)."""
    return n % cfg["BLOCK_N"] == 0 and k % (cfg["BLOCK_K"] * cfg["SPLIT_K"]) == 0


_LAUNCHER = CachedLauncher(nvfp4_mixed_gemm_kernel, pipeline=False)


class MixedLaunch:
    """One compiled config of the mixed GEMM for one (M, N, K, dtype, bias, x-mode) signature, replayable:
    `run(x, data, scales, scale, w_dec, bias)` allocates the output and launches (one launch)."""

    def __init__(self, cfg: dict, m: int, n: int, k: int, out_dtype: torch.dtype, device: torch.device,
                 entry: tuple, scratch: "StreamScratch | None"):
        self.cfg, self.m, self.n, self.k = cfg, m, n, k
        self.out_dtype, self.device, self.entry, self.scratch = out_dtype, device, entry, scratch
        self.grid = mixed_grid(cfg, m, n)

    def run(self, x: torch.Tensor, data: torch.Tensor, scales: torch.Tensor, scale: torch.Tensor,
            w_dec: torch.Tensor, bias: "torch.Tensor | None") -> torch.Tensor:
        """out [M, N] for new tensors of the same signature."""
        out = torch.empty((self.m, self.n), dtype=self.out_dtype, device=self.device)
        work, count = self.scratch.get() if self.scratch is not None else (out, out)
        run_entry(self.entry, self.grid, self.device,
                  (x, data, scales, out, scale, w_dec, out if bias is None else bias, work, count, self.m, self.n,
                   self.k, x.stride(0), out.stride(0)))
        return out


def launch_mixed(x: torch.Tensor, w_q, scale: torch.Tensor, w_dec: torch.Tensor, bias: "torch.Tensor | None",
                 cfg: dict, *, out_dtype: torch.dtype = torch.bfloat16, quant_x: bool = False,
                 from_amax: bool = False) -> tuple[torch.Tensor, MixedLaunch]:
    """(out [M, N], replayable launch) of the mixed GEMM on validated inputs. `scale`: the epilogue alpha
    (weight-only) or, with `quant_x`, S_enc (unused with `from_amax`); `w_dec`: S_dec(w) (read with `quant_x`)."""
    m, k = x.shape
    n = w_q.shape[0]
    device = x.device
    out = torch.empty((m, n), dtype=out_dtype, device=device)
    scratch = split_scratch(mixed_grid(cfg, m, n), cfg["BLOCK_N"], cfg["BLOCK_M"], device)
    work, count = scratch.get() if scratch is not None else (out, out)
    b = out if bias is None else bias
    args = (x, w_q.data, w_q.scales, out, scale, w_dec, b, work, count, m, n, k, x.stride(0), out.stride(0))
    kwargs = {key: v for key, v in cfg.items() if key not in ("path", "SPLIT_K")}
    kwargs.update(SPLIT=cfg["SPLIT_K"] > 1, SCALE_BLOCKED=w_q.scale_layout == "blocked_128x4", QUANT_X=quant_x, S_ENC_FROM_AMAX=from_amax,
                  HAS_BIAS=bias is not None)
    key = ("wgmma", m, n, k, x.stride(0), out.dtype, b.dtype, tuple(sorted(kwargs.items())))
    entry = _LAUNCHER.launch(key, mixed_grid(cfg, m, n), device, args, kwargs)
    return out, MixedLaunch(cfg, m, n, k, out_dtype, device, entry, scratch)
