"""Weight-only NVFP4 decode for M up to 128 on mma.sync, reading the frag path's repacked weight (`_decode_frag`).

The M <= 16 frag kernel applies a tile's two UE4M3 scales to each MMA's fp32 result (2-4 FFMAs per MMA), a cost
that grows with M: at M = 64 it would be 32 FFMAs per 16x16 tile against 13 decode instructions. Here the scale
goes into the weight instead, so every MMA accumulates in place and the per-tile cost is the decode alone:

* the byte tables give e2m1 * 2^120 in bf16 (high bytes 0x7B / 0x7C instead of 0x3F / 0x40), and the scale byte
  shifted left by 4 read as bf16 bits is exactly scale * 2^-120 for every UE4M3 value, subnormals included (the
  bf16 exponent field sits 4 bits higher than e4m3's and its bias is 120 larger); one `mul.rn.bf16x2` per
  register pair forms e2m1 * scale, which has at most 6 significant bits and lies in [2^-10, 2688]: exact;
* the A fragments of a tile are decoded once and feed one `mma.sync.m16n8k16` per 8 activation rows
  (ACT_BLOCKS of them, the tensor's last dimension), accumulating into the fp32 result.

Per 16x16 tile and lane: 13 decode + 4 scale + 4 multiply instructions, ACT_BLOCKS MMAs and their x loads. Exact
up to the MMA's fp32 summation order, like the frag path. The weight copy is the frag path's (one per weight).
NaN scales (0x7F, never produced by quantization) are not propagated.
"""
from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from . import _decode_frag as _frag

#: The low 4 bytes of the prmt tables (codes 0..3) of e2m1 * 2^120 in bf16: high bytes 00 7B 7B 7B, low bytes
#: 00 00 80 C0; the upper halves (codes 4..7) 7C 7C 7C 7C / 00 40 80 C0 are immediates of the decode.
TABLE_HI, TABLE_LO = 0x7B7B7B00, 0xC0800000 - 2 ** 32
TABLE_HI_UPPER = 0x7C7C7C7C


def _tile_ptx(h: int, w: str, s: str, th: str, tl: str, outs: list[str]) -> str:
    """K tile h of the element: word `w` -> the 4 scaled bf16x2 A registers `outs` (rows g, g+8, g, g+8)."""
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
    prmt.b32 sa, {s}, 0, 0x{0x4040 + 0x202 * h:04X};
    prmt.b32 sb, {s}, 0, 0x{0x4141 + 0x202 * h:04X};
    shl.b32 sa, sa, 4;
    shl.b32 sb, sb, 4;
    prmt.b32 a, ll, hl, 0x5140;
    mul.rn.bf16x2 {outs[0]}, a, sa;
    prmt.b32 a, ll, hl, 0x7362;
    mul.rn.bf16x2 {outs[1]}, a, sb;
    prmt.b32 a, lh, hh, 0x5140;
    mul.rn.bf16x2 {outs[2]}, a, sa;
    prmt.b32 a, lh, hh, 0x7362;
    mul.rn.bf16x2 {outs[3]}, a, sb;
"""


def _decode_asm() -> tuple[str, str]:
    """PTX and constraints of one element (two K tiles: an int64 word pair, an int32 pair of scale pairs, the two
    table words): the 8 scaled A-fragment registers, tile 0's first."""
    body = (".reg .b32 th1, tl1, sm, sel, selh, hl, ll, hh, lh, sg, sa, sb, a, w0, w1;\n"
            f"mov.b32 th1, 0x{TABLE_HI_UPPER:08X}; mov.b32 tl1, 0xC0804000; mov.b32 sm, 0x80808080;\n"
            "mov.b64 {w0, w1}, $8;\n")
    for h in range(2):
        body += _tile_ptx(h, f"w{h}", "$9", "$10", "$11", [f"${4 * h + i}" for i in range(4)])
    return "{" + body + "}", ",".join(["=r"] * 8 + ["l", "r", "r", "r"])


