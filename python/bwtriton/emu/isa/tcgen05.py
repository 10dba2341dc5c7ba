"""The tcgen05 family: TMEM alloc/dealloc/relinquish, ld/st (every shape, lane-quarter rule), mma (every kind,
block-scaled, both cta_groups), commit (multicast), cp (smem -> TMEM), wait, fence.

mma / cp / commit are asynchronous (asyncops.py): an MMA or cp reads its shared-memory operands and computes at
issue (after checking that no pending write owns them and no unfenced generic write precedes them), but stays
pending -- its TMEM columns unreadable, its shared-memory operands reserved -- until the tcgen05.commit tracking it
completes, which is when a thread waits on the commit's mbarrier. The commit carries the sequence number of the
newest op it covers; waiters record it, and tcgen05.ld refuses TMEM cells whose newest writer they did not
observe. tcgen05.ld is asynchronous towards TMEM until tcgen05.wait::ld: a TMEM write or dealloc over cells a
pending load reads is an error (register reads of its results before the wait are not: P9), and a tcgen05.ld of
cells another warp's tcgen05.st wrote needs that store completed (tcgen05.wait::st) and observed (a barrier):
one check per order of the same cross-warp race, so the schedule cannot hide it. All of this is
tracked per (lane, column) cell, not per column: Triton packs two M=64 accumulators into the same columns at
lane offsets 0 and 16, and an MMA into one never races a load of the other."""
from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from ...ptx.descriptors import BLOCK_SCALED, InstrDesc, decode_idesc, spelled_scale_vec
from ...ptx.ir import Instruction
from . import operands as opnd
from ..machine.async_engine import AsyncOp, clock_of, engine_of, issuer_of, short
from ..errors import (DescriptorError, EmulationError, LaneQuarterError, TmemAllocError, TmemRaceError,
                     UnsupportedInstructionError, UnwaitedTmemLoadError)
from ...targets import TMEM_ALLOC_COLUMNS
from ..machine.memory import TMEM_COLS, TMEM_LANES, split_cluster_address
from ..machine.program import Program, active_index, address_reader, as_lanes
from ...tmem.region import TmemRegion

U32 = np.dtype(np.uint32)
U64 = np.dtype(np.uint64)


@functools.lru_cache(maxsize=1024)
def idesc_of(value: int, kind: str) -> InstrDesc:
    return decode_idesc(value, kind)


def _cta_group(ins: Instruction) -> int:
    v = ins.modifier_value("cta_group")
    return int(v) if v else 1


def _uniform(w, arr, what: str) -> int:
    a = as_lanes(np.asarray(arr), w.lanes)[active_index(w)]
    if (a != a[0]).any():
        raise EmulationError(f"{what} differs between the lanes of the warp (must be warp-uniform)",
                             where=w.where())
    return int(a[0])


def _require_whole_warp(w, what: str) -> None:
    """`.sync.aligned` instructions (tcgen05.ld/st) must be executed by every live lane of the warp together."""
    if w.mask is not None and not (w.mask == w.live).all():
        raise EmulationError(f"{what} is .sync.aligned: every lane of the warp must execute it", where=w.where())


# --- allocation -------------------------------------------------------------------------------------------
def _alloc(ins: Instruction, prog: Program) -> Callable:
    rd_dst = address_reader(ins.operands[0], prog, ins)
    rd_n = prog.src(ins.operands[1], U32, ins)

    def alloc(w):
        ncols = _uniform(w, rd_n(w), "tcgen05.alloc nCols")
        dst = _uniform(w, rd_dst(w), "tcgen05.alloc destination")
        tm = w.cta.tmem
        if ncols not in TMEM_ALLOC_COLUMNS:
            raise TmemAllocError(f"tcgen05.alloc of {ncols} columns: nCols must be a power of 2 in [32, 512]")
        if tm.relinquished:
            raise TmemAllocError("tcgen05.alloc after tcgen05.relinquish_alloc_permit in this CTA")
        col = tm.allocate(ncols)
        if col is None:
            # A real GPU would block until another CTA frees columns; one CTA per SM here, so it never would.
            raise TmemAllocError(f"tcgen05.alloc of {ncols} columns: only "
                                 f"{TMEM_COLS - sum(n for n, _ in tm.allocations.values())} free "
                                 "(missing tcgen05.dealloc?)")
        tm.allocations[col] = (ncols, ins.line)
        w.cta.smem.write_u32(dst, col)
        w.launch.progress += 1
    return alloc


def _dealloc(ins: Instruction, prog: Program) -> Callable:
    rd_t = prog.src(ins.operands[0], U32, ins)
    rd_n = prog.src(ins.operands[1], U32, ins)

    def dealloc(w):
        taddr = _uniform(w, rd_t(w), "tcgen05.dealloc taddr")
        ncols = _uniform(w, rd_n(w), "tcgen05.dealloc nCols")
        tm = w.cta.tmem
        col = taddr & 0xFFFF
        got = tm.allocations.get(col)
        if got is None or taddr >> 16:
            raise TmemAllocError(f"tcgen05.dealloc of 0x{taddr:x}: not the address of a live allocation "
                                 f"(live: {sorted(tm.allocations)})")
        if got[0] != ncols:
            raise TmemAllocError(f"tcgen05.dealloc of {ncols} columns at column {col}, allocated with {got[0]}")
        cells = (np.arange(TMEM_LANES)[:, None] * TMEM_COLS + np.arange(col, col + ncols)[None, :]).reshape(-1)
        if tm.inflight[cells].any():
            bad = int(cells[tm.inflight[cells] > 0][0])
            raise TmemRaceError(f"tcgen05.dealloc of columns {col}..{col + ncols - 1} while "
                                f"{_inflight_writer(w, tm, bad)} writing {_cell_text(bad)} is still in flight (wait "
                                "on its commit mbarrier first)", where=w.where())
        check_pending_ld(w, w.cta, cells, "tcgen05.dealloc", ins.line)
        del tm.allocations[col]
    return dealloc


