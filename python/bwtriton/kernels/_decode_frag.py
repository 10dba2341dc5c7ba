"""Weight-only NVFP4 decode on tensor cores with the weight stored in MMA-fragment order (the "frag" path).

out[M, N] = x[M, K] (bf16) @ dequant(w_q)[N, K]^T for M <= 16. The weight is the A operand of
`mma.sync.m16n8k16.bf16` (16 weight rows x 16 k: exactly one NVFP4 scale group), x^T the B operand, so tensor
cores do the multiply-adds and their cost does not grow with M up to 8 (16 with a second MMA). What remains on the
CUDA cores is turning 4-bit codes into bf16 fragments, made cheap by a one-time repack of the weight (`FragWeight`,
cached per weight object):

* each lane's 8 codes of one 16x16 tile are one 32-bit word, in the order its fragment registers want them, and a
  lane's words of 4 consecutive K tiles are contiguous (one 16-byte load);
* the 3 magnitude bits of code s sit at bits 4s..4s+2, so the masked word is directly a `prmt` selector: two byte
  tables give the high and low byte of the bf16 value (0, 0.5, 1, 1.5, 2, 3, 4, 6, all exact) and two more `prmt`s
  interleave them into bf16x2 registers;
* the signs fill the selectors' mode bits, placed so that one `lop3` (and one shift) ORs them into the high bytes;
* within a tile, MMA k positions are permuted so that a lane's B operand is one 8-byte load of x.

Per 8 weights: 13 integer instructions of decode, one MMA, 2-4 FFMAs applying the tile's two UE4M3 scales
(`cvt.rn.f16x2.e4m3x2`, exact) to the MMA's fp32 result: ~3 instructions per weight against ~6 for the CUDA-core
GEMV. Exact up to fp32 accumulation order (bf16 products of e2m1 x bf16 are exact; the MMA sums them in fp32).

Memory: the repacked copy is as large as the weight (4.5 bits per weight) and lives as long as the weight's data
tensor; BWTRITON_DECODE_FRAG=0 keeps the tuner off this path (and so never makes the copy).
"""
from __future__ import annotations

import weakref
from typing import Callable

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from bwtriton.formats import from_blocked_scales

from ._common import view_as_words
from . import _launcher
from ._launcher import CachedLauncher, StreamScratch, run_entry
from ._qdq_device import QDQ_MAX_ELEMENTS, encode_scale_from_amax, qdq_slice, w4a4_alpha
from ._split_fixup import arrive_last, finish_split_rows

#: Where the sign of fragment code s (s = 0..7) is stored, in the selectors' mode bits (3, 7, .., 31): codes 0..3
#: at bits 7, 15, 23, 31, so `word & 0x80808080` is the sign byte-plane of the high-byte lookup of codes 0..3;
#: codes 4..7 at bits 3, 11, 19, 27, so `(word << 4) & 0x80808080` is theirs.
SIGN_BITS = (7, 15, 23, 31, 3, 11, 19, 27)