_MMA_ASM = ("{ .reg .b32 xb0, xb1; mov.b64 {xb0, xb1}, $12;\n"
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {$0, $1, $2, $3}, {$8, $9, $10, $11}, "
            "{xb0, xb1}, {$4, $5, $6, $7}; }")
_DECODE, _DECODE_CONSTRAINTS = (gl.constexpr(v) for v in _decode_asm())
_MMA, _MMA_CONSTRAINTS = gl.constexpr(_MMA_ASM), gl.constexpr(",".join(["=r"] * 4 + ["r"] * 8 + ["l"]))

_TABLES: dict = {}


def lane_tables(device: torch.device) -> torch.Tensor:
    """The int32 [32, 2] (TABLE_HI, TABLE_LO) per lane on `device` (read from memory: see `_decode_frag`)."""
    hit = _TABLES.get(device)
    if hit is None:
        hit = _TABLES[device] = torch.tensor([[TABLE_HI, TABLE_LO]] * 32, dtype=torch.int32, device=device)
    return hit


@gluon.jit
def _mma_tile(d0, d1, d2, d3, a0, a1, a2, a3, xv):
    """d += A (16 rows x 16 k, bf16x2 registers a0..a3 of [BT, 32]) x x^T (8 rows per block, xv [32, NB])."""
    xb = gl.broadcast(gl.expand_dims(xv, 0), d0)[0]
    a0 = gl.broadcast(gl.expand_dims(a0, 2), d0)[0]
    a1 = gl.broadcast(gl.expand_dims(a1, 2), d0)[0]
    a2 = gl.broadcast(gl.expand_dims(a2, 2), d0)[0]
    a3 = gl.broadcast(gl.expand_dims(a3, 2), d0)[0]
    return gl.inline_asm_elementwise(_MMA, _MMA_CONSTRAINTS, [d0, d1, d2, d3, a0, a1, a2, a3, xb],
                                     dtype=(gl.float32,) * 4, is_pure=True, pack=1)


@gluon.jit
def _step(d0, d1, d2, d3, w, s, th, tl, xp):
    """One element per tile (two K tiles): decode, then one MMA per activation block and tile."""
    a0, a1, a2, a3, a4, a5, a6, a7 = gl.inline_asm_elementwise(
        _DECODE, _DECODE_CONSTRAINTS, [w, s, th, tl], dtype=(gl.int32,) * 8, is_pure=True, pack=1)
    x0 = gl.load(xp)
    x1 = gl.load(xp + 4)
    d0, d1, d2, d3 = _mma_tile(d0, d1, d2, d3, a0, a1, a2, a3, x0)
    d0, d1, d2, d3 = _mma_tile(d0, d1, d2, d3, a4, a5, a6, a7, x1)
    return d0, d1, d2, d3