def _relinquish(w):
    w.cta.tmem.relinquished = True


# --- ld / st ------------------------------------------------------------------------------------------------
_BASE_REGS = {"32x32b": 1, "16x64b": 1, "16x128b": 2, "16x256b": 4, "16x32bx2": 1}


@functools.lru_cache(maxsize=256)
def ld_st_map(shape: str, num: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lane offset [32, R], column offset [32, R], uses-second-half [32, R]) of every register (unpacked)."""
    t = np.arange(32)[:, None]
    base = _BASE_REGS[shape]
    regs = base * num
    j = np.arange(regs)[None, :]
    rep, jj = j // base, j % base
    half = np.zeros((32, regs), dtype=bool)
    if shape == "32x32b":
        lane, col = t + 0 * j, j + 0 * t
    elif shape == "16x64b":   # [U] reference §3c (from CUTLASS); not cross-checked against the PTX figure
        lane, col = 8 * (t % 2) + t // 4 + 0 * j, (t // 2) % 2 + 2 * rep
    elif shape == "16x128b":
        lane, col = t // 4 + 8 * jj, t % 4 + 4 * rep
    elif shape == "16x256b":
        lane, col = t // 4 + 8 * (jj // 2), 2 * (t % 4) + jj % 2 + 8 * rep
    elif shape == "16x32bx2":
        lane, col = t % 16 + 0 * j, j + 0 * t
        half = (t >= 16) + 0 * j > 0
    else:
        raise UnsupportedInstructionError(f"tcgen05 ld/st shape .{shape}")
    return lane.astype(np.int64), col.astype(np.int64), half


def _ldst_shape(ins: Instruction) -> tuple[str, int, bool]:
    shape = next((m for m in ins.modifiers if m in _BASE_REGS), None)
    num = next((int(m[1:]) for m in ins.modifiers if m[0] == "x" and m[1:].isdigit()), None)
    if shape is None or num is None:
        raise UnsupportedInstructionError("tcgen05.ld/st without a known .shape/.num", line=ins.line, text=ins.text)
    packed = "pack::16b" in ins.modifiers or "unpack::16b" in ins.modifiers
    return shape, num, packed


@functools.lru_cache(maxsize=1024)
def _cells(taddr: int, shape: str, num: int, packed: bool, half_off: int):
    """(lanes [32, R], columns [32, R], the distinct columns) a tcgen05.ld/st at `taddr` touches.

    `packed` (.pack::16b / .unpack::16b): the shape's thread mapping applies to 32-bit registers that each hold
    the 16-bit halves of two ADJACENT columns of one lane (2c low, 2c+1 high, with c the column the unpacked
    mapping gives), so the access spans twice the columns; the result lists those pairs as consecutive entries
    (R = 2 x registers). For 32x32b this equals pairing consecutive registers; for 16x64b/16x128b/16x256b it does
    not (their consecutive registers sit in other lanes or non-adjacent columns): Triton's 16x256b f16
    accumulator epilogue (upstream test_simple_matmul, TRITON_PREFER_TMEM_16x256_LAYOUT) reads the pairs."""
    lane_off, col_off, half = ld_st_map(shape, num)
    if packed:
        lane_off = np.repeat(lane_off, 2, axis=1)
        col_off = (2 * col_off[:, :, None] + np.arange(2)).reshape(32, -1)
        half = np.repeat(half, 2, axis=1)
    lanes = (taddr >> 16) + lane_off
    cols = (taddr & 0xFFFF) + col_off + np.where(half, half_off, 0)
    return lanes, cols, np.unique(cols)


@functools.lru_cache(maxsize=1024)
def _flat_cells(taddr: int, shape: str, num: int, packed: bool, half_off: int) -> np.ndarray:
    """The distinct TMEM cells (flat index lane * TMEM_COLS + column) of a tcgen05.ld/st at `taddr`."""
    lanes, cols, _ = _cells(taddr, shape, num, packed, half_off)
    return np.unique(lanes * TMEM_COLS + cols)


def _tmem_cells(w, taddr: int, shape: str, num: int, packed: bool, half_off: int, what: str):
    """(lanes [32, R], columns [32, R], distinct flat cells) of a tcgen05.ld/st of warp `w`, after the lane
    quarter, TMEM bounds and allocation checks."""
    lanes, cols, ucols = _cells(taddr, shape, num, packed, half_off)
    cells = _flat_cells(taddr, shape, num, packed, half_off)
    lane0 = taddr >> 16
    quarter = 32 * (w.wid % 4)
    lo, hi = int(lanes.min()), int(lanes.max())
    if lo < quarter or hi >= quarter + 32:
        raise LaneQuarterError(f"{what} at TMEM lane {lane0} touches lanes {lo}..{hi}, "
                               f"but warp {w.wid} may only access lanes {quarter}..{quarter + 31} "
                               f"(its warp_id % 4 = {w.wid % 4} quarter)", where=w.where())
    if int(ucols[-1]) >= TMEM_COLS or hi >= TMEM_LANES:
        raise EmulationError(f"{what} outside TMEM (column {int(ucols[-1])}, lane {hi})")
    if not any(c <= ucols[0] and ucols[-1] < c + n for c, (n, _) in w.cta.tmem.allocations.items()):
        owned = np.zeros(TMEM_COLS, dtype=bool)
        for c, (n, _) in w.cta.tmem.allocations.items():
            owned[c:c + n] = True
        if not owned[ucols].all():
            raise TmemAllocError(f"{what} touches TMEM columns that are not allocated", where=w.where())
    return lanes, cols, cells


def _cell_text(cell: int) -> str:
    """'TMEM column 5 (lane 16)' for a flat cell."""
    return f"TMEM column {cell % TMEM_COLS} (lane {cell // TMEM_COLS})"


def _cells_text(cells: np.ndarray) -> str:
    """'lanes 16-31, columns 0-63' for a set of flat cells (the lanes and the column span they cover)."""
    cells = np.asarray(cells)
    lanes, cols = np.unique(cells // TMEM_COLS).tolist(), cells % TMEM_COLS
    mask = sum(1 << int(x) for x in lanes)
    return str(TmemRegion(mask, int(cols.min()), int(cols.max()) + 1))


def _inflight_writer(w, tm, cell: int) -> str:
    """'the tcgen05.mma at PTX line N (`...`)': the queued MMA/cp that writes TMEM cell `cell` of `tm`."""
    for op in engine_of(w).pending.values():
        if any(t is tm and cell in np.asarray(c) for t, c in op.tmem):
            return op.describe()
    return "an MMA/cp"


def _ld(ins: Instruction, prog: Program) -> Callable:
    shape, num, packed = _ldst_shape(ins)
    ops = ins.operands
    dests = list(ops[0].items) if ops[0].kind == "vec" else [ops[0]]
    writers = [prog.dst(d, ins) for d in dests]
    line, text = ins.line, ins.text
    rd_t = address_reader(ops[1], prog, ins)
    rd_half = prog.src(ops[2], U32, ins) if len(ops) > 2 else None
    if "red" in ins.modifiers:
        raise UnsupportedInstructionError("tcgen05.ld.red (sm_101a/103f+)", line=ins.line, text=ins.text)

    def ld(w):
        _require_whole_warp(w, "tcgen05.ld")
        taddr = _uniform(w, rd_t(w), "tcgen05.ld address")
        half = _uniform(w, rd_half(w), "half-split offset") if rd_half else 0
        lanes, cols, cells = _tmem_cells(w, taddr, shape, num, packed, half, "tcgen05.ld")
        _check_observed(w, cells, line, text)
        vals = w.cta.tmem.data[lanes, cols]  # [32, regs]
        if packed:
            vals = (vals[:, 0::2] & 0xFFFF) | ((vals[:, 1::2] & 0xFFFF) << 16)
        for i, wr in enumerate(writers):
            wr(w, vals[:, i])
        _record_pending_ld(w, cells, line, text)
    return ld


def _record_pending_ld(w, cells: np.ndarray, line: int, text: str) -> None:
    """A tcgen05.ld of warp `w` read TMEM cells `cells` (flat lane * TMEM_COLS + column): it is the warp's ("ld",
    warp) event n, complete (towards TMEM) at the warp's next tcgen05.wait::ld. Per warp, TMEM keeps (lane
    quarter, the event number of the last load of each cell, that load's line and text, the warp's event source)."""
    key = ("ld", issuer_of(w))
    n = engine_of(w).next_event(key)
    pend = w.cta.tmem.pending_ld
    got = pend.get(w.wid)
    if got is None:
        got = [w.wid % 4, np.zeros(TMEM_LANES * TMEM_COLS, dtype=np.int64), line, text, key]
        pend[w.wid] = got
    got[1][cells] = n
    got[2], got[3] = line, text


def check_pending_ld(w, cta, cells: np.ndarray, writer: str, writer_line: int = 0) -> None:
    """Warp `w` makes `writer` write TMEM cells `cells` (flat lane * TMEM_COLS + column) of `cta`: every
    tcgen05.ld that read one of them must be complete (its warp executed tcgen05.wait::ld) and that completion
    observed by `w` (its own wait, or the loading warp's arrive / barrier that `w` waited on) -- the
    anti-dependency the wait exists for, however the warps happen to be scheduled. Loads of other lanes of the
    same columns (the other M=64 accumulator) are no hazard."""
    clock = clock_of(w)
    for wid, (q, last, line, text, key) in cta.tmem.pending_ld.items():
        seen = clock.get(key, 0)
        bad = last[cells] > seen
        if not bad.any():
            continue
        cell = int(np.asarray(cells)[bad][0])
        n = int(last[cell])
        reader = cta.warps[wid] if wid < len(cta.warps) else None
        if reader is None or not clock_of(reader).saw(key, n):
            why = ("that warp executed no tcgen05.wait::ld.sync.aligned after the load; insert it before the TMEM "
                   "is overwritten")
        else:
            why = (f"that warp waited (tcgen05.wait::ld), but warp {w.wid} never observed it: hand the TMEM back "
                   "through an mbarrier arrive after the wait (or a barrier) that the writing warp waits on")
        read = np.flatnonzero(last > seen)
        at = f" at PTX line {writer_line}" if writer_line else ""
        raise UnwaitedTmemLoadError(
            f"{writer} writes {_cell_text(cell)} that the tcgen05.ld at PTX line {line} (`{short(text)}`) of warp "
            f"{wid} may still be reading: {why} (the {writer}{at} writes {_cells_text(np.asarray(cells))}; the "
            f"load reads {_cells_text(read)})")


def _check_observed(w, c: np.ndarray, line: int, text: str) -> None:
    """tcgen05.ld (PTX line `line`) of the distinct cells `c`: no MMA/cp writing them in flight, their newest
    writer's completion observed by this warp (however the schedule completed it)."""
    tm = w.cta.tmem
    if tm.inflight[c].any():
        bad = int(c[tm.inflight[c] > 0][0])
        raise TmemRaceError(f"tcgen05.ld reads {_cell_text(bad)} while {_inflight_writer(w, tm, bad)} writing it "
                            f"is still in flight (the load at PTX line {line} reads {_cells_text(c)}): wait on the "
                            "mbarrier of its tcgen05.commit (then tcgen05.fence::after_thread_sync) before loading",
                            where=w.where())
    codes = tm.writer_seq[c]
    if not codes.any():
        return
    engine, clock = engine_of(w), clock_of(w)
    for code in np.unique(codes).tolist():
        if not code:
            continue
        key, idx = engine.writer_of(code)
        if key[0] == "st":
            _check_st_observed(w, key, idx, c[codes == code], line, text)
        elif not clock.saw(key, idx):
            bad = int(c[codes == code][0])
            raise TmemRaceError(f"tcgen05.ld reads {_cell_text(bad)} written by an asynchronous MMA/cp whose "
                                f"completion this warp never observed (the load at PTX line {line} reads "
                                f"{_cells_text(c)}; no wait on its tcgen05.commit mbarrier, directly or through a "
                                "barrier; another warp's wait does not order this load)",
                                where=w.where())


def _check_st_observed(w, key: tuple, idx: int, cells: np.ndarray, line: int, text: str) -> None:
    """Warp `w`'s tcgen05.ld (PTX line `line`) reads `cells`, last written by event `idx` of the tcgen05.st source
    `key` ("st", issuer, PTX line): another warp's store must be complete (its tcgen05.wait::st) and observed by
    `w` (a barrier or mbarrier handoff after that wait). Unordered, the schedule decides whether the load sees the
    store -- the same race as a store overwriting a pending load, met in the other order; a warp's own stores are
    ordered before its later loads."""
    if key[1] == issuer_of(w) or clock_of(w).saw(key, idx):
        return
    st_line, wid = key[2], key[1][2]
    st_text = w.cta.tmem.st_sites.get(st_line, "")
    raise TmemRaceError(
        f"tcgen05.st writes TMEM {_cells_text(cells)} (warp {wid}, PTX line {st_line}: `{short(st_text)}`) that the "
        f"tcgen05.ld at PTX line {line} (`{short(text)}`) of warp {w.wid} reads, with nothing ordering the two: "
        f"warp {w.wid} never observed the store's completion, so it may read the TMEM before or after it. Order "
        f"them with tcgen05.wait::st in warp {wid} and then a barrier (bar.sync) or an mbarrier handoff that warp "
        f"{w.wid} waits on -- before the load if it should see the store, before the store if not",
        where=w.where())


def _record_st(w, cells: np.ndarray, line: int, text: str) -> None:
    """Warp `w`'s tcgen05.st at PTX line `line` wrote `cells`: the newest writer of those cells is event n of the
    source ("st", warp, line), complete at the warp's next tcgen05.wait::st (the line in the source names the
    store in a later reader's error)."""
    engine, tm = engine_of(w), w.cta.tmem
    key = ("st", issuer_of(w), line)
    tm.st_sites.setdefault(line, text)
    tm.writer_seq[cells] = engine.writer_code(key, engine.next_event(key))
    engine.st_keys.setdefault(issuer_of(w), set()).add(key)


def _st(ins: Instruction, prog: Program) -> Callable:
    shape, num, packed = _ldst_shape(ins)
    ops = ins.operands
    rd_t = address_reader(ops[0], prog, ins)
    has_half = len(ops) > 2
    rd_half = prog.src(ops[1], U32, ins) if has_half else None
    srcs = list(ops[-1].items) if ops[-1].kind == "vec" else [ops[-1]]
    readers = [prog.src(s, U32, ins) for s in srcs]

    line, text = ins.line, ins.text

    def st(w):
        _require_whole_warp(w, "tcgen05.st")
        taddr = _uniform(w, rd_t(w), "tcgen05.st address")
        half = _uniform(w, rd_half(w), "half-split offset") if rd_half else 0
        lanes, cols, cells = _tmem_cells(w, taddr, shape, num, packed, half, "tcgen05.st")
        tm = w.cta.tmem
        if tm.inflight[cells].any():
            bad = int(cells[tm.inflight[cells] > 0][0])
            raise TmemRaceError(f"tcgen05.st writes TMEM columns an in-flight MMA/cp is writing: {_cell_text(bad)}, "
                                f"which {_inflight_writer(w, tm, bad)} writes (the store at PTX line {line} writes "
                                f"{_cells_text(cells)})", where=w.where())
        check_pending_ld(w, w.cta, cells, "tcgen05.st", line)
        vals = np.stack([as_lanes(np.asarray(r(w), np.uint32), w.lanes) for r in readers], axis=1)
        if packed:
            vals = np.stack([vals & 0xFFFF, vals >> 16], axis=2).reshape(32, -1)
        tm.data[lanes, cols] = vals
        _record_st(w, cells, line, text)
    return st


# --- asynchronous ops ------------------------------------------------------------------------------------
def _issue(w, ins_line: int, text: str, kind: str, writes: list, reads: list) -> AsyncOp:
    """Queue a tcgen05 MMA / cp already computed: pending until the tcgen05.commit tracking it completes."""
    op = AsyncOp(kind=kind, line=ins_line, text=text, issuer=issuer_of(w), tmem=writes, reads=reads,
                 tracked_by_commit=True,
                 observe="Issue tcgen05.commit after it and wait on the commit's mbarrier")
    return engine_of(w).issue(w, op)


def _commit(ins: Instruction, prog: Program) -> Callable:
    ops = ins.operands
    rd_bar = address_reader(ops[0], prog, ins)
    multicast = any(m.startswith("multicast") for m in ins.modifiers)
    rd_mask = prog.src(ops[1], np.dtype(np.uint16), ins) if multicast else None
    line, text = ins.line, ins.text

    def commit(w):
        addrs = rd_bar(w)
        for lane in active_index(w):  # single-thread semantics: every issuing lane commits
            rank, local = split_cluster_address(int(addrs[lane]), w.cta.rank)
            if multicast:
                mask = int(as_lanes(np.asarray(rd_mask(w)), w.lanes)[lane])
                targets = [(r, local) for r in range(len(w.cta.cluster.ctas)) if mask >> r & 1]
            else:
                targets = [(rank, local)]
            bars = []
            for r, loc in targets:
                bar = w.cta.cluster.ctas[r].mbarriers.get(loc)
                if bar is None:
                    raise EmulationError(f"tcgen05.commit arrives on an uninitialised mbarrier (CTA {r}, "
                                         f"0x{loc:x})", where=w.where())
                bars.append(bar)
            engine_of(w).issue(w, AsyncOp(kind="tcgen05.commit", line=line, text=text,
                                          issuer=issuer_of(w), arrive=bars))
    return commit


def _pair(w, cta_group: int) -> list:
    ctas = w.cta.cluster.ctas
    if cta_group == 1:
        return [w.cta]
    r = w.cta.rank & ~1
    if r + 1 >= len(ctas):
        raise EmulationError("cta_group::2 needs a cluster of (at least) 2 CTAs; launch with num_ctas=2",
                             where=w.where())
    return [ctas[r], ctas[r + 1]]


_SCALE_NSF = {("mxf8f6f4", "1X"): 1, ("mxf4", "2X"): 2, ("mxf4nvf4", "2X"): 2, ("mxf4nvf4", "4X"): 4}


def _scale_vec(ins: Instruction, kind: str) -> str:
    """The MMA's scale vector; the kind's default when the instruction spells none."""
    return spelled_scale_vec(ins.modifiers, kind) or ("1X" if kind == "mxf8f6f4" else "2X")


def _mma(ins: Instruction, prog: Program) -> Callable:  # noqa: C901
    kind = ins.modifier_value("kind")
    if kind is None:
        raise UnsupportedInstructionError("tcgen05.mma without .kind", line=ins.line, text=ins.text)
    if ins.opcode != "tcgen05.mma" or "ws" in ins.modifiers or ins.opcode.endswith(".sp"):
        raise UnsupportedInstructionError(f"`{ins.full_opcode}` (ws/sparse MMA) is not emulated", line=ins.line,
                                          text=ins.text)
    cta_group = _cta_group(ins)
    scaled = "block_scale" in ins.modifiers
    svec = _scale_vec(ins, kind) if scaled else None
    ops = list(ins.operands)
    rd_d = address_reader(ops[0], prog, ins)
    a_in_tmem = ops[1].kind == "addr"
    rd_a = address_reader(ops[1], prog, ins) if a_in_tmem else prog.src(ops[1], U64, ins)
    rd_b = prog.src(ops[2], U64, ins)
    rd_i = prog.src(ops[3], U32, ins)
    rest = ops[4:]
    rd_sa = rd_sb = None
    if scaled:
        rd_sa, rd_sb = address_reader(rest[0], prog, ins), address_reader(rest[1], prog, ins)
        rest = rest[2:]
    rest = [o for o in rest if o.kind != "vec"]  # disable-output-lane masks: not emulated (must be all 0)
    if any(o.kind == "vec" for o in ops[4:]):
        raise UnsupportedInstructionError("tcgen05.mma with disable-output-lane", line=ins.line, text=ins.text)
    rd_en = prog.src(rest[0], np.dtype(bool), ins) if rest else (lambda w: np.bool_(True))
    rd_scale_d = prog.src(rest[1], U32, ins) if len(rest) > 1 else None

    def mma(w):
        d_all, a_all, b_all, i_all = rd_d(w), rd_a(w), rd_b(w), rd_i(w)
        en_all = as_lanes(np.asarray(rd_en(w)), w.lanes)
        sa_all = rd_sa(w) if rd_sa else None
        sb_all = rd_sb(w) if rd_sb else None
        sd = int(np.asarray(rd_scale_d(w)).flat[0]) if rd_scale_d else 0
        for lane in active_index(w):  # single-thread issue: every active lane starts one MMA
            taddr_d = int(as_lanes(d_all, w.lanes)[lane])
            a = int(as_lanes(a_all, w.lanes)[lane])
            b = int(as_lanes(b_all, w.lanes)[lane])
            idesc = idesc_of(int(as_lanes(i_all, w.lanes)[lane]), kind)
            enable = bool(en_all[lane])
            sa = int(sa_all[lane]) if sa_all is not None else None
            sb = int(sb_all[lane]) if sb_all is not None else None
            _issue_mma(w, ins, kind, cta_group, svec, taddr_d, a, a_in_tmem, b, idesc, enable, sa, sb, sd)
    return mma


@functools.lru_cache(maxsize=256)
def _d_footprint(m: int, n: int, cta_group: int, lane_base: int) -> tuple:
    """Per CTA of the MMA: the distinct D columns relative to the D address."""
    return tuple(np.unique(cols) for _, _, cols in opnd.d_tmem_layout(m, n, cta_group, lane_base))


def _allocated(tmem, cols: np.ndarray) -> bool:
    """Whether TMEM columns `cols` (sorted) are allocated: one allocation holding them all, or each in one."""
    lo, hi = int(cols[0]), int(cols[-1])
    if any(c <= lo and hi < c + nc for c, (nc, _) in tmem.allocations.items()):
        return True
    owned = np.zeros(TMEM_COLS, dtype=bool)
    for c, (nc, _) in tmem.allocations.items():
        owned[c:c + nc] = True
    return bool(owned[cols].all())


def _d_cells(layout: tuple, col_d: int) -> tuple:
    """Per CTA of the MMA: flat indices (lane * TMEM_COLS + column) of its part of D, [rows, n], for a D layout
    (`operands.d_tmem_layout`'s cached tuple) at column col_d."""
    return opnd.memo(layout, col_d, lambda: tuple(lanes * TMEM_COLS + cols + col_d for _, lanes, cols in layout))


def _issue_mma(w, ins, kind, cta_group, svec, taddr_d, a, a_in_tmem, b, idesc: InstrDesc, enable, sa, sb, sd):
    line = ins.line
    m, n = idesc.m, idesc.n
    if idesc.sparse:
        raise UnsupportedInstructionError("sparse MMA (idesc bit 2)", line=line)
    if m is None or n is None or n == 0:
        raise DescriptorError(f"instruction descriptor 0x{idesc.value:08x}: M/N undecodable", line=line)
    ctas = _pair(w, cta_group)
    layout = opnd.d_tmem_layout(m, n, cta_group, taddr_d >> 16)
    col_d = taddr_d & 0xFFFF
    writes = []
    for cta, ucols, cells in zip(ctas, _d_footprint(m, n, cta_group, taddr_d >> 16), _d_cells(layout, col_d)):
        used = ucols + col_d
        if used[-1] >= TMEM_COLS:
            raise DescriptorError(f"MMA D tile (M={m}, N={n}) at column {col_d} runs past TMEM column 511", line=line)
        if not _allocated(cta.tmem, used):
            raise TmemAllocError(f"MMA D tile (M={m}, N={n}) at column {col_d} writes TMEM columns of CTA "
                                 f"{cta.rank} that are not allocated", line=line)
        flat = cells.reshape(-1)   # lanes x columns: an M=64 tile at lane +16 leaves the +0 lanes alone
        check_pending_ld(w, cta, flat, "tcgen05.mma", line)
        writes.append((cta.tmem, flat))
    reads = opnd.AsyncReads(w, ins)
    _execute_mma(ctas, line, kind, cta_group, svec, taddr_d, a, a_in_tmem, b, idesc, enable, sa, sb, sd, layout,
                 reads)
    _issue(w, line, ins.text, "tcgen05.mma", writes, reads.ranges)


def _operand_values(cta, desc_or_taddr: int, in_tmem: bool, rows: int, k: int, fmt: str, major: str,
                    packed_fp4: bool, reads: opnd.AsyncReads, cta_group_ctas: tuple = (None,)) -> np.ndarray:
    bits = opnd.ELEM_BITS[fmt]
    row_bytes = k * bits // 8 if (packed_fp4 or bits >= 8) else k  # 4/6-bit in f8f6f4: padded to 1 byte each
    if in_tmem:  # A from TMEM: K packed into consecutive 32-bit columns, rows laid out like D's rows
        lane0, col0 = desc_or_taddr >> 16, desc_or_taddr & 0xFFFF
        m = np.arange(rows)
        # M = 64 (cta_group::1): 16-row groups in the four 32-lane sub-partitions, as D (layout F); else row m
        # in lane m
        lanes = lane0 + (m % 16 + 32 * (m // 16) if rows == 64 and len(cta_group_ctas) == 1 else m)
        words = cta.tmem.data[lanes[:, None], col0 + np.arange(row_bytes // 4)[None, :]]
        raw = np.ascontiguousarray(words).view(np.uint8).reshape(rows, row_bytes)
    elif major == "K":
        raw = reads.gather(cta.smem, opnd.kmajor_addresses(desc_or_taddr, rows, row_bytes))
    elif fmt == "e2m1" and not packed_fp4:
        return _mn_major_padded_fp4(cta, desc_or_taddr, rows, k, reads)
    else:
        if bits < 8:
            raise DescriptorError(f"MN-major {fmt} operands are not emulated (only 8/16/32-bit types and fp4 in "
                                  "the padded f8f6f4 layout)")
        raw = reads.gather(cta.smem, opnd.mnmajor_addresses(desc_or_taddr, rows, k, bits // 8))
    return opnd.decode_rows(np.ascontiguousarray(raw), fmt, packed_fp4=packed_fp4)


def _mn_major_padded_fp4(cta, desc: int, mn: int, k: int, reads: opnd.AsyncReads) -> np.ndarray:
    """Values [mn, k] of an MN-major e2m1 operand of kind::f8f6f4 / mxf8f6f4 (fp4 packed along M/N, what Triton
    emits for `rhs_k_pack=False` and B200 runs): the padded layout puts 16 MN-consecutive values in the first 8
    bytes of each 16-byte cell, so the cells sit where an 8-bit MN-major operand's would (T = 16 per cell) and
    value x of a cell is nibble x % 2 (low first) of byte (x % 16) // 2."""
    byte8 = opnd.mnmajor_addresses(desc, mn, k, 1)  # [mn, k] as if 8-bit
    x = np.arange(mn)[:, None] % 16
    raw = reads.gather(cta.smem, byte8 - x + x // 2)
    codes = (raw >> (4 * (x % 2)).astype(np.uint8)) & 0xF
    return opnd.decode_fp4_codes(codes)


def _scales(cta, taddr: int, rows: int, nsf: int, sf_id: int, scale_type: str) -> np.ndarray:
    """Scale factors [rows, nsf] from TMEM (reference §6b): row r in lane r%32 (replicated per 32-lane
    sub-partition), column taddr.col + r//32, byte sf_id + j of the 32-bit word."""
    lane0, col0 = taddr >> 16, taddr & 0xFFFF
    r = np.arange(rows)
    words = cta.tmem.data[lane0 + r % 32, col0 + r // 32]  # [rows]
    codes = np.stack([(words >> np.uint32(8 * (sf_id + j))) & np.uint32(0xFF) for j in range(nsf)], axis=1)
    return opnd.decode_scales(codes, scale_type)


def _execute_mma(ctas, line, kind, cta_group, svec, taddr_d, a, a_in_tmem, b, idesc, enable, sa, sb, sd, layout,
                 reads: opnd.AsyncReads):
    m, n, k = idesc.m, idesc.n, idesc.k
    a_fmt, b_fmt = idesc.a_type, idesc.b_type
    if a_fmt is None or b_fmt is None or a_fmt.startswith("invalid") or b_fmt.startswith("invalid"):
        raise DescriptorError(f"instruction descriptor 0x{idesc.value:08x}: A/B types {a_fmt}/{b_fmt} are not legal "
                              f"for kind::{kind}", line=line)
    packed = kind in ("mxf4", "mxf4nvf4")
    nc = len(ctas)
    ma, nb = m // nc, n // nc
    a_parts, b_parts = [], []
    for cta in ctas:  # cta_group::2: CTA v supplies A rows [v*M/2, ...) and B rows (N) [v*N/2, ...)
        a_parts.append(_operand_values(cta, a, a_in_tmem, ma, k, a_fmt, idesc.a_major, packed, reads, ctas))
        b_parts.append(_operand_values(cta, b, False, nb, k, b_fmt, idesc.b_major, packed, reads))
    A = np.concatenate(a_parts, axis=0)
    B = np.concatenate(b_parts, axis=0)
    b_of_cta = [B]  # the B each CTA's half of D is computed with (one entry: the same B for all rows)
    if kind in BLOCK_SCALED:
        nsf = _SCALE_NSF.get((kind, svec))
        if nsf is None:
            raise DescriptorError(f"scale_vec::{svec} is not legal for kind::{kind}", line=line)
        if cta_group != 1 and m != 256:
            raise UnsupportedInstructionError(f"block-scaled MMA with cta_group::2 and M={m} (scale layout of the "
                                              f"§6b 2x2 case)", line=line)
        st = idesc.scale_type
        vec = k // nsf
        # cta_group::2, M = 256: CTA v's TMEM holds the scales of its own 128 A rows (SFA as for M = 128) and SFB
        # for all N columns, replicated in both CTAs (Gluon's 2-CTA block-scaled tutorial: TensorMemoryScalesLayout
        # cga_layout [[1, 0]] for A, [[0, 0]] for B); each CTA's half of D uses its own copies.
        sfa = np.concatenate([_scales(c, sa, m // nc, nsf, idesc.fields.get("sfa_id") or 0, st) for c in ctas])
        A = A * np.repeat(sfa, vec, axis=1)
        b_of_cta = [B * np.repeat(_scales(c, sb, n, nsf, idesc.fields.get("sfb_id") or 0, st), vec, axis=1)
                    for c in ctas]
    if idesc.fields.get("negate_a"):
        A = -A
    if idesc.fields.get("negate_b"):
        b_of_cta = [-x for x in b_of_cta]
    if kind == "i8":
        prod = A.astype(np.int64) @ b_of_cta[0].astype(np.int64).T
    else:
        # einsum, not `@`: for these skinny shapes (K = 16..64) BLAS's thread start-up costs ~10x the product on
        # a shared 2-core machine; float64 sums of the exact products are order-insensitive at f32 output
        rows = len(A) // len(b_of_cta)
        prod = np.concatenate([np.einsum("mk,nk->mn", A[v * rows:(v + 1) * rows], bv)
                               for v, bv in enumerate(b_of_cta)]) if len(b_of_cta) > 1 else \
            np.einsum("mk,nk->mn", A, b_of_cta[0])
    d_type = idesc.d_type
    for cta, (rows, _, _), cells in zip(ctas, layout, _d_cells(layout, taddr_d & 0xFFFF)):
        part = prod[rows[0]:rows[1]]
        tm = cta.tmem.data.reshape(-1)  # a view: D's cells by flat index
        if d_type == "s32":
            old = tm[cells].view(np.int32).astype(np.int64) if enable else 0
            res = (old + part)
            if idesc.fields.get("saturate"):
                res = np.clip(res, -2 ** 31, 2 ** 31 - 1)
            tm[cells] = (res & 0xFFFFFFFF).astype(np.uint32)
        elif d_type == "f16":
            old = (tm[cells] & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float64) if enable else 0.0
            res = (old * (2.0 ** -sd) + part).astype(np.float16)
            tm[cells] = res.view(np.uint16).astype(np.uint32)
        else:
            old = tm[cells].view(np.float32).astype(np.float64) if enable else 0.0
            res = (old * (2.0 ** -sd) + part).astype(np.float32)
            tm[cells] = res.view(np.uint32)


# --- tcgen05.cp: shared memory -> TMEM ---------------------------------------------------------------------
_CP_SHAPES = {"128x256b": (128, 32), "4x256b": (4, 32), "128x128b": (128, 16), "64x128b": (64, 16),
              "32x128b": (32, 16)}


def _cp(ins: Instruction, prog: Program) -> Callable:
    shape = next((m for m in ins.modifiers if m in _CP_SHAPES), None)
    if shape is None:
        raise UnsupportedInstructionError("tcgen05.cp shape", line=ins.line, text=ins.text)
    if any(m.startswith(("b4x16", "b6x16", "b8x16")) for m in ins.modifiers):
        raise UnsupportedInstructionError("tcgen05.cp with decompression (.b8x16.b4x16_p64 / b6x16_p32)",
                                          line=ins.line, text=ins.text)
    rows, row_bytes = _CP_SHAPES[shape]
    warpx4 = "warpx4" in ins.modifiers
    warpx2 = next((m for m in ins.modifiers if m.startswith("warpx2")), None)
    if shape == "32x128b" and not warpx4 or shape == "64x128b" and not warpx2:
        raise EmulationError(f"tcgen05.cp .{shape} needs its multicast qualifier", line=ins.line, text=ins.text)
    cta_group = _cta_group(ins)
    rd_t = address_reader(ins.operands[0], prog, ins)
    rd_s = prog.src(ins.operands[1], U64, ins)
    line = ins.line
    ncols = row_bytes // 4

    def lane_rows() -> np.ndarray:
        """Destination lane (relative) of each (source row, copy) pair: [copies, rows]."""
        r = np.arange(rows)
        if warpx4:
            return np.stack([r + 32 * q for q in range(4)])
        if warpx2:
            pairs = ((0, 2), (1, 3)) if warpx2.endswith("02_13") else ((0, 1), (2, 3))
            # 64 rows: rows 0..31 -> first pair of warps' quarters, 32..63 -> second pair
            out = np.empty((2, rows), dtype=np.int64)
            for c in range(2):
                for half in range(2):
                    out[c, 32 * half:32 * half + 32] = 32 * pairs[half][c] + np.arange(32)
            return out
        return r[None, :]

    dst_lanes = lane_rows()

    def cp(w):
        taddr_all, desc_all = rd_t(w), rd_s(w)
        for lane in active_index(w):
            taddr, desc = int(taddr_all[lane]), int(as_lanes(desc_all, w.lanes)[lane])
            ctas = _pair(w, cta_group)
            cols = (taddr & 0xFFFF) + np.arange(ncols)
            lanes = (taddr >> 16) + dst_lanes
            if lanes.max() >= TMEM_LANES or cols.max() >= TMEM_COLS:
                raise EmulationError("tcgen05.cp destination outside TMEM", where=w.where())

            reads = opnd.AsyncReads(w, ins)
            cells = np.unique(lanes[:, :, None] * TMEM_COLS + cols[None, None, :])
            # computed at issue, pending (columns unreadable) until its commit completes; ordered after earlier
            # MMAs/cps of the same thread (one in-order tensor-core pipe), so no in-flight check against them
            for cta in ctas:
                check_pending_ld(w, cta, cells, "tcgen05.cp", line)
                raw = reads.gather(cta.smem, opnd.kmajor_addresses(desc, rows, row_bytes))
                words = np.ascontiguousarray(raw).view(np.uint32).reshape(rows, ncols)
                for copy in lanes:
                    cta.tmem.data[copy[:, None], cols[None, :]] = words
            _issue(w, line, ins.text, "tcgen05.cp", [(c.tmem, cells) for c in ctas], reads.ranges)
    return cp


def _wait(ins: Instruction) -> Callable:
    what = ins.modifiers[0] if ins.modifiers else ""
    if what == "ld":
        def wait_ld(w):
            key = ("ld", issuer_of(w))
            n = engine_of(w).counter.get(key, 0)
            if n:
                clock_of(w)[key] = n
        return wait_ld
    if what == "st":
        def wait_st(w):
            engine, clock = engine_of(w), clock_of(w)
            for key in engine.st_keys.get(issuer_of(w), ()):
                clock[key] = engine.counter[key]
        return wait_st
    return lambda w: None


def _on_tcgen05_target(compile_ins: Callable) -> Callable:
    """The compiler of a tcgen05 instruction, refusing modules whose `.target` has no tcgen05 (ptxas rejects them:
    tcgen05 needs an sm_100a / sm_101a / sm_103a / sm_110a target or its family-specific `f` form)."""
    def compile_checked(ins: Instruction, prog: Program) -> Callable:
        target = getattr(prog.env, "target", None)
        arch = (target or "").split(",")[0].strip()
        if arch and not (arch[:5] in ("sm_10", "sm_11") and arch[-1] in "af"):
            raise EmulationError(f"{ins.opcode} under `.target {arch}`: tcgen05 instructions exist only on "
                                 "sm_100a-class targets (ptxas rejects this module); compile for sm_100a",
                                 line=ins.line, text=ins.text)
        return compile_ins(ins, prog)
    return compile_checked


#: opcode -> instruction compiler (rows of the ISA table, isa/table.py)
HANDLERS: dict[str, Callable] = {op: _on_tcgen05_target(f) for op, f in {
    "tcgen05.alloc": _alloc, "tcgen05.dealloc": _dealloc,
    "tcgen05.relinquish_alloc_permit": lambda ins, prog: _relinquish,
    "tcgen05.ld": _ld, "tcgen05.st": _st, "tcgen05.mma": _mma, "tcgen05.commit": _commit, "tcgen05.cp": _cp,
    "tcgen05.wait": lambda ins, prog: _wait(ins),
    "tcgen05.fence": lambda ins, prog: _no_effect,  # orders tcgen05 ops, which execute in program order here
}.items()}


def _no_effect(w) -> None:
    return None