def _fragment_index(natural_k: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, k) within a 16x16 tile of fragment code s of lane l, as [32, 8] tensors. mma.m16n8k16's A layout
    (and wgmma's register A, per warp): lane l = 4g + t holds rows g, g+8 at MMA k positions 2t, 2t+1, 2t+8,
    2t+9 (registers a0a1 a2a3 a4a5 a6a7 = (g, 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)). Any K order
    within a tile gives the same sum, so by default MMA positions 2t, 2t+1, 2t+8, 2t+9 take k = 4t .. 4t+3: lane
    t's B operand (x at the same k) is then one 8-byte load. `natural_k` keeps k = MMA position, for a B operand
    read from shared memory in its natural order (the Gluon wgmma kernel)."""
    lane = torch.arange(32)
    g, t = lane // 4, lane % 4
    s = torch.arange(8)
    row = g[:, None] + 8 * ((s[None, :] // 2) % 2)
    if natural_k:
        k = 2 * t[:, None] + (s[None, :] % 2) + 8 * (s[None, :] // 4)
    else:
        k = 4 * t[:, None] + (s[None, :] % 2) + 2 * (s[None, :] // 4)
    return row, k


#: Chunks (64 k) per row tile a `decode_qdq` CTA prefetches into L2 before its x prologue (PREFETCH).
QDQ_PREFETCH_CHUNKS = 8

#: K tiles (16 wide) per 16-byte load of a lane's words: the repacked layout groups them.
TILES_PER_LOAD = 4


def repack(data: torch.Tensor, scales: torch.Tensor, natural_k: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """NVFP4 codes uint8 [N, K/2] (low nibble first) and plain UE4M3 scales [N, K/16] -> (words int32
    [N/16, K/64, 32, 4], scale pairs int16 [N/16, K/64, 8, 4]): word (T, c, lane, j) is lane's A fragment of rows
    16T.. and k tile kc = 4c + j; pair (T, c, g, j) holds that tile's scales of rows 16T+g (low byte) and 16T+g+8
    (high byte). A lane's 4 words (16 bytes) and 4 pairs (8 bytes) of a chunk are contiguous. `natural_k`: see
    `_fragment_index`."""
    n, kh = data.shape
    k = 2 * kh
    codes = torch.stack((data & 15, data >> 4), dim=-1).reshape(n // 16, 16, k // 16, 16)  # [T, row, kc, k]
    row, kk = (i.to(data.device) for i in _fragment_index(natural_k))
    frag = codes[:, row, :, kk]                                    # [32, 8, T, kc]
    frag = frag.permute(2, 3, 0, 1).to(torch.int32)                # [T, kc, 32, 8]
    shifts = torch.arange(8, device=data.device, dtype=torch.int32)
    sign_at = torch.tensor(SIGN_BITS, device=data.device, dtype=torch.int32)
    words = (((frag & 7) << (4 * shifts)).sum(-1) | ((frag >> 3) << sign_at).sum(-1)).to(torch.int64)
    words = torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)
    words = words.reshape(n // 16, k // 64, TILES_PER_LOAD, 32).transpose(2, 3).contiguous()
    s8 = scales.view(torch.uint8).reshape(n // 16, 2, 8, k // 16).to(torch.int32)  # [T, half, g, kc]
    pairs = s8[:, 0] | (s8[:, 1] << 8)                              # [T, g, kc]
    pairs = torch.where(pairs >= 2 ** 15, pairs - 2 ** 16, pairs).to(torch.int16)
    pairs = pairs.reshape(n // 16, 8, k // 64, TILES_PER_LOAD).transpose(1, 2).contiguous()
    return words, pairs


#: Rows repacked at a time are chosen so that their int32 temporaries stay near this many bytes (~1 GiB).
REPACK_BYTES = 1 << 30


class FragWeight:
    """A weight's repacked copy for the frag path (made once per weight tensor, see `frag_weight`)."""

    def __init__(self, data: torch.Tensor, scales: torch.Tensor, scale_layout: str, shape: tuple[int, int],
                 natural_k: bool = False):
        n, k = shape
        plain = scales if scale_layout == "plain" else from_blocked_scales(scales, n, k // 16)
        # in blocks of rows: the repack's int32 temporaries are ~16x the weight's bytes
        step = max(16, (REPACK_BYTES // max(1, 16 * k)) // 16 * 16)
        parts = [repack(data[r:r + step], plain[r:r + step], natural_k) for r in range(0, n, step)]
        self.words = torch.cat([w for w, _ in parts]) if len(parts) > 1 else parts[0][0]
        self.scales = torch.cat([p for _, p in parts]) if len(parts) > 1 else parts[0][1]
        self.shape = (n, k)
        self.versions = (data._version, scales._version)
        # the kernels' views, made once: a view is a torch op (~1 us of host time) on every call otherwise
        self.words64, self.scales32 = self.words.view(torch.int64), self.scales.view(torch.int32)


#: Repacked copies by (id of the weight's data tensor, natural_k) (a WeakKeyDictionary would compare tensor keys
#: with ==, which is elementwise); an entry goes when that tensor does.
_FRAG: dict[tuple[int, bool], FragWeight] = {}


def frag_weight_of(data: torch.Tensor, scales: torch.Tensor, scale_layout: str,
                   shape: tuple[int, int], natural_k: bool = False) -> FragWeight:
    """The repacked copy of these codes and scales (in `_fragment_index`'s k order): made on first use, again
    after an in-place edit of either (their version counters), dropped with the data tensor."""
    key = (id(data), natural_k)
    hit = _FRAG.get(key)
    if hit is not None and hit.shape == tuple(shape) and hit.versions == (data._version, scales._version):
        return hit
    if hit is None:
        weakref.finalize(data, _FRAG.pop, key, None)
    hit = _FRAG[key] = FragWeight(data, scales, scale_layout, tuple(shape), natural_k)
    return hit


def frag_weight(w_q) -> FragWeight:
    """`frag_weight_of` an NVFP4 `QuantizedTensor`."""
    return frag_weight_of(w_q.data, w_q.scales, w_q.scale_layout, tuple(w_q.shape))


def frag_weight_lookup(w_q) -> Callable[[], FragWeight]:
    """A function returning `frag_weight(w_q)` (a lookup; a repack after in-place edits) that holds only weak
    references to the weight's tensors, for plans that must not keep the weight alive."""
    data_ref, scales_ref = weakref.ref(w_q.data), weakref.ref(w_q.scales)
    layout, shape = w_q.scale_layout, tuple(w_q.shape)
    return lambda: frag_weight_of(data_ref(), scales_ref(), layout, shape)


# Byte tables of the bf16 values 0, 0.5, 1, 1.5, 2, 3, 4, 6 (codes 0..7): high bytes 00 3F 3F 3F 40 40 40 40,
# low bytes 00 00 80 C0 00 40 80 C0, as prmt's 8-byte sources (b, a) = (bytes 4..7, bytes 0..3).
def _decode_ptx(w: str, s16: str, th: str, tl: str) -> str:
    """Word `w` -> bf16x2 fragment a0..a3; scale pair `s16` -> fp32 s0 (row g), s1 (row g+8)."""
    return f"""
    and.b32 sel, {w}, 0x77777777;
    shr.u32 selh, sel, 16;
    prmt.b32 hl, {th}, th1, sel;
    prmt.b32 ll, {tl}, tl1, sel;
    prmt.b32 hh, {th}, th1, selh;
    prmt.b32 lh, {tl}, tl1, selh;
    lop3.b32 hl, hl, {w}, sm, 0xF8;
    shl.b32 sg, {w}, 4;
    lop3.b32 hh, hh, sg, sm, 0xF8;
    prmt.b32 a0, ll, hl, 0x5140;
    prmt.b32 a1, ll, hl, 0x7362;
    prmt.b32 a2, lh, hh, 0x5140;
    prmt.b32 a3, lh, hh, 0x7362;
    cvt.rn.f16x2.e4m3x2 sp, {s16};
    mov.b32 {{slo, shi}}, sp;
    cvt.f32.f16 s0, slo;
    cvt.f32.f16 s1, shi;
"""


_REGS = (".reg .b32 th1, tl1, sm, z, sel, selh, hl, ll, hh, lh, a0, a1, a2, a3, sg, sp, d0, d1, d2, d3, "
         "w0, w1, xb0, xb1; .reg .b16 slo, shi, sc0, sc1; .reg .f32 s0, s1, c0, c1, c2, c3, c4, c5, c6, c7;")


def _mma_asm(act_rows: int) -> tuple[str, str]:
    """PTX and constraints of one element: two K tiles (a 64-bit word pair, a 32-bit pair of scale pairs), each
    decoded, multiplied by x^T on tensor cores (one MMA per 8 activation rows) and its two scales applied.
    Operands: $0.. = the new accumulators (per MMA: rows g / g+8 x activation rows 2t / 2t+1, only column 2t for
    act_rows 1), then (inputs) the old ones, the word pair, the scale pairs, the low halves of the two byte tables,
    and per MMA the 64-bit x operands of the two tiles."""
    cols = (0, 2) if act_rows == 1 else (0, 1, 2, 3)
    n_mma = 2 if act_rows == 16 else 1
    n_acc = len(cols) * n_mma
    acc_in = [f"${n_acc + i}" for i in range(n_acc)]
    w, s, th, tl = (f"${2 * n_acc + i}" for i in range(4))
    xs = [[f"${2 * n_acc + 4 + 2 * j + h}" for h in range(2)] for j in range(n_mma)]
    body = ("mov.b32 th1, 0x40404040; mov.b32 tl1, 0xC0804000; mov.b32 sm, 0x80808080; mov.b32 z, 0;\n"
            f"mov.b64 {{w0, w1}}, {w}; mov.b32 {{sc0, sc1}}, {s};\n")
    for h in range(2):
        body += _decode_ptx(f"w{h}", f"sc{h}", th, tl)
        for j in range(n_mma):
            body += (f"mov.b64 {{xb0, xb1}}, {xs[j][h]};\n"
                     "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {d0, d1, d2, d3}, {a0, a1, a2, a3}, "
                     "{xb0, xb1}, {z, z, z, z};\n")
            for i, c in enumerate(cols):
                a = len(cols) * j + i
                # into temporaries: an output register may share an input's, which the second tile still reads
                body += f"fma.rn.f32 c{a}, d{c}, {'s0' if c < 2 else 's1'}, {acc_in[a] if h == 0 else f'c{a}'};\n"
    body += "".join(f"mov.b32 ${a}, c{a};\n" for a in range(n_acc))
    constraints = ",".join(["=r"] * n_acc + ["r"] * n_acc + ["l", "r", "r", "r"] + ["l"] * (2 * n_mma))
    return "{" + _REGS + body + "}", constraints


_ASM_M1, _CONSTRAINTS_M1 = (gl.constexpr(v) for v in _mma_asm(1))
_ASM_N8, _CONSTRAINTS_N8 = (gl.constexpr(v) for v in _mma_asm(8))
_ASM_N16, _CONSTRAINTS_N16 = (gl.constexpr(v) for v in _mma_asm(16))


#: The low 4 bytes of the two prmt tables (codes 0..3): high bytes 00 3F 3F 3F, low bytes 00 00 80 C0 (the upper
#: halves 40 40 40 40 / 00 40 80 C0 are immediates in `_DECODE`). The kernel reads them from a [32, 2] tensor, one
#: row per lane (`lane_tables`): values ptxas knows are constant (or uniform) are copied into a register again at
#: every prmt that uses them, 4 extra instructions per 8 weights.
TABLE_HI, TABLE_LO = 0x3F3F3F00, 0xC0800000 - 2 ** 32

_TABLES: dict = {}


def lane_tables(device: torch.device) -> torch.Tensor:
    """The int32 [32, 2] (TABLE_HI, TABLE_LO) per lane on `device`, made once per device."""
    hit = _TABLES.get(device)
    if hit is None:
        hit = torch.tensor([[TABLE_HI, TABLE_LO]] * 32, dtype=torch.int32, device=device)
        _TABLES[device] = hit
    return hit


@gluon.jit
def nvfp4_frag_kernel(x_ptr, w_ptr, s_ptr, out_ptr, alpha_ptr, bias_ptr, table_ptr, M, N, K, stride_xm, stride_om,
                      split_k, xsrc_ptr, xd_ptr, s_enc_ptr, stride_srcm, acc_ptr, count_ptr,
                      TILES_PER_THREAD: gl.constexpr, CHUNKS_PER_STEP: gl.constexpr,
                      ACT_ROWS: gl.constexpr, ATOMIC: gl.constexpr, HAS_BIAS: gl.constexpr = False,
                      QUANT_X: gl.constexpr = False, S_ENC_FROM_AMAX: gl.constexpr = False,
                      FIXUP: gl.constexpr = False, QDQ_KQ: gl.constexpr = 256, PREFETCH: gl.constexpr = 0):
    """out[m, n] = alpha * sum_kc s[n, kc] * (A-fragment MMA of 16 rows x 16 k with x^T), fp32 throughout.

    A CTA owns TILES_PER_THREAD * num_warps row tiles of 16 (a warp's lanes form each tile's fragments, as
    mma.sync wants) and walks its K slice CHUNKS_PER_STEP chunks (64 k: one 16-byte load of words per lane and
    tile) per iteration. Tensors are [tiles, 32 lanes, 2]: an element is two K tiles (an int64 word pair). ACT_ROWS
    (1, 8 or 16) bounds M: 1 accumulates only the MMA's first column, 16 issues a second MMA for activation rows
    8..15. x_ptr is the bf16 activation viewed as int64 [M, K/4]; w_ptr / s_ptr the `repack`ed words (int64 view)
    and scale pairs (int32 view). The grid's second axis splits K in `split_k` slices (a runtime value: one
    compile serves every split); ATOMIC must be set when split_k > 1 (fp32 atomics into a zeroed output).

    FIXUP (with ATOMIC, split_k > 1): the K slices add into acc_ptr (fp32 [M, N], zero on entry) and count their
    arrivals per row block in count_ptr (int32, zero on entry); the slice that arrives last applies alpha and the
    bias, writes out_ptr in its own dtype and puts both back to zero for the next call: one launch, no memset and
    no cast kernel. QUANT_X: xsrc_ptr is the bf16 activation (row stride stride_srcm) and x_ptr / xd_ptr (int64 and
    bf16 views of one [M, K] buffer) its NVFP4 values, which each CTA writes for its K slice first
    (`_qdq_device.qdq_slice`, QDQ_KQ columns per step) with S_enc from s_enc_ptr (or from amax(x),
    S_ENC_FROM_AMAX); alpha_ptr then holds S_dec(w) and the epilogue scale is div_rn(1, S_enc) * S_dec(w).
    PREFETCH > 0: before that prologue the CTA asks L2 for the first PREFETCH chunks of its weight words and
    scales (bulk prefetches), so that the weight stream starts while x is quantized."""
    W: gl.constexpr = gl.num_warps()
    BT: gl.constexpr = TILES_PER_THREAD * W
    L: gl.constexpr = gl.BlockedLayout([TILES_PER_THREAD, 1, 2], [1, 32, 1], [W, 1, 1], [2, 1, 0])
    L2: gl.constexpr = gl.SliceLayout(2, L)    # [tiles, lanes]: the epilogue
    LX: gl.constexpr = gl.SliceLayout(0, L)    # [lanes, 2]: x, shared by a thread's tiles
    pid_n = gl.program_id(0)
    pid_k = gl.program_id(1)
    chunks = K // 64
    span = chunks // split_k
    c_lo = pid_k * span
    tile = pid_n * BT + gl.arange(0, BT, layout=gl.SliceLayout(1, L2))
    lane = gl.arange(0, 32, layout=gl.SliceLayout(0, L2))
    v = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(1, L)))
    tile3 = gl.expand_dims(gl.expand_dims(tile.to(gl.int64) * chunks + c_lo, 1), 2)
    lane3 = gl.expand_dims(gl.expand_dims(lane, 0), 2)
    v3 = gl.expand_dims(gl.expand_dims(v, 0), 1)
    wp = w_ptr + (tile3 * 64 + lane3 * 2 + v3)
    sp = s_ptr + (tile3 * 16 + (lane3 // 4) * 2 + v3)
    lane_x = gl.arange(0, 32, layout=gl.SliceLayout(1, LX))
    vx = gl.arange(0, 2, layout=gl.SliceLayout(0, LX))
    gx = gl.expand_dims(lane_x // 4, 1)
    xp0 = x_ptr + (gx * stride_xm + gl.expand_dims(lane_x % 4, 1) + gl.expand_dims(8 * vx, 0) + c_lo * 16)
    xm0 = (gx < M) & gl.expand_dims(vx >= 0, 0)
    xp1 = xp0 + 8 * stride_xm
    xm1 = (gx + 8 < M) & gl.expand_dims(vx >= 0, 0)
    zero = gl.zeros([BT, 32, 2], gl.float32, L)
    if PREFETCH > 0:  # the first PREFETCH chunks of every row tile's words and scales, on their way to L2
        first = tile.to(gl.int64) * chunks + c_lo
        size = (tile * 0 + PREFETCH).to(gl.int32)
        prefetch_l2(w_ptr + first * 64, size * 512)
        prefetch_l2(s_ptr + first * 16, size * 64)
    if QUANT_X:
        if S_ENC_FROM_AMAX:
            s_enc = encode_scale_from_amax(xsrc_ptr, M, K, stride_srcm, ACT_ROWS, QDQ_KQ)
        else:
            s_enc = gl.load(s_enc_ptr)
        qdq_slice(xsrc_ptr, xd_ptr, s_enc, M, stride_srcm, 4 * stride_xm, c_lo * 64, span * 64, ACT_ROWS, QDQ_KQ)
    th = gl.broadcast(gl.expand_dims(gl.expand_dims(gl.load(table_ptr + 2 * lane), 0), 2), zero)[0]
    tl = gl.broadcast(gl.expand_dims(gl.expand_dims(gl.load(table_ptr + 2 * lane + 1), 0), 2), zero)[0]
    a0, a1, a2, a3 = zero, zero, zero, zero
    a4, a5, a6, a7 = zero, zero, zero, zero
    for _ in range(0, span, CHUNKS_PER_STEP):
        for j in gl.static_range(CHUNKS_PER_STEP):
            w = gl.load(wp + j * 64)
            s = gl.load(sp + j * 16)
            xa = gl.broadcast(gl.expand_dims(gl.load(xp0 + j * 16, mask=xm0, other=0), 0), zero)[0]
            xb = gl.broadcast(gl.expand_dims(gl.load(xp0 + (j * 16 + 4), mask=xm0, other=0), 0), zero)[0]
            if ACT_ROWS == 1:
                a0, a2 = gl.inline_asm_elementwise(
                    _ASM_M1, _CONSTRAINTS_M1, [a0, a2, w, s, th, tl, xa, xb],
                    dtype=(gl.float32, gl.float32), is_pure=True, pack=1)
            elif ACT_ROWS == 8:
                a0, a1, a2, a3 = gl.inline_asm_elementwise(
                    _ASM_N8, _CONSTRAINTS_N8, [a0, a1, a2, a3, w, s, th, tl, xa, xb],
                    dtype=(gl.float32, gl.float32, gl.float32, gl.float32), is_pure=True, pack=1)
            else:
                xc = gl.broadcast(gl.expand_dims(gl.load(xp1 + j * 16, mask=xm1, other=0), 0), zero)[0]
                xd = gl.broadcast(gl.expand_dims(gl.load(xp1 + (j * 16 + 4), mask=xm1, other=0), 0), zero)[0]
                a0, a1, a2, a3, a4, a5, a6, a7 = gl.inline_asm_elementwise(
                    _ASM_N16, _CONSTRAINTS_N16, [a0, a1, a2, a3, a4, a5, a6, a7, w, s, th, tl, xa, xb, xc, xd],
                    dtype=(gl.float32,) * 8, is_pure=True, pack=1)
        wp += CHUNKS_PER_STEP * 64
        sp += CHUNKS_PER_STEP * 16
        xp0 += CHUNKS_PER_STEP * 16
        xp1 += CHUNKS_PER_STEP * 16
    if QUANT_X:
        alpha = w4a4_alpha(s_enc, alpha_ptr)
    else:
        alpha = gl.load(alpha_ptr)
    r = gl.expand_dims(tile * 16, 1) + gl.expand_dims(lane // 4, 0)            # accumulator rows g (+8)
    c = gl.expand_dims(2 * (lane % 4), 0) + gl.zeros([BT, 32], gl.int32, L2)   # activation rows 2t (+1, +8, +9)
    if FIXUP:
        dst = acc_ptr
        scale = 1.0
        stride_dst = N
    else:
        dst = out_ptr
        scale = alpha
        stride_dst = stride_om
    bias_now: gl.constexpr = HAS_BIAS and not FIXUP
    _frag_store(dst, bias_ptr, a0, scale, r, c, M, stride_dst, pid_k, bias_now, ATOMIC)
    _frag_store(dst, bias_ptr, a2, scale, r + 8, c, M, stride_dst, pid_k, bias_now, ATOMIC)
    if ACT_ROWS > 1:
        _frag_store(dst, bias_ptr, a1, scale, r, c + 1, M, stride_dst, pid_k, bias_now, ATOMIC)
        _frag_store(dst, bias_ptr, a3, scale, r + 8, c + 1, M, stride_dst, pid_k, bias_now, ATOMIC)
    if ACT_ROWS == 16:
        _frag_store(dst, bias_ptr, a4, scale, r, c + 8, M, stride_dst, pid_k, bias_now, ATOMIC)
        _frag_store(dst, bias_ptr, a5, scale, r, c + 9, M, stride_dst, pid_k, bias_now, ATOMIC)
        _frag_store(dst, bias_ptr, a6, scale, r + 8, c + 8, M, stride_dst, pid_k, bias_now, ATOMIC)
        _frag_store(dst, bias_ptr, a7, scale, r + 8, c + 9, M, stride_dst, pid_k, bias_now, ATOMIC)
    if FIXUP:
        if arrive_last(count_ptr + pid_n, split_k):
            finish_split_rows(acc_ptr, out_ptr, bias_ptr, alpha, pid_n * BT * 16, M, N,
                              stride_om, BT * 16, HAS_BIAS, ACT_ROWS)


_PREFETCH_L2 = gl.constexpr("{ .reg .pred p; .reg .b32 l; mov.u32 l, %laneid; setp.eq.u32 p, l, 0; "
                            "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }")


@gluon.jit
def prefetch_l2(ptr, nbytes):
    """cp.async.bulk.prefetch.L2 of `nbytes` (int32, a multiple of 16, same shape) at each address of `ptr`
    (16-byte aligned), from lane 0 only (the layout repeats an address over the lanes)."""
    gl.inline_asm_elementwise(_PREFETCH_L2, "=r,l,r", [ptr, nbytes], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _frag_store(out_ptr, bias_ptr, acc, alpha, row, m, M, stride_om, pid_k, HAS_BIAS: gl.constexpr,
                ATOMIC: gl.constexpr):
    """Store one accumulator register's outputs (weight row n, activation row m; its two K-tile halves summed),
    masked to m < M."""
    res = gl.sum(acc, axis=2) * alpha
    if HAS_BIAS:
        if pid_k == 0:  # split-K: one K slice adds the bias
            res = res + gl.load(bias_ptr + row).to(gl.float32)
    mask = m < M
    if not ATOMIC:
        gl.store(out_ptr + (m * stride_om + row), res.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        gl.atomic_add(out_ptr + (m * stride_om + row), res, mask=mask, sem="relaxed")


# ---------------------------------------------------------------------------------------------- host side
#: Largest M the frag path takes (two MMAs of 8 activation rows).
FRAG_MAX_M = 16

#: (TILES_PER_THREAD, CHUNKS_PER_STEP, num_warps, SPLIT_K) the tuner tries: the winners of an H200 sweep over
#: T 1/2/4 x C 1/2/4/8 x 4/8 warps x split 2..32 at M = 1, 4, 16 and (N, K) = (8192, 8192), (7168, 16384),
#: (4096, 7168), (7168, 2048) under graph replay. The split is lowered where K has fewer chunks.
_FRAG_SHAPES = ((4, 4, 8, 16), (4, 2, 8, 16), (2, 2, 4, 8), (4, 2, 4, 32), (1, 2, 8, 8))


def frag_candidate(m: int, n: int, k: int, tiles: int, chunks_per_step: int, warps: int,
                   split: int) -> "dict | None":
    """A frag config of that shape that tiles (N, K) (the split halved until it divides K's chunks), or None."""
    if m > FRAG_MAX_M or n % (16 * tiles * warps) or k % 64:
        return None
    chunks = k // 64
    while split > 1 and chunks % (chunks_per_step * split):
        split //= 2
    if chunks % (chunks_per_step * split):
        return None
    return {"path": "frag", "TILES_PER_THREAD": tiles, "CHUNKS_PER_STEP": chunks_per_step, "num_warps": warps,
            "SPLIT_K": split, "FIXUP": False}


def frag_candidates(m: int, n: int, k: int) -> list[dict]:
    """The frag configs the decode tuner times for this shape (none above FRAG_MAX_M): each split-K one twice,
    reduced by a zeroed fp32 output and a cast kernel (FIXUP False) and inside the launch (FIXUP True, one launch;
    each CTA's release waits for its atomics, which the H200 measured slower at large K, docs/kernels.md)."""
    cands = []
    for shape in _FRAG_SHAPES:
        cfg = frag_candidate(m, n, k, *shape)
        for c in (cfg, None if cfg is None or cfg["SPLIT_K"] == 1 else dict(cfg, FIXUP=True)):
            if c is not None and c not in cands:
                cands.append(c)
    return cands


def frag_block_n(cfg: dict) -> int:
    """Weight rows per CTA of a frag config."""
    return 16 * cfg["TILES_PER_THREAD"] * cfg["num_warps"]


def act_rows(m: int) -> int:
    """The kernel's ACT_ROWS for M activation rows (1, 8 or 16)."""
    return 1 if m == 1 else (8 if m <= 8 else 16)


def qdq_kq(m: int, k_slice: int, warps: int) -> int:
    """Columns per step of the kernel's x prologue (QUANT_X): the slice in as few steps as fit 64 values per thread
    (a power of two, at least one warp's 256 columns)."""
    rows = act_rows(m)
    return max(256, min(triton.next_power_of_2(k_slice), 2048 * warps // rows))


def qdq_fits(m: int, k: int, cfg: dict) -> bool:
    """Whether a CTA of `cfg` may quantize-dequantize its x slice itself (`_qdq_device.QDQ_MAX_ELEMENTS`)."""
    return act_rows(m) * (k // cfg["SPLIT_K"]) <= QDQ_MAX_ELEMENTS


def fixup(cfg: dict) -> bool:
    """Whether `cfg` reduces its split-K slices inside the launch (`_split_fixup`)."""
    return cfg["SPLIT_K"] > 1 and bool(cfg.get("FIXUP", False))


def frag_kwargs(cfg: dict, m: int, has_bias: bool, k: int = 0, quant_x: bool = False,
                s_enc_from_amax: bool = False) -> dict:
    """The kernel's constexpr / launch keywords for `cfg` (PREFETCH at most the chunks of a CTA's K slice)."""
    split = cfg["SPLIT_K"]
    kw = {"TILES_PER_THREAD": cfg["TILES_PER_THREAD"], "CHUNKS_PER_STEP": cfg["CHUNKS_PER_STEP"],
          "ACT_ROWS": act_rows(m), "ATOMIC": split > 1, "HAS_BIAS": has_bias, "FIXUP": fixup(cfg),
          "PREFETCH": min(cfg.get("PREFETCH", 0), k // 64 // split) if k else 0, "num_warps": cfg["num_warps"]}
    if quant_x:
        kw.update(QUANT_X=True, S_ENC_FROM_AMAX=s_enc_from_amax, QDQ_KQ=qdq_kq(m, k // split, cfg["num_warps"]))
    return kw


LAUNCHER = CachedLauncher(nvfp4_frag_kernel, pipeline=False)

#: Largest scratch set a `FragLaunch` keeps per stream (above it, made per call: for split-K, a memset launch).
SCRATCH_KEEP_BYTES = 64 << 20


class FragLaunch:
    """The frag kernel for one (cfg, M, x row stride, out dtype, bias or not, x scale source): `run` launches it,
    the first time through Triton's JIT, later with the compiled entry. Split-K goes into a zeroed fp32 output
    that is cast afterwards, or (FIXUP) is reduced inside the launch with this launch's accumulator and counters
    per stream (`_launcher.StreamScratch`: zero between launches). `quant_x`: x is quantize-dequantized to NVFP4
    in the prologue (`_qdq_device`) into a per-stream bf16 copy, S_enc from `s_enc` or, when that is None, from
    amax(x); alpha is then S_dec(w)."""

    def __init__(self, cfg: dict, m: int, n: int, k: int, x_stride: int, out_dtype: torch.dtype, has_bias: bool,
                 device: torch.device, quant_x: bool = False, s_enc_from_amax: bool = False):
        self.m, self.n, self.k, self.device, self.out_dtype = m, n, k, device, out_dtype
        self.split, self.quant_x, self.fixup = cfg["SPLIT_K"], quant_x, fixup(cfg)
        blocks = n // frag_block_n(cfg)
        self.grid = (blocks, self.split, 1)
        self.kwargs = frag_kwargs(cfg, m, has_bias, k, quant_x, s_enc_from_amax)
        self.key = ("frag", m, n, k, x_stride, out_dtype, has_bias, tuple(sorted(self.kwargs.items())))
        self.entry = None
        self.tables = lane_tables(device)
        with_fixup = self.fixup

        def make() -> tuple:
            xd = torch.empty((m, k), dtype=torch.bfloat16, device=device) if quant_x else None
            if not with_fixup:
                return None, None, xd
            # accumulator and counters in one zeroed buffer: one memset where a CUDA graph captures a fresh set
            zeroed = torch.zeros(m * n + blocks, dtype=torch.float32, device=device)
            return zeroed[:m * n].view(m, n), zeroed[m * n:].view(torch.int32), xd
        # nothing to keep without FIXUP and QUANT_X: the kernel's unread pointers get tensors the call has anyway
        self.scratch = (StreamScratch(make, device, (4 * (m * n + blocks) if with_fixup else 0)
                                      + (2 * m * k if quant_x else 0), max_bytes=SCRATCH_KEEP_BYTES)
                        if with_fixup or quant_x else None)

    def run(self, x: torch.Tensor, fw: FragWeight, alpha: torch.Tensor, bias: "torch.Tensor | None",
            s_enc: "torch.Tensor | None" = None) -> torch.Tensor:
        """out = the frag GEMM of x (bf16 [M, K], the row stride of this launch) with `fw`, times alpha, + bias."""
        m, n, device = self.m, self.n, self.device
        atomic_out = self.split > 1 and not self.fixup
        out = (torch.zeros((m, n), dtype=torch.float32, device=device) if atomic_out
               else torch.empty((m, n), dtype=self.out_dtype, device=device))
        acc, count, xd = self.scratch.get() if self.scratch is not None else (None, None, None)
        if not self.fixup:  # the kernel's unread pointers: tensors of this call
            acc, count = out, self.tables
        src, s = x, alpha
        if self.quant_x:
            src, x, s = x, xd, (alpha if s_enc is None else s_enc)
        else:
            xd = x
        # On the GPU the compiled launcher reads only data_ptr(), so x goes in as is where its int64 view would be
        # plain: one torch view op (2-3 us of host time) less per call. The emulator's launcher checks dtypes.
        if (self.entry is not None and _launcher.reads_only_data_ptr(device) and x.stride(1) == 1
                and x.stride(0) % 4 == 0):
            x64, sx = x, x.stride(0) // 4
        else:  # the first launch binds dtypes: the int64 view
            x64 = view_as_words(x, torch.int64)
            sx = x64.stride(0)
        args = (x64, fw.words64, fw.scales32, out, alpha, out if bias is None else bias, self.tables, m, n,
                self.k, sx, n, self.split, src, xd, s, src.stride(0), acc, count)
        if self.entry is None:
            self.entry = LAUNCHER.launch(self.key, self.grid, device, args, self.kwargs)
        else:
            run_entry(self.entry, self.grid, device, args)
        return out.to(self.out_dtype) if atomic_out else out


_FRAG_LAUNCHES: dict[tuple, FragLaunch] = {}


def frag_launch(cfg: dict, m: int, n: int, k: int, x_stride: int, out_dtype: torch.dtype, has_bias: bool,
                device: torch.device, quant_x: bool = False, s_enc_from_amax: bool = False) -> FragLaunch:
    """The `FragLaunch` of these facts (made once)."""
    key = (tuple(sorted(cfg.items())), m, n, k, x_stride, out_dtype, has_bias, device, quant_x, s_enc_from_amax)
    hit = _FRAG_LAUNCHES.get(key)
    if hit is None:
        hit = _FRAG_LAUNCHES[key] = FragLaunch(cfg, m, n, k, x_stride, out_dtype, has_bias, device, quant_x,
                                               s_enc_from_amax)
    return hit