@gluon.jit
def nvfp4_frag_wide_kernel(x_ptr, w_ptr, s_ptr, out_ptr, alpha_ptr, bias_ptr, table_ptr, M, N, K, stride_xm,
                           stride_om, split_k, TILES_PER_THREAD: gl.constexpr, CHUNKS_PER_STEP: gl.constexpr,
                           ACT_BLOCKS: gl.constexpr, ATOMIC: gl.constexpr, HAS_BIAS: gl.constexpr = False):
    """out[m, n] = alpha * sum_k x[m, k] * (e2m1 * s)[n, k], fp32 accumulation in mma.sync, M <= 8 * ACT_BLOCKS.

    A CTA owns TILES_PER_THREAD * num_warps row tiles of 16; tensors are [tiles, 32 lanes, ACT_BLOCKS] (an
    element is one MMA: a tile against 8 activation rows) or their [tiles, 32] slice (an element is two K tiles
    of one lane: an int64 word pair). Arguments as `_decode_frag.nvfp4_frag_kernel` (x as int64 [M, K/4],
    the repacked words as int64 and scale pairs as int32, split_k K slices with ATOMIC fp32 atomics)."""
    W: gl.constexpr = gl.num_warps()
    BT: gl.constexpr = TILES_PER_THREAD * W
    L3: gl.constexpr = gl.BlockedLayout([TILES_PER_THREAD, 1, ACT_BLOCKS], [1, 32, 1], [W, 1, 1], [2, 1, 0])
    LD: gl.constexpr = gl.SliceLayout(2, L3)   # [tiles, lanes]: the decoded registers
    LX: gl.constexpr = gl.SliceLayout(0, L3)   # [lanes, blocks]: x, shared by a thread's tiles
    LW: gl.constexpr = gl.BlockedLayout([TILES_PER_THREAD, 1, 2], [1, 32, 1], [W, 1, 1], [2, 1, 0])
    L2W: gl.constexpr = gl.SliceLayout(2, LW)
    pid_n = gl.program_id(0)
    pid_k = gl.program_id(1)
    chunks = K // 64
    span = chunks // split_k
    c_lo = pid_k * span
    tile = pid_n * BT + gl.arange(0, BT, layout=gl.SliceLayout(1, L2W))
    lane = gl.arange(0, 32, layout=gl.SliceLayout(0, L2W))
    v = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(1, LW)))
    tile3 = gl.expand_dims(gl.expand_dims(tile.to(gl.int64) * chunks + c_lo, 1), 2)
    lane3 = gl.expand_dims(gl.expand_dims(lane, 0), 2)
    v3 = gl.expand_dims(gl.expand_dims(v, 0), 1)
    wp = w_ptr + (tile3 * 64 + lane3 * 2 + v3)
    sp = s_ptr + (tile3 * 16 + (lane3 // 4) * 2 + v3)
    lane_x = gl.arange(0, 32, layout=gl.SliceLayout(1, LX))
    blk = gl.arange(0, ACT_BLOCKS, layout=gl.SliceLayout(0, LX))
    # activation row of lane g in each block; rows past M read row M - 1 (their outputs are not stored): no masks
    xrow = gl.minimum(gl.expand_dims(blk * 8, 0) + gl.expand_dims(lane_x // 4, 1), M - 1)
    xp = x_ptr + (xrow * stride_xm + gl.expand_dims(lane_x % 4, 1) + c_lo * 16)
    lane_d = gl.expand_dims(gl.arange(0, 32, layout=gl.SliceLayout(0, LD)), 0) + gl.zeros([BT, 32], gl.int32, LD)
    th = gl.load(table_ptr + 2 * lane_d)
    tl = gl.load(table_ptr + 2 * lane_d + 1)
    d0 = gl.zeros([BT, 32, ACT_BLOCKS], gl.float32, L3)
    d1, d2, d3 = d0, d0, d0
    for _ in range(0, span, CHUNKS_PER_STEP):
        for j in gl.static_range(CHUNKS_PER_STEP):
            w0, w1 = gl.split(gl.load(wp + j * 64))
            s0, s1 = gl.split(gl.load(sp + j * 16))
            w0 = gl.convert_layout(w0, LD)  # the same registers: split's layout and LD map [tiles, lanes] alike
            w1 = gl.convert_layout(w1, LD)
            s0 = gl.convert_layout(s0, LD)
            s1 = gl.convert_layout(s1, LD)
            d0, d1, d2, d3 = _step(d0, d1, d2, d3, w0, s0, th, tl, xp + j * 16)
            d0, d1, d2, d3 = _step(d0, d1, d2, d3, w1, s1, th, tl, xp + (j * 16 + 8))
        wp += CHUNKS_PER_STEP * 64
        sp += CHUNKS_PER_STEP * 16
        xp += CHUNKS_PER_STEP * 16
    alpha = gl.load(alpha_ptr)
    # d0..d3: weight rows g, g, g+8, g+8 of each tile x activation rows 2t, 2t+1, 2t, 2t+1 of each block
    rt = gl.arange(0, BT, layout=gl.SliceLayout(1, gl.SliceLayout(2, L3)))
    rl = gl.arange(0, 32, layout=gl.SliceLayout(0, gl.SliceLayout(2, L3)))
    rb = gl.arange(0, ACT_BLOCKS, layout=gl.SliceLayout(0, gl.SliceLayout(1, L3)))
    row = gl.expand_dims(gl.expand_dims((pid_n * BT + rt) * 16, 1) + gl.expand_dims(rl // 4, 0), 2)
    act = gl.expand_dims(gl.expand_dims(2 * (rl % 4), 0), 2) + gl.expand_dims(gl.expand_dims(rb * 8, 0), 1)
    _store(out_ptr, bias_ptr, d0, alpha, row, act, M, stride_om, pid_k, HAS_BIAS, ATOMIC)
    _store(out_ptr, bias_ptr, d1, alpha, row, act + 1, M, stride_om, pid_k, HAS_BIAS, ATOMIC)
    _store(out_ptr, bias_ptr, d2, alpha, row + 8, act, M, stride_om, pid_k, HAS_BIAS, ATOMIC)
    _store(out_ptr, bias_ptr, d3, alpha, row + 8, act + 1, M, stride_om, pid_k, HAS_BIAS, ATOMIC)


@gluon.jit
def _store(out_ptr, bias_ptr, acc, alpha, row, act, M, stride_om, pid_k, HAS_BIAS: gl.constexpr,
           ATOMIC: gl.constexpr):
    """out[act, row] = acc * alpha (+ bias[row] from K slice 0), activation rows past M masked."""
    res = acc * alpha
    if HAS_BIAS:
        if pid_k == 0:  # split-K: one K slice adds the bias
            res = res + gl.load(bias_ptr + row + act * 0).to(gl.float32)
    mask = act < M
    ptrs = out_ptr + (act * stride_om + row)
    if not ATOMIC:
        gl.store(ptrs, res.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        gl.atomic_add(ptrs, res, mask=mask, sem="relaxed")


# ---------------------------------------------------------------------------------------------- host side
#: Largest M the wide kernel takes (16 activation blocks of 8).
WIDE_MAX_M = 128

#: (TILES_PER_THREAD, CHUNKS_PER_STEP, num_warps, SPLIT_K) the tuner tries (split lowered where K is short).
_WIDE_SHAPES = ((1, 2, 4, 8), (2, 2, 4, 4), (1, 2, 8, 4), (2, 1, 4, 8), (1, 1, 8, 8))


def act_blocks(m: int) -> int:
    """Activation blocks of 8 rows for M (a power of two, 1 .. 16)."""
    b = 1
    while 8 * b < m:
        b *= 2
    return b


def wide_candidate(m: int, n: int, k: int, tiles: int, chunks_per_step: int, warps: int,
                   split: int) -> "dict | None":
    """A wide config of that shape that tiles (N, K) (the split halved until it divides K's chunks), or None."""
    if m > WIDE_MAX_M:
        return None
    cfg = _frag.frag_candidate(1, n, k, tiles, chunks_per_step, warps, split)
    return None if cfg is None else dict(cfg, path="fragw")


def wide_candidates(m: int, n: int, k: int, shapes=_WIDE_SHAPES) -> list[dict]:
    """The wide configs the decode tuner times for this shape (none above WIDE_MAX_M)."""
    cands = []
    for shape in shapes:
        cfg = wide_candidate(m, n, k, *shape)
        if cfg is not None and cfg not in cands:
            cands.append(cfg)
    return cands


def wide_args(x64: torch.Tensor, fw, out: torch.Tensor, alpha: torch.Tensor, bias: torch.Tensor, split: int,
              device: torch.device) -> tuple:
    """The kernel's positional arguments (the order of `nvfp4_frag_wide_kernel`)."""
    n, k = fw.shape
    return (x64, fw.words64, fw.scales32, out, alpha, bias, lane_tables(device),
            x64.shape[0], n, k, x64.stride(0), out.stride(0), split)


def wide_kwargs(cfg: dict, m: int, has_bias: bool) -> dict:
    """The kernel's constexpr / launch keywords for `cfg`."""
    return {"TILES_PER_THREAD": cfg["TILES_PER_THREAD"], "CHUNKS_PER_STEP": cfg["CHUNKS_PER_STEP"],
            "ACT_BLOCKS": act_blocks(m), "ATOMIC": cfg["SPLIT_K"] > 1, "HAS_BIAS": has_bias,
            "num_warps": cfg["num_warps"]}
