"""Weight-only NVFP4 GEMM for large M on Hopper in Gluon: the weight decoded into shared memory, both wgmma
operands read from there, the decode of K step k + 1 overlapping the wgmma of step k.

out[M, N] = alpha * x[M, K] @ (e2m1 * e4m3 of w_q)[N, K]^T (+ bias). Unlike the swap-AB kernel (`gluon_mixed`,
M <= 256), the activation is the wgmma A side: a CTA owns BLOCK_M = 128 or 256 activation rows (two
warpgroups, 64 rows per wgmma) and BLOCK_N weight rows, so the decode's cost per multiply-add falls with
BLOCK_M (about 2.4 instructions per weight, once per BLOCK_M rows) and the tensor cores stay busy.

* x, the weight and its scales go to a STAGES-slot shared ring by TMA (one mbarrier per slot), STAGES - 1 steps
  ahead. The weight stays 4.5 bits per weight in HBM and in the ring (`dq_weight_of`: one int32 word per 8
  consecutive K elements of a row, and the plain UE4M3 scales as one int32 per row and 64-wide K step, stored
  K-step-major so that a step's scale words are one TMA row). Nothing is copied by cp.async: the fence that
  publishes the decoded tile to the wgmma (`fence.proxy.async`, a MEMBAR.ALL.CTA in SASS) would wait for every
  cp.async still in flight (with the words by cp.async the H200 took 1.38x longer: 345 against 250 us at
  M = 4096, N = K = 4096).
* The decode (`_dq_device`: exact, about 19 instructions per word) writes the bf16 tile to one of two shared
  buffers, which the next wgmma reads as its B operand (K-major).

Per K step of this, the one-partition kernel (`dq_wgmma_ws` is the warp-specialized form, configs with `DEC`):
issue the wgmma (async), retire the previous one, a barrier (both warpgroups are past it, so the ring slot it
read and the other bf16 buffer are free), start the copies of step k + STAGES - 1, wait for step k + 1's, decode
it, fence, a barrier. Exact up to the fp32 summation order (e2m1 * e4m3 is exact in bf16, bf16 x bf16 products
are exact in fp32). NaN scales (0x7F, never produced by quantization) are not propagated.
"""
from __future__ import annotations

import weakref

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ..compat.gluon import backfill
from ..errors import InputError
from ..formats import from_blocked_scales
from . import _decode_frag as _frag
from . import _decode_frag_wide as _wide
from ._dq_device import decode_slot, decode_tables, grouped, pair_layout, store_out, word_layout
from ._launcher import CachedLauncher, run_entry
from . import dq_wgmma_ws as _ws

backfill()  # buf.reinterpret(...) and gl.barrier() below are Triton 3.9 spellings; older releases get them here

_X_LAYOUT = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
_PLAIN32 = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)

__all__ = ["dq_wgmma_kernel", "dq_candidates", "dq_label", "launch_dq", "check_dq_config", "dq_weight_of",
           "x_descriptor", "MIN_M"]

#: Smallest M the tuner offers this kernel for: below it a 128-row activation tile is mostly padding and the
#: swap-AB kernels are faster.
MIN_M = 256
#: Shared memory of the H200 per CTA that a config may use (ring, bf16 buffers; the epilogue reuses them).
MAX_SMEM_BYTES = 220 * 1024


