"""Device code shared by the two shared-memory decode GEMMs (`dq_wgmma`, `dq_wgmma_ws`): the table decode of a
ring slot's weight words into a bf16 tile, the grouped tile order and the epilogue.

The decode is the frag path's table decode (`_decode_frag`: the masked word is a `prmt` selector of the byte tables
of e2m1 * 2^120 in bf16, the signs sit in the selectors' mode bits), times the scale byte << 4 read as bf16
(= scale * 2^-120, `mul.rn.bf16x2`): exact, about 19 instructions per word of 8 weights.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.runtime.jit import constexpr_function

from . import _decode_frag_wide as _wide


def _decode_ptx() -> tuple[str, str]:
    """PTX of one word (8 codes of one row, k0 .. k0 + 7), its row's 4 scale bytes of the K step, the byte
    selector of its scale and the low table words ($7, $8: registers loaded once, see `_decode_frag`): the 4
    scaled bf16x2 registers (k0, k0 + 1), .., (k0 + 6, k0 + 7)."""
    body = (".reg .b32 th1, tl1, sm, sel, selh, hl, ll, hh, lh, sg, sp, a;\n"
            f"mov.b32 th1, 0x{_wide.TABLE_HI_UPPER:08X}; mov.b32 tl1, 0xC0804000; mov.b32 sm, 0x80808080;\n"
            "prmt.b32 sp, $5, 0, $6;\n"          # the scale byte into both halves' low bytes
            "shl.b32 sp, sp, 4;\n"               # ... << 4: bf16 scale * 2^-120 in both halves
            "and.b32 sel, $4, 0x77777777;\n"
            "shr.u32 selh, sel, 16;\n"
            "prmt.b32 hl, $7, th1, sel;\n"
            "prmt.b32 ll, $8, tl1, sel;\n"
            "prmt.b32 hh, $7, th1, selh;\n"
            "prmt.b32 lh, $8, tl1, selh;\n"
            "lop3.b32 hl, hl, $4, sm, 0xF8;\n"
            "shl.b32 sg, $4, 4;\n"
            "lop3.b32 hh, hh, sg, sm, 0xF8;\n"
            "prmt.b32 a, ll, hl, 0x5140; mul.rn.bf16x2 $0, a, sp;\n"
            "prmt.b32 a, ll, hl, 0x7362; mul.rn.bf16x2 $1, a, sp;\n"
            "prmt.b32 a, lh, hh, 0x5140; mul.rn.bf16x2 $2, a, sp;\n"
            "prmt.b32 a, lh, hh, 0x7362; mul.rn.bf16x2 $3, a, sp;\n")
    return "{" + body + "}", ",".join(["=r"] * 4 + ["r"] * 5)


_DECODE, _DECODE_CONSTRAINTS = (gl.constexpr(v) for v in _decode_ptx())


@gluon.jit
def decode_tile(w, ss, sel, th, tl, OUT: gl.constexpr):
    """Words w int32 [BN, BK/8], their rows' scale words ss, byte selectors sel and the table words th, tl
    (same shape) -> the bf16 [BN, BK] tile (as int32 pairs [BN, BK/2]) in OUT."""
    BN: gl.constexpr = w.shape[0]
    BK8: gl.constexpr = w.shape[1]
    o0, o1, o2, o3 = gl.inline_asm_elementwise(_DECODE, _DECODE_CONSTRAINTS, [w, ss, sel, th, tl],
                                               dtype=(gl.int32,) * 4,
                                               is_pure=True, pack=1)
    v = gl.join(gl.join(o0, o1), gl.join(o2, o3))           # [BN, BK/8, b, a]: pair 2a + b
    v = gl.permute(v, [0, 1, 3, 2])
    v = gl.reshape(v, [BN, BK8 * 4])                          # int32 pairs, k = 8j + 2p
    v = gl.convert_layout(v, OUT)
    return v


@constexpr_function
def word_layout(bk8, warps):
    """A thread's 4 consecutive words of one row (32 K elements, 2 scale blocks), over `warps` warps."""
    return gl.BlockedLayout([1, 4], [32 // (bk8 // 4), bk8 // 4], [warps, 1], [1, 0])


@constexpr_function
def pair_layout(bk8, warps):
    """The decoded 16 int32 pairs of a `word_layout` thread's words."""
    return gl.BlockedLayout([1, 16], [32 // (bk8 // 4), bk8 // 4], [warps, 1], [1, 0])


@gluon.jit
def decode_tables(table_ptr, BLOCK_N: gl.constexpr, BK8: gl.constexpr, WL: gl.constexpr):
    """(sel, th, tl) [BLOCK_N, BK8] in WL: word j's scale byte selector (block j // 2 of the step: prmt source
    byte j // 2 into bytes 0 and 2) and the lane's table words (`_decode_frag_wide.lane_tables` at table_ptr)."""
    rw = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, WL))
    cw = gl.arange(0, BK8, layout=gl.SliceLayout(0, WL))
    sel = gl.expand_dims(0x4040 + (cw // 2) * 0x0101, 0) + gl.zeros([BLOCK_N, BK8], gl.int32, WL)
    lane = gl.expand_dims((rw % 16) * 2, 1) + gl.expand_dims((cw // 4) % 2, 0)
    return sel, gl.load(table_ptr + 2 * lane), gl.load(table_ptr + 2 * lane + 1)


@gluon.jit
def decode_slot(w_smem, s_smem, slot, sel, th, tl, WL: gl.constexpr, BL: gl.constexpr):
    """The bf16 tile (int32 pairs in BL) of ring slot `slot` (landed: its mbarrier was waited on)."""
    w = w_smem.index(slot).load(WL)
    ss = s_smem.index(slot).permute((1, 0)).load(WL)                 # [BN, 1]: the row's scale word
    ss = gl.broadcast(ss, w)[0]
    return decode_tile(w, ss, sel, th, tl, BL)


@gluon.jit
def grouped(tile, tiles_m, tiles_n, GROUP_M: gl.constexpr):
    """(pid_m, pid_n) of a linear tile id: GROUP_M activation tiles go down each weight tile column together, so
    a wave's activation rows and weight rows both stay in L2."""
    group = tile // (GROUP_M * tiles_n)
    first = group * GROUP_M
    rows = gl.minimum(tiles_m - first, GROUP_M)
    return first + (tile % (GROUP_M * tiles_n)) % rows, (tile % (GROUP_M * tiles_n)) // rows


@gluon.jit
def store_out(acc, out_ptr, alpha_ptr, bias_ptr, M, stride_om, off_m, off_n, HAS_BIAS: gl.constexpr):
    """out[off_m:, off_n:] = alpha * acc (+ bias), rows past M masked; acc [BLOCK_M, BLOCK_N] fp32."""
    BLOCK_M: gl.constexpr = acc.shape[0]
    BLOCK_N: gl.constexpr = acc.shape[1]
    LAYOUT: gl.constexpr = acc.type.layout
    rm = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, LAYOUT))
    rn = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, LAYOUT))
    res = acc * gl.load(alpha_ptr)
    if HAS_BIAS:
        res = res + gl.expand_dims(gl.load(bias_ptr + rn).to(gl.float32), 0)
    ptrs = out_ptr + (gl.expand_dims(rm.to(gl.int64) * stride_om, 1) + gl.expand_dims(rn, 0))
    mask = gl.expand_dims(rm < M, 1) & gl.expand_dims(rn >= 0, 0)
    gl.store(ptrs, res.to(out_ptr.dtype.element_ty), mask=mask)
