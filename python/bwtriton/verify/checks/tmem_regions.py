"""The TMEM region (lanes x columns, `bwtriton.tmem.region`) a tcgen05 instruction touches, for the rules that
compare TMEM accesses (P9 overwrite of a pending load, P11 accumulator reads, P13 hand-offs).

An address is `alloc base + lane << 16 + column`. The lane may vary per warp (Triton adds `(w % 4) * 32 << 16`
to an epilogue load): the region then holds every warp's lanes, since one instruction runs in every warp.
When the lane cannot be bounded, the region spans all lanes, so a comparison falls back to columns alone."""
from __future__ import annotations

from typing import Optional

from bwtriton.ptx.descriptors import d_tile_columns
from bwtriton.ptx.ir import Instruction, Operand
from bwtriton.targets import TMEM_COLUMNS
from bwtriton.tmem.region import ALL_LANES, TmemRegion, access_lanes, d_tile_lanes

from .context import LD_SHAPE_COLS, Ctx, cta_group_of, decode_mma, exact_operand, ld_shape_num

#: tcgen05.cp shape -> (lanes from the address's lane, 32-bit columns); the multicast shapes fill every quarter
_CP_SHAPES = {"128x256b": (128, 8), "4x256b": (4, 8), "128x128b": (128, 4), "64x128b": (128, 4),
              "32x128b": (128, 4)}


def tmem_location(ctx: Ctx, op: Operand) -> Optional[tuple[str, Optional[list[int]], int]]:
    """(allocation symbol, the possible first lanes or None when unbounded, column) of a TMEM address operand
    that is alloc base + offset with a known column; None when it is not."""
    v = ctx.resolver.address(op) if op.kind == "addr" else ctx.resolver.operand(op)
    if v is None or v.base is None or not v.base.startswith("tmem@") or v.lo < 0:
        return None
    if v.lo == v.hi:
        return v.base, [(v.lo >> 16) & 0xFFFF], v.lo & 0xFFFF
    if v.stride <= 0 or v.stride % (1 << 16):
        return None   # lane and column vary together
    steps = (v.hi - v.lo) // v.stride
    lanes = None if steps > 128 else sorted({((v.lo + k * v.stride) >> 16) & 0xFFFF for k in range(steps + 1)})
    return v.base, lanes, v.lo & 0xFFFF


def _tmem_operand(ins: Instruction) -> Optional[Operand]:
    if ins.opcode in ("tcgen05.mma", "tcgen05.cp", "tcgen05.dealloc", "tcgen05.shift"):
        return ins.operands[0] if ins.operands else None
    return next((o for o in ins.operands if o.kind == "addr"), None)


def ld_st_extent(ctx: Ctx, ins: Instruction) -> Optional[tuple[int, int]]:
    """(lanes, columns) one warp's tcgen05.ld/st spans from its address: the shape's 32 or 16 lanes; its columns,
    twice the registers' under .pack::16b/.unpack::16b, and for .16x32bx2 up to the second half, which sits
    immHalfSplitoff columns further (None when that offset is not a constant)."""
    shape, num = ld_shape_num(ins)
    if shape is None or num is None:
        return None
    lanes_per, cols_per = LD_SHAPE_COLS[shape]
    width = cols_per * num * (2 if ins.has("pack::16b") or ins.has("unpack::16b") else 1)
    if shape == "16x32bx2":
        off = exact_operand(ctx, ins, 2 if ins.opcode == "tcgen05.ld" else 1)   # ld: operand 2; st: operand 1
        if off is None:
            return None
        width += off
    return lanes_per, width


def _ld_st_region(ctx: Ctx, ins: Instruction, lanes: Optional[list[int]], col: int) -> Optional[TmemRegion]:
    ext = ld_st_extent(ctx, ins)
    if ext is None:
        shape, num = ld_shape_num(ins)
        if shape is None or num is None:
            return None
        ext = (LD_SHAPE_COLS[shape][0], TMEM_COLUMNS - col)   # an unknown half-split offset: any later column
    return TmemRegion(access_lanes(lanes, ext[0]), col, col + ext[1])


def tmem_region(ctx: Ctx, ins: Instruction) -> Optional[tuple[str, TmemRegion]]:
    """(allocation symbol, lanes x columns) that a tcgen05 ld/st/mma/cp/dealloc touches; None when the address
    is not alloc base + a known column, or the extent is unknown (an undecodable MMA descriptor)."""
    op = _tmem_operand(ins)
    loc = tmem_location(ctx, op) if op is not None else None
    if loc is None:
        return None
    sym, lanes, col = loc
    if ins.opcode == "tcgen05.dealloc":
        return sym, TmemRegion(ALL_LANES, 0, TMEM_COLUMNS)   # the whole allocation
    if ins.opcode in ("tcgen05.ld", "tcgen05.st"):
        r = _ld_st_region(ctx, ins, lanes, col)
        return None if r is None else (sym, r)
    if ins.opcode == "tcgen05.mma":
        dd = decode_mma(ctx, ins)
        if dd is None or not dd.m or not dd.n:
            return None
        cg, ws = cta_group_of(ins) or 1, ins.has("ws")
        mask = d_tile_lanes(dd.m, cg, ws, lanes[0]) if lanes is not None and len(lanes) == 1 else ALL_LANES
        return sym, TmemRegion(mask, col, col + d_tile_columns(dd.m, dd.n, cg, ws))
    if ins.opcode == "tcgen05.cp":
        shape = next((m for m in ins.modifiers if m in _CP_SHAPES), None)
        if shape is None:
            return None
        nl, nc = _CP_SHAPES[shape]
        return sym, TmemRegion(access_lanes(lanes, nl) if nl < 128 else ALL_LANES, col, col + nc)
    return None


def same_region_overlap(a: Optional[tuple[str, TmemRegion]], b: Optional[tuple[str, TmemRegion]]) -> Optional[bool]:
    """True/False when both regions are known (different allocations never overlap), None when either is not."""
    if a is None or b is None:
        return None
    return a[0] == b[0] and a[1].overlaps(b[1])


__all__ = ["tmem_location", "tmem_region", "same_region_overlap", "ld_st_extent"]