@gluon.jit
def _issue_step(x_desc, w_desc, s_desc, x_smem, w_smem, s_smem, bars, off_m, off_n, step, steps,
                BLOCK_K: gl.constexpr, STAGES: gl.constexpr):
    """TMA of K step `step`'s x tile, weight words and scale words into its slot, on its mbarrier (nothing past
    the last step). Every copy is TMA: a cp.async still in flight would be waited out by the fence that
    publishes the decoded tile to the wgmma (`fence.proxy.async` is a MEMBAR.ALL.CTA in SASS)."""
    slot = step % STAGES
    live = step < steps
    bar = bars.index(slot)
    mbarrier.expect(bar, x_desc.block_type.nbytes + w_desc.block_type.nbytes + s_desc.block_type.nbytes,
                    pred=live)
    tma.async_copy_global_to_shared(x_desc, [off_m, step * BLOCK_K], bar, x_smem.index(slot), pred=live)
    tma.async_copy_global_to_shared(w_desc, [off_n, step * (BLOCK_K // 8)], bar, w_smem.index(slot), pred=live)
    tma.async_copy_global_to_shared(s_desc, [step, off_n], bar, s_smem.index(slot), pred=live)


@gluon.jit
def dq_wgmma_kernel(x_desc, w_desc, s_desc, out_ptr, alpha_ptr, bias_ptr, table_ptr, M, N, K, stride_om,
                    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                    HAS_BIAS: gl.constexpr = False):
    """out[m, n] = alpha[0] * sum_k x[m, k] * (e2m1 * s)[n, k] (+ bias[n]), fp32 accumulation in wgmma.

    TMA descriptors: x_desc of x bf16 [M, K] (block [BLOCK_M, 64]), w_desc of the `dq_weight_of` words int32
    [N, K/8] (block [BLOCK_N, 8]), s_desc of its scale words int32 [K/64, N] (block [1, BLOCK_N]); table_ptr:
    `_decode_frag_wide.lane_tables` (int32 [32, 2]). Grid (cdiv(M, BLOCK_M) * N / BLOCK_N,), tiles in grouped
    order (GROUP_M activation tiles share each weight tile); K % 64 == 0, num_warps 8."""
    BLOCK_K: gl.constexpr = 64
    W: gl.constexpr = gl.num_warps()
    BK8: gl.constexpr = BLOCK_K // 8
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[W, 1],
                                                  instr_shape=[16, BLOCK_N, 16])
    WL: gl.constexpr = word_layout(BK8, W)
    BL: gl.constexpr = pair_layout(BK8, W)
    BS32: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=2)
    BS: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)

    pid_m, pid_n = grouped(gl.program_id(0), gl.cdiv(M, BLOCK_M), N // BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    steps = K // BLOCK_K

    sel, th, tl = decode_tables(table_ptr, BLOCK_N, BK8, WL)

    x_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_M, BLOCK_K], x_desc.layout)
    w_smem = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N, BK8], w_desc.layout)
    s_smem = gl.allocate_shared_memory(gl.int32, [STAGES, 1, BLOCK_N], s_desc.layout)
    b_smem = gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, BLOCK_K // 2], BS32)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for j in gl.static_range(STAGES):
        mbarrier.init(bars.index(j), count=1)
    fence_async_shared()

    for j in gl.static_range(STAGES - 1):
        _issue_step(x_desc, w_desc, s_desc, x_smem, w_smem, s_smem, bars, off_m, off_n, j, steps, BLOCK_K, STAGES)
    mbarrier.wait(bars.index(0), 0)
    b_smem.index(0).store(decode_slot(w_smem, s_smem, 0, sel, th, tl, WL, BL))
    fence_async_shared()
    gl.barrier()

    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, MMA)
    for i in range(steps):
        b = b_smem.index(i % 2)
        bt = b.reinterpret(gl.bfloat16, [BLOCK_N, BLOCK_K], BS).permute((1, 0))
        acc = warpgroup_mma(x_smem.index(i % STAGES), bt, acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=[acc])
        gl.barrier()  # both warpgroups retired step i - 1: its slot and bf16 buffer are free
        _issue_step(x_desc, w_desc, s_desc, x_smem, w_smem, s_smem, bars, off_m, off_n, i + STAGES - 1, steps,
                    BLOCK_K, STAGES)
        nxt = i + 1
        # step i + 1 (past the last step: the slot of step i + 1 - STAGES, long landed, decoded in vain)
        mbarrier.wait(bars.index(nxt % STAGES), (nxt // STAGES) & 1, pred=nxt < steps)
        b_smem.index(nxt % 2).store(decode_slot(w_smem, s_smem, nxt % STAGES, sel, th, tl, WL, BL))
        fence_async_shared()
        gl.barrier()  # every thread's part of step i + 1's tile is in shared memory
    acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
    for j in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(j))

    store_out(acc, out_ptr, alpha_ptr, bias_ptr, M, stride_om, off_m, off_n, HAS_BIAS)


# --------------------------------------------------------------------------------------------------------------
# Host side: the weight's copy, the configs, the launch (inputs validated by the caller)
# --------------------------------------------------------------------------------------------------------------

def repack(data: torch.Tensor, plain_scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """NVFP4 codes uint8 [N, K/2] (low nibble first) and plain UE4M3 scales [N, K/16] -> (words int32 [N, K/8],
    scale words int32 [N, K/64]): word (n, j) holds the codes of k = 8j .. 8j + 7, code s's magnitude at bits
    4s .. 4s + 2 and its sign at `_decode_frag.SIGN_BITS[s]`; scale word (n, c) the 4 scale bytes of
    k = 64c .. 64c + 63, block b in byte b."""
    n, kh = data.shape
    codes = torch.stack((data & 15, data >> 4), dim=-1).reshape(n, kh // 4, 8).to(torch.int32)
    shifts = 4 * torch.arange(8, device=data.device, dtype=torch.int32)
    sign_at = torch.tensor(_frag.SIGN_BITS, device=data.device, dtype=torch.int32)
    words = (((codes & 7) << shifts).sum(-1) | ((codes >> 3) << sign_at).sum(-1)).to(torch.int64)
    words = torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)
    scale_words = plain_scales.view(torch.uint8).reshape(n, kh // 32, 4).contiguous().view(torch.int32)
    return words, scale_words.reshape(n, kh // 32)


def _descriptors(dw: "DqWeight", block_n: int) -> tuple[TensorDescriptor, TensorDescriptor]:
    """TMA descriptors of the words ([N, K/8], block [block_n, 8]) and of the scale words transposed ([K/64, N],
    block [1, block_n]): their rows are 32 and block_n * 4 bytes, at least TMA's 16."""
    words = TensorDescriptor(dw.words, list(dw.words.shape), [dw.words.stride(0), 1], [block_n, 8], _PLAIN32)
    scales = TensorDescriptor(dw.scales_t, list(dw.scales_t.shape), [dw.scales_t.stride(0), 1], [1, block_n],
                              _PLAIN32)
    return words, scales


class DqWeight:
    """A weight's copy for this kernel (`repack`, made once per weight tensor: see `dq_weight_of`) and its TMA
    descriptors per BLOCK_N (`descriptors`)."""

    def __init__(self, data: torch.Tensor, scales: torch.Tensor, scale_layout: str, shape: tuple[int, int]):
        n, k = shape
        plain = scales if scale_layout == "plain" else from_blocked_scales(scales, n, k // 16)
        step = max(16, (_frag.REPACK_BYTES // max(1, 16 * k)) // 16 * 16)  # the int32 temporaries: ~16x the bytes
        parts = [repack(data[r:r + step], plain[r:r + step]) for r in range(0, n, step)]
        self.words = torch.cat([w for w, _ in parts])
        self.scales = torch.cat([s for _, s in parts])
        self.scales_t = self.scales.t().contiguous()  # [K/64, N]: one TMA row per K step
        self.shape = (n, k)
        self._descs: dict[int, tuple] = {}
        self.versions = (data._version, scales._version)


    def descriptors(self, block_n: int) -> tuple[TensorDescriptor, TensorDescriptor]:
        """The words' and scale words' descriptors for tiles of block_n rows (made once)."""
        hit = self._descs.get(block_n)
        if hit is None:
            hit = self._descs[block_n] = _descriptors(self, block_n)
        return hit


_COPIES: dict[int, DqWeight] = {}


def dq_weight_of(data: torch.Tensor, scales: torch.Tensor, scale_layout: str, shape: tuple[int, int]) -> DqWeight:
    """The repacked copy of these codes and scales: made on first use, again after an in-place edit of either,
    dropped with the data tensor (as `_decode_frag.frag_weight_of`)."""
    key = id(data)
    hit = _COPIES.get(key)
    if hit is not None and hit.shape == tuple(shape) and hit.versions == (data._version, scales._version):
        return hit
    if hit is None:
        weakref.finalize(data, _COPIES.pop, key, None)
    hit = _COPIES[key] = DqWeight(data, scales, scale_layout, tuple(shape))
    return hit


#: (BLOCK_M, BLOCK_N, STAGES) of the one-partition kernel the tuner times: 128 x 128 (twice the CTAs of 256 x 128,
#: the fastest form near MIN_M: H200, 'd' jobs of decode_sweep.py, M = 256: 42 us at N = K = 4096, 80 at 8192).
_SHAPES = ((128, 128, 4),)
#: (BLOCK_M, BLOCK_N, STAGES, DEC) of the warp-specialized form (`dq_wgmma_ws`) the tuner times. On the H200 it is
#: 1.12 - 1.24x faster than the one-partition kernel at 256 x 128 (M = 4096, N = K = 4096: 231 against 264 us;
#: M = 1024, N = K = 8192: 219 against 251), which it replaces there. 128 x 256 is not offered: its m64n256 wgmma
#: needs more than the 128 registers per thread ptxas allows a 16-warp kernel.
_WS_SHAPES = ((256, 128, 4, 3), (256, 128, 4, 2), (128, 128, 6, 4))
GROUP_M = 8


def smem_bytes(block_m: int, block_n: int, stages: int, dec: int = 2) -> int:
    """Shared memory of a config: the ring (x tile, weight words, scale words) and the `dec` bf16 buffers."""
    return stages * (2 * block_m * 64 + block_n * 32 + block_n * 4) + dec * 2 * block_n * 64


def dq_candidates(m: int, n: int, k: int) -> list[dict]:
    """Every config the decode tuner times at this shape (none below MIN_M or where the tiles do not divide)."""
    if m < MIN_M or k % 64:
        return []
    plain = [{"path": "dq_wgmma", "BLOCK_M": bm, "BLOCK_N": bn, "STAGES": st, "SPLIT_K": 1, "DEC": 0}
             for bm, bn, st in _SHAPES if n % bn == 0]
    return plain + [{"path": "dq_wgmma", "BLOCK_M": bm, "BLOCK_N": bn, "STAGES": st, "SPLIT_K": 1, "DEC": dec}
                    for bm, bn, st, dec in _WS_SHAPES if n % bn == 0]


def dq_label(cfg: dict) -> str:
    """Short name of a config, e.g. 'dq_wgmma 256x128 s4', 'dq_wgmma 256x128 s4 ws3' (warp-specialized, 3 bf16
    buffers)."""
    ws = f" ws{cfg['DEC']}" if cfg.get("DEC") else ""
    return f"dq_wgmma {cfg['BLOCK_M']}x{cfg['BLOCK_N']} s{cfg['STAGES']}{ws}"


def check_dq_config(op: str, cfg: dict, m: int, n: int, k: int) -> None:
    """InputError unless `cfg` is a config this kernel can run for (M, N, K)."""
    bm, bn, st, dec = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["STAGES"], cfg.get("DEC", 0)
    problems = []
    if bm not in (128, 256) or bn not in (64, 128, 256) or bm * bn > 128 * 256:
        problems.append(f"BLOCK_M must be 128 or 256 and BLOCK_N 64, 128 or 256 with BLOCK_M * BLOCK_N <= 32768 "
                        f"(128 accumulator registers per thread), got {bm} x {bn}")
    if dec not in (0, 2, 3, 4) or (dec and (bn > 128 or dec > st)):
        problems.append(f"DEC (bf16 buffers of the warp-specialized form) must be 0 (the one-partition kernel) or "
                        f"2 .. 4 with BLOCK_N <= 128 and DEC <= STAGES, got DEC={dec} with BLOCK_N={bn}, "
                        f"STAGES={st}")
    if st not in (2, 3, 4, 5, 6) or smem_bytes(bm, bn, st, max(dec, 2)) > MAX_SMEM_BYTES:
        problems.append(f"STAGES must be 2 .. 6 with {smem_bytes(bm, bn, 1, 0)} bytes per stage and "
                        f"{smem_bytes(bm, bn, 0, max(dec, 2))} of bf16 buffers within {MAX_SMEM_BYTES} bytes of "
                        f"shared memory, got {st}")
    if cfg.get("SPLIT_K", 1) != 1:
        problems.append(f"SPLIT_K must be 1 (K is not split), got {cfg.get('SPLIT_K')}")
    if n % bn or k % 64 or n * k // 8 >= 2 ** 31:
        problems.append(f"N must be a multiple of BLOCK_N and K of 64, N * K < 2^34 (got N={n}, K={k})")
    if problems:
        raise InputError(f"{op}: dq_wgmma config {cfg}: " + "; ".join(problems))


#: The one-partition kernel and the warp-specialized one, by whether a config has DEC buffers.
_LAUNCHERS = {False: CachedLauncher(dq_wgmma_kernel, pipeline=False),
              True: CachedLauncher(_ws.dq_ws_kernel, pipeline=False)}


class DqLaunch:
    """One compiled config for one (M, N, K, dtype, bias) signature, replayable: `run(x, data, scales, alpha,
    bias)` makes x's descriptor, allocates the output and launches once."""

    def __init__(self, cfg: dict, m: int, n: int, k: int, out_dtype: torch.dtype, device: torch.device,
                 entry: tuple, layout: str):
        self.cfg, self.m, self.n, self.k, self.layout = cfg, m, n, k, layout
        self.out_dtype, self.device, self.entry = out_dtype, device, entry
        self.grid = (dq_grid(cfg, m, n), 1, 1)
        self.tables = _wide.lane_tables(device)

    def run(self, x: torch.Tensor, data: torch.Tensor, scales: torch.Tensor, alpha: torch.Tensor,
            bias: "torch.Tensor | None") -> torch.Tensor:
        """out [M, N] for new tensors of the same signature."""
        dw = dq_weight_of(data, scales, self.layout, (self.n, self.k))
        out = torch.empty((self.m, self.n), dtype=self.out_dtype, device=self.device)
        run_entry(self.entry, self.grid, self.device,
                  (x_descriptor(x, self.cfg["BLOCK_M"]), *dw.descriptors(self.cfg["BLOCK_N"]), out, alpha,
                   out if bias is None else bias, self.tables, self.m, self.n, self.k, out.stride(0)))
        return out


def dq_grid(cfg: dict, m: int, n: int) -> int:
    """The number of CTAs (one per output tile) of `cfg` for an [M, N] output."""
    return triton.cdiv(m, cfg["BLOCK_M"]) * (n // cfg["BLOCK_N"])


def x_descriptor(x: torch.Tensor, block_m: int, block_k: int = 64) -> TensorDescriptor:
    """x bf16 [M, K] as a TMA descriptor of [block_m, block_k] tiles in the wgmma operand layout (rows swizzled
    by up to 128 bytes); x is copied first where its rows are not 16-byte aligned or its inner stride is not 1."""
    if x.stride(1) != 1 or (x.stride(0) * 2) % 16 or x.data_ptr() % 16:
        x = x.contiguous()
    layout = _X_LAYOUT if block_k >= 64 else gl.NVMMASharedLayout(swizzle_byte_width=2 * block_k,
                                                                    element_bitwidth=16, rank=2)
    return TensorDescriptor(x, list(x.shape), [x.stride(0), 1], [block_m, block_k], layout)


def launch_dq(x: torch.Tensor, w_q, alpha: torch.Tensor, bias: "torch.Tensor | None", cfg: dict, *,
              out_dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, DqLaunch]:
    """(out [M, N], replayable launch) on validated inputs (`check_dq_config` passed); alpha: fp32 [1]."""
    m, k = x.shape
    n = w_q.shape[0]
    device = x.device
    dw = dq_weight_of(w_q.data, w_q.scales, w_q.scale_layout, (n, k))
    out = torch.empty((m, n), dtype=out_dtype, device=device)
    b = out if bias is None else bias
    args = (x_descriptor(x, cfg["BLOCK_M"]), *dw.descriptors(cfg["BLOCK_N"]), out, alpha, b, _wide.lane_tables(device),
            m, n, k, out.stride(0))
    ws = bool(cfg.get("DEC"))
    kwargs = {"BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"], "STAGES": cfg["STAGES"], "GROUP_M": GROUP_M,
              "HAS_BIAS": bias is not None, "num_warps": 8}
    if ws:
        kwargs.update(DEC=cfg["DEC"], maxnreg=_ws.MAXNREG)
    key = ("dq_wgmma", m, n, k, out.dtype, b.dtype, tuple(sorted(kwargs.items())))
    entry = _LAUNCHERS[ws].launch(key, (dq_grid(cfg, m, n), 1, 1), device, args, kwargs)
    return out, DqLaunch(cfg, m, n, k, out_dtype, device, entry, w_q.scale_layout)
