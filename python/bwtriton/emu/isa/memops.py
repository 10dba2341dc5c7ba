"""ld / st / atom / red, cp.async (Ampere-style, queued per warp until wait_group), ldmatrix / stmatrix."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ...ptx.ir import Instruction, Operand
from ..machine.async_engine import AsyncOp, clock_of, engine_of, issuer_of
from ..errors import AsyncOverwriteError, MemoryFaultError, UnsupportedInstructionError
from ..machine.gang import GangFallback
from ..machine.cells import cells_of, gather, scatter
from . import numerics as nx
from ..machine.memory import CLUSTER_WINDOW, PARAM_BASE, SMEM_BASE
from ..machine.program import NP_TYPES, Program, active_index, address_reader, convert, as_lanes
from ..machine.state import FamilyState


@dataclass
class CpAsyncWarpState:
    #: cp.async copies since the last cp.async.commit_group
    cp_open: list = field(default_factory=list)
    #: the committed groups, oldest first
    cp_groups: list = field(default_factory=list)


STATE = FamilyState("memops", warp=CpAsyncWarpState)

U64 = np.dtype(np.uint64)
_SPACES = ("global", "shared", "shared::cta", "shared::cluster", "param", "local", "const")


def space_of(ins: Instruction) -> str:
    for m in ins.modifiers:
        if m in _SPACES:
            return "shared" if m == "shared::cta" else m
    if ins.opcode == "ld.global.nc":
        return "global"
    return "generic"


def mem_read(w, space: str, addr: np.ndarray, nbytes: int, lanes: Optional[np.ndarray] = None) -> np.ndarray:
    """Bytes [len(addr), nbytes] at per-lane addresses in a state space (generic resolves by address).
    `lanes`: which lanes the addresses belong to when not all (a gang needs it to find each lane's CTA)."""
    if w.is_gang and _gang_shared(space, addr):
        return w.shared.read(addr, nbytes, lanes)
    if space == "shared":
        raw = _own_shared_read(w, addr, nbytes)
        if raw is not None:
            return raw
    if space == "global":
        return w.launch.gmem.read(addr, nbytes)
    if space in ("shared", "shared::cluster"):
        return _shared_rw(w, space, addr, nbytes, None)
    if space == "param":
        return w.launch.params.read(addr.astype(np.int64) - _param_origin(addr), nbytes)
    if space == "generic":
        return _generic(w, addr, nbytes, None)
    raise UnsupportedInstructionError(f"reads from .{space} are not emulated")


def mem_write(w, space: str, addr: np.ndarray, data: np.ndarray, lanes: Optional[np.ndarray] = None) -> None:
    if w.is_gang and _gang_shared(space, addr):
        w.shared.write(addr, data, lanes, _line(w))
        if w.warps_per_cta > 1 or len(w.rows[0].cta.cluster.ctas) > 1:
            _record_gang_stores(w, addr, data.shape[1], lanes)
        return None
    if space == "global":
        return w.launch.gmem.write(addr, data)
    if space in ("shared", "shared::cluster"):
        _shared_rw(w, space, addr, data.shape[1], data)
        return None
    if space == "generic":
        _generic(w, addr, data.shape[1], data)
        return None
    raise UnsupportedInstructionError(f"writes to .{space} are not emulated")


def _gang_shared(space: str, addr: np.ndarray) -> bool:
    """Whether a gang's access goes to its CTAs' shared memories (global and param accesses need no CTA). What a
    gang cannot do in one step (shared::cluster, anything but a plain shared access) it hands back to per-CTA
    execution (gang.GangFallback) before any side effect."""
    if space in ("global", "param"):
        return False
    if space == "shared":
        return True
    if space == "generic":
        return bool(addr.size) and int(addr.max()) < (1 << 31)
    raise GangFallback(space)


def _param_origin(addr: np.ndarray) -> int:
    # ld.param takes param offsets (from the param symbol); generic param addresses start at PARAM_BASE
    return PARAM_BASE if int(addr.max(initial=0)) >= PARAM_BASE else 0


def _own_shared_read(w, addr: np.ndarray, nbytes: int) -> Optional[np.ndarray]:
    """The common ld.shared: every address inside this CTA's own window, no pending asynchronous write on the
    accessed span. One min/max pass decides it; None sends anything else (faults, cluster addresses, poisoned
    bytes) down the full path, which reports it."""
    if not addr.size:
        return None
    smem = w.cta.smem
    off = addr.astype(np.int64) - SMEM_BASE
    lo, hi = int(off.min()), int(off.max()) + nbytes
    if lo < 0 or hi > smem.size:
        return None
    if smem.n_poison and smem.poison[lo:hi].any():
        return None
    if smem.any_async_written and smem.async_writer[lo >> 2:(hi + 3) >> 2].any():
        return None
    return gather(smem.data, off, nbytes)


def _shared_rw(w, space: str, addr: np.ndarray, nbytes: int, data: Optional[np.ndarray]):
    cta = w.cta
    a = addr.astype(np.int64)
    if space == "shared::cluster" or (a.size and int(a.max()) & CLUSTER_WINDOW):
        ranks = (a >> 24) & 0x3F
        cluster = (a & CLUSTER_WINDOW) != 0
        ranks = np.where(cluster, ranks, cta.rank)
        local = np.where(cluster, a & 0xFFFFFF, a)
        out = np.empty((len(a), nbytes), dtype=np.uint8) if data is None else None
        for r in np.unique(ranks):
            sel = ranks == r
            smem = cta.cluster.ctas[int(r)].smem
            if data is None:
                out[sel] = _local_rw(w, smem, local[sel], nbytes, None)
            else:
                _local_rw(w, smem, local[sel], nbytes, data[sel])
        return out
    return _local_rw(w, cta.smem, a, nbytes, data)


def _local_rw(w, smem, a: np.ndarray, nbytes: int, data: Optional[np.ndarray]):
    """A generic-proxy access of one CTA's shared memory: reads must not see bytes a pending asynchronous write
    owns; writes must not hit bytes a pending asynchronous operation uses, and are remembered as unfenced."""
    if data is None and (not smem.n_poison or not _span_poisoned(smem, a, nbytes)) and \
            (not smem.any_async_written or not _span_async_written(smem, a, nbytes)):
        return smem.read(a, nbytes)
    cells = smem.offsets(a, nbytes)[:, None] + np.arange(nbytes)
    if data is None:
        engine = engine_of(w)
        engine.check_generic_read(smem, cells, current_instruction(w))
        if smem.any_async_written:
            engine.check_observed_writes(w, smem, cells, current_instruction(w))
        return smem.data[cells]
    if smem.n_poison or smem.async_reads:
        engine_of(w).check_write(smem, int(cells.min()), int(cells.max()) + 1, current_instruction(w), idx=cells,
                                 by=w)
    smem.data[cells] = data
    smem.mark_generic_write(cells, _line(w))
    # the async proxy of another warp (the elected MMA issuer) or of a peer CTA (cta_group::2 operands) may read
    # it: remember by whom, so that reader must have synchronised with this warp
    if w.cta.nthreads > 32 or len(w.cta.cluster.ctas) > 1:
        engine_of(w).record_peer_store(w, smem, int(cells.min()), int(cells.max()) + 1, _line(w))
    return None


def _record_gang_stores(gw, addr: np.ndarray, nbytes: int, lanes: Optional[np.ndarray]) -> None:
    """A gang's generic shared store, recorded per warp (row) as the warp-by-warp path records it, so a gang
    reports the same unsynchronised cross-warp reads."""
    row_of = (np.arange(addr.size) if lanes is None else np.asarray(lanes)) // 32
    line = _line(gw)
    for r in np.unique(row_of):
        w = gw.rows[int(r)]
        a = addr[row_of == r]
        if not a.size:
            continue
        lo, hi = int(a.min()) - SMEM_BASE, int(a.max()) - SMEM_BASE + nbytes
        if 0 <= lo and hi <= w.cta.smem.size:
            engine_of(w).record_peer_store(w, w.cta.smem, lo, hi, line)


def _span_poisoned(smem, a: np.ndarray, nbytes: int) -> bool:
    """Whether any byte between the lowest and highest accessed offset is owned by a pending asynchronous write
    (one contiguous slice: cheaper than the per-byte check, which runs only when this says yes)."""
    if not a.size:
        return False
    lo = max(int(a.min()) - SMEM_BASE, 0)
    hi = min(int(a.max()) - SMEM_BASE + nbytes, smem.size)
    return lo < hi and bool(smem.poison[lo:hi].any())


def _span_async_written(smem, a: np.ndarray, nbytes: int) -> bool:
    """Whether any byte between the lowest and highest accessed offset names an asynchronous writer."""
    if not a.size:
        return False
    lo = max(int(a.min()) - SMEM_BASE, 0)
    hi = min(int(a.max()) - SMEM_BASE + nbytes, smem.size)
    return lo < hi and bool(smem.async_writer[lo >> 2:(hi + 3) >> 2].any())


def _line(w) -> int:
    ins = w.fn.instructions
    return ins[w.pc].line if w.pc < len(ins) else 0


def current_instruction(w) -> str:
    """The opcode warp `w` executes, for messages (the error's "PTX line N:" prefix names the line)."""
    ins = w.fn.instructions
    return ins[w.pc].opcode if w.pc < len(ins) else "the kernel"


def _generic(w, addr: np.ndarray, nbytes: int, data: Optional[np.ndarray]):
    a = addr.astype(np.uint64)
    hi = int(a.max()) if a.size else 0
    lo = int(a.min()) if a.size else 0
    if hi < (1 << 31):
        return _shared_rw(w, "shared", a, nbytes, data)
    if lo >= PARAM_BASE and hi < PARAM_BASE + (1 << 20):
        if data is not None:
            raise MemoryFaultError("write to the (read-only) param space")
        return w.launch.params.read(a.astype(np.int64) - PARAM_BASE, nbytes)
    if data is None:
        return w.launch.gmem.read(a, nbytes)
    w.launch.gmem.write(a, data)
    return None


def _vec_regs(op: Operand) -> list[Operand]:
    return list(op.items) if op.kind == "vec" else [op]


def _ld(ins: Instruction, prog: Program) -> Callable:
    t = ins.types[-1]
    dt = NP_TYPES[t]
    space = space_of(ins)
    dests = _vec_regs(ins.operands[0])
    n = len(dests)
    width = dt.itemsize
    rd_addr = address_reader(ins.operands[1], prog, ins)
    writers = [prog.dst(d, ins) for d in dests]

    def ld(w):
        if w.mask is None:  # every lane: no gather of active lanes, no zero fill
            raw = mem_read(w, space, rd_addr(w), width * n)
            vals = raw.view(dt).reshape(-1, n)
            if n == 1:
                writers[0](w, vals.reshape(-1))
            else:
                for i, wr in enumerate(writers):
                    wr(w, vals[:, i].copy())
            return None
        idx = active_index(w)
        addr = rd_addr(w)[idx]
        raw = mem_read(w, space, addr, width * n, idx)  # [k, width*n]
        vals = raw.view(dt).reshape(len(idx), n)
        for i, wr in enumerate(writers):
            full = np.zeros(w.lanes, dtype=dt)
            full[idx] = vals[:, i]
            wr(w, full)
    return ld


def _st(ins: Instruction, prog: Program) -> Callable:
    t = ins.types[-1]
    dt = NP_TYPES[t]
    space = space_of(ins)
    srcs = [prog.src(s, dt, ins) for s in _vec_regs(ins.operands[1])]
    rd_addr = address_reader(ins.operands[0], prog, ins)

    def st(w):
        if w.mask is None:
            if len(srcs) == 1:
                col = as_lanes(np.asarray(convert(srcs[0](w), dt)), w.lanes)
                data = np.ascontiguousarray(col).view(np.uint8).reshape(len(col), -1)
            else:
                data = np.stack([as_lanes(np.asarray(convert(s(w), dt)), w.lanes) for s in srcs], axis=1)
                data = data.view(np.uint8).reshape(len(data), -1)
            mem_write(w, space, rd_addr(w), data)
            return None
        idx = active_index(w)
        addr = rd_addr(w)[idx]
        cols = [as_lanes(np.asarray(convert(s(w), dt)), w.lanes)[idx] for s in srcs]
        data = np.ascontiguousarray(np.stack(cols, axis=1)).view(np.uint8).reshape(len(idx), -1)
        mem_write(w, space, addr, data, idx)
    return st


_ATOM_OPS = {
    "add": lambda old, x, c: old + x, "min": lambda old, x, c: np.minimum(old, x),
    "max": lambda old, x, c: np.maximum(old, x), "exch": lambda old, x, c: x,
    "cas": lambda old, x, c: np.where(old == x, c, old), "and": lambda old, x, c: old & x,
    "or": lambda old, x, c: old | x, "xor": lambda old, x, c: old ^ x,
    "inc": lambda old, x, c: np.where(old >= x, 0, old + 1).astype(old.dtype),
    "dec": lambda old, x, c: np.where((old == 0) | (old > x), x, old - 1).astype(old.dtype),
}


def _atom(ins: Instruction, prog: Program) -> Callable:
    """atom / red, scalar and vector (`red.global.add.v4.f32 [a], {x0..x3}`: element i at a + i * size). Lanes
    whose element addresses are all distinct apply in one step; colliding lanes apply one after the other (some
    order is as good as any, and each sees the previous one's result)."""
    red = ins.opcode == "red"
    t = ins.types[-1]
    dt = NP_TYPES[t]
    space = space_of(ins)
    opname = next(m for m in ins.modifiers if m in _ATOM_OPS)
    ops = ins.operands if red else ins.operands[1:]
    rd_addr = address_reader(ops[0], prog, ins)
    srcs = [prog.src(o, dt, ins) for o in _vec_regs(ops[1])]
    rc = prog.src(ops[2], dt, ins) if opname == "cas" else None
    writers = [] if red else [prog.dst(o, ins) for o in _vec_regs(ins.operands[0])]
    if t in ("f16x2", "bf16x2") or (t == "f16" and opname not in ("add", "min", "max", "exch")) or \
            (t == "bf16" and opname not in ("add", "exch")):
        raise UnsupportedInstructionError(f"atomics on {t}", line=ins.line, text=ins.text)
    fn, size, n = _ATOM_OPS[opname], dt.itemsize, len(srcs)
    if t == "f16" and opname == "add":  # the f64 sum of two f16 values is exact: one rounding, to nearest even
        fn = lambda old, x, c: (old.astype(np.float64) + x.astype(np.float64)).astype(np.float16)  # noqa: E731
    if t == "bf16" and opname == "add":  # bf16 lives as bits; an f32 sum rounds to bf16 as the exact sum would
        fn = lambda old, x, c: nx.f32_to_bf16_bits(nx.bf16_bits_to_f32(old) + nx.bf16_bits_to_f32(x))  # noqa: E731

    def apply(w, addr: np.ndarray, x: np.ndarray, c, lanes: np.ndarray) -> np.ndarray:
        old = mem_read(w, space, addr, size, lanes).view(dt).reshape(-1)
        new = np.asarray(fn(old, x, c), dtype=dt)
        mem_write(w, space, addr, new.view(np.uint8).reshape(-1, size), lanes)
        return old

    def atom(w):
        idx = active_index(w)
        base = as_lanes(rd_addr(w), w.lanes)[idx]
        addr = (base[:, None] + np.arange(n, dtype=np.uint64) * np.uint64(size)).ravel()  # [lane, element]
        x = np.stack([as_lanes(np.asarray(r(w), dtype=dt), w.lanes)[idx] for r in srcs], 1).ravel()
        c = np.repeat(as_lanes(np.asarray(rc(w), dtype=dt), w.lanes)[idx], n) if rc else None
        lanes = np.repeat(idx, n)
        if len(np.unique(addr)) == len(addr):
            old = apply(w, addr, x, c, lanes)
        else:
            old = np.empty(len(addr), dtype=dt)
            for j in range(len(addr)):
                old[j:j + 1] = apply(w, addr[j:j + 1], x[j:j + 1], None if c is None else c[j:j + 1], lanes[j:j + 1])
        for i, wr in enumerate(writers):
            full = np.zeros(w.lanes, dtype=dt)
            full[idx] = old.reshape(len(idx), n)[:, i]
            wr(w, full)
    return atom


# --- cp.async (non-bulk): copies wait in per-warp groups until cp.async.wait_group ------------------------
def _cp_async(ins: Instruction, prog: Program) -> Callable:
    ops = ins.operands
    rd_dst = address_reader(ops[0], prog, ins)
    rd_src = address_reader(ops[1], prog, ins)
    size = int(ops[2].value)  # type: ignore[arg-type]
    rd_srcsize = prog.src(ops[3], np.dtype(np.uint32), ins) if len(ops) > 3 and ops[3].kind != "imm" or \
        (len(ops) > 3 and ops[3].kind == "imm") else None

    line, text = ins.line, ins.text

    def cp(w):
        if w.is_gang:
            return _gang_cp(w, rd_dst, rd_src, rd_srcsize, size, line, text)
        idx = active_index(w)
        dst = rd_dst(w)[idx].copy()
        src = rd_src(w)[idx].copy()
        srcsize = as_lanes(np.asarray(rd_srcsize(w)), w.lanes)[idx].copy() if rd_srcsize else \
            np.full(len(idx), size)
        smem = w.cta.smem
        cells = cells_of(smem.offsets(dst, size), size)
        op = AsyncOp(kind="cp.async", line=line, text=text, issuer=issuer_of(w), writes=[(smem, cells)],
                     reader_must_observe=True, observe="Execute cp.async.commit_group / cp.async.wait_group in the issuing warp, then "
                             "bar.sync,")
        op.finish = lambda: _copy_in(w, dst, src, srcsize, size)
        w.cp_open.append(engine_of(w).issue(w, op))
    return cp


def _gang_cp(w, rd_dst, rd_src, rd_srcsize, size: int, line: int, text: str) -> None:
    """cp.async for every CTA of a gang as one asynchronous operation over the stacked shared memories
    (gang.GangShared); anything unusual (a pending asynchronous read, an out-of-window address, bytes still
    owned by another copy) goes to the per-CTA path before any side effect, which reports it."""
    shared = w.shared
    idx = active_index(w)
    flat, lo, hi = shared.cells(rd_dst(w)[idx], size, idx)
    if shared.pending_read(lo, hi):
        raise GangFallback("pending asynchronous reads")
    src = rd_src(w)[idx].copy()
    srcsize = as_lanes(np.asarray(rd_srcsize(w)), w.lanes)[idx].copy() if rd_srcsize else None
    op = AsyncOp(kind="cp.async", line=line, text=text, issuer=("gang", w.wid),
                 writes=[(shared, cells_of(flat, size))], reader_must_observe=True,
                 observe="Execute cp.async.commit_group / cp.async.wait_group in the issuing warp, then bar.sync,")
    launch = w.launch
    op.finish = lambda: scatter(shared.data, flat, _gather_src(launch.gmem, src, srcsize, size))
    try:
        engine_of(w.rows[0]).issue(w, op)  # checks before it changes anything
    except AsyncOverwriteError:
        raise GangFallback("bytes owned by a pending copy") from None  # per CTA: the error names the CTA
    for row in _issuing_rows(w):
        row.cp_open.append(op)
    return None


def _gather_src(gmem, src: np.ndarray, srcsize: Optional[np.ndarray], size: int) -> np.ndarray:
    """cp.async's source bytes [lanes, size]: the bytes past each lane's src-size are zeros and not read (Triton
    masks loads with src-size 0, often with an address that must not be dereferenced)."""
    if srcsize is None or (srcsize >= size).all():
        return gmem.read(src, size)
    data = np.zeros((len(src), size), dtype=np.uint8)
    full = srcsize >= size
    if full.any():
        data[full] = gmem.read(src[full], size)
    for k in np.flatnonzero((srcsize > 0) & ~full):
        nb = int(srcsize[k])
        data[k, :nb] = gmem.read(src[k:k + 1], nb)[0]
    return data


def _copy_in(w, dst: np.ndarray, src: np.ndarray, srcsize: np.ndarray, size: int) -> None:
    """cp.async's data movement: `size` bytes per lane, the bytes past src-size zero-filled."""
    w.cta.smem.write(dst, _gather_src(w.launch.gmem, src, srcsize, size))


def _issuing_rows(w) -> list:
    return w.active_rows() if w.is_gang else [w]


# commit / wait touch only the issuing warps' own group lists (a gang shares the ops of one gang cp.async
# between its rows), so a gang runs them in one step over its rows rather than per CTA
def _cp_commit(w):
    for row in _issuing_rows(w):
        row.cp_groups.append(row.cp_open)
        row.cp_open = []


def _cp_wait(n: int) -> Callable:
    def wait(w):
        for row in _issuing_rows(w):
            while len(row.cp_groups) > n:
                group = row.cp_groups.pop(0)
                engine_of(row).complete_group(group)
                _observe_group(row, group)
    return wait


def _observe_group(row, group: list) -> None:
    """The warp observes its retired cp.async group. Groups retire in order, so the newest copy of each source
    covers the older ones (a group holds its warp's own copies and, where a gang issued them, the gang's)."""
    clock = clock_of(row)
    for op in group:
        if op.key and clock.get(op.key, 0) < op.idx:
            clock[op.key] = op.idx


def _cp_wait_all(w):
    _cp_commit(w)
    _cp_wait(0)(w)


# --- ldmatrix / stmatrix ------------------------------------------------------------------------------
def _ldmatrix(ins: Instruction, prog: Program) -> Callable:
    mods = ins.modifiers
    if "m8n8" not in mods:
        raise UnsupportedInstructionError("ldmatrix shapes other than m8n8", line=ins.line, text=ins.text)
    num = int(next(m for m in mods if m in ("x1", "x2", "x4"))[1:])
    trans = "trans" in mods
    rd_addr = address_reader(ins.operands[1], prog, ins)
    writers = [prog.dst(d, ins) for d in _vec_regs(ins.operands[0])]
    t = np.arange(32)

    def ldm(w):
        # per warp (a gang: per CTA row of 32 lanes): lanes 8i..8i+7 give matrix i's row addresses
        addr = as_lanes(rd_addr(w), w.lanes).reshape(-1, 32)
        warps = np.arange(addr.shape[0])[:, None] * 32
        for i, wr in enumerate(writers):
            lanes = (warps + 8 * i + np.arange(8)).ravel()
            raw = mem_read(w, "shared", addr[:, 8 * i:8 * i + 8].ravel(), 16, lanes)
            mat = raw.view(np.uint16).reshape(-1, 8, 8)  # [warp, row, col]
            if trans:
                lo, hi = mat[:, 2 * (t % 4), t // 4], mat[:, 2 * (t % 4) + 1, t // 4]
            else:
                lo, hi = mat[:, t // 4, 2 * (t % 4)], mat[:, t // 4, 2 * (t % 4) + 1]
            wr(w, (lo.astype(np.uint32) | (hi.astype(np.uint32) << 16)).ravel())
    if num != len(writers):
        raise UnsupportedInstructionError("ldmatrix .num does not match the destination count", line=ins.line)
    return ldm


def _stmatrix(ins: Instruction, prog: Program) -> Callable:
    mods = ins.modifiers
    if "m8n8" not in mods:
        raise UnsupportedInstructionError("stmatrix shapes other than m8n8", line=ins.line, text=ins.text)
    trans = "trans" in mods
    rd_addr = address_reader(ins.operands[0], prog, ins)
    srcs = [prog.src(s, np.dtype(np.uint32), ins) for s in _vec_regs(ins.operands[1])]
    t = np.arange(32)

    def stm(w):
        addr = as_lanes(rd_addr(w), w.lanes).reshape(-1, 32)
        nw = addr.shape[0]
        warps = np.arange(nw)[:, None] * 32
        for i, s in enumerate(srcs):
            v = as_lanes(np.asarray(s(w), np.uint32), w.lanes).reshape(nw, 32)
            mat = np.zeros((nw, 8, 8), dtype=np.uint16)
            lo, hi = (v & 0xFFFF).astype(np.uint16), (v >> 16).astype(np.uint16)
            if trans:
                mat[:, 2 * (t % 4), t // 4], mat[:, 2 * (t % 4) + 1, t // 4] = lo, hi
            else:
                mat[:, t // 4, 2 * (t % 4)], mat[:, t // 4, 2 * (t % 4) + 1] = lo, hi
            lanes = (warps + 8 * i + np.arange(8)).ravel()
            mem_write(w, "shared", addr[:, 8 * i:8 * i + 8].ravel(), mat.view(np.uint8).reshape(-1, 16), lanes)
    return stm


def _mapa(ins: Instruction, prog: Program) -> Callable:
    """mapa.shared::cluster.u32 d, a, rank: the shared::cluster address of shared::cta address `a` in CTA `rank`
    (memory.py's window: CLUSTER_WINDOW | rank << 24 | a)."""
    if "shared::cluster" not in ins.modifiers:
        raise UnsupportedInstructionError("mapa on generic addresses is not emulated (use .shared::cluster)",
                                          line=ins.line, text=ins.text)
    wr = prog.dst(ins.operands[0], ins)
    ra, rr = prog.src(ins.operands[1], U64, ins), prog.src(ins.operands[2], np.dtype(np.uint32), ins)

    def mapa(w):
        a = as_lanes(ra(w), w.lanes).astype(np.uint64)
        r = as_lanes(rr(w), w.lanes).astype(np.uint64)
        return wr(w, np.uint64(CLUSTER_WINDOW) | (r << np.uint64(24)) | (a & np.uint64(0xFFFFFF)))
    return mapa


def _getctarank(ins: Instruction, prog: Program) -> Callable:
    wr = prog.dst(ins.operands[0], ins)
    ra = prog.src(ins.operands[1], U64, ins)

    def getctarank(w):
        a = as_lanes(ra(w), w.lanes).astype(np.uint64)
        window = (a & np.uint64(CLUSTER_WINDOW)) != 0
        return wr(w, np.where(window, (a >> np.uint64(24)) & np.uint64(0x3F), np.uint64(w.cta.rank)))
    return getctarank


def _createpolicy(ins: Instruction, prog: Program) -> Callable:
    wr = prog.dst(ins.operands[0], ins)
    return lambda w: wr(w, np.uint64(0))  # a cache policy the emulator has no cache for


def _hint(w) -> None:
    return None


#: opcode -> instruction compiler (rows of the ISA table, isa/table.py)
HANDLERS: dict[str, Callable] = {
    "mapa": _mapa, "getctarank": _getctarank, "ld": _ld, "ld.global.nc": _ld, "st": _st, "atom": _atom,
    "red": _atom, "cp.async": _cp_async, "cp.async.commit_group": lambda ins, prog: _cp_commit,
    "cp.async.wait_group": lambda ins, prog: _cp_wait(int(ins.operands[0].value)),  # type: ignore[arg-type]
    "cp.async.wait_all": lambda ins, prog: _cp_wait_all, "ldmatrix": _ldmatrix, "stmatrix": _stmatrix,
    "createpolicy": _createpolicy,
    # cache hints: no cache here
    **{op: (lambda ins, prog: _hint) for op in ("prefetch", "prefetchu", "cp.async.bulk.prefetch",
                                                 "cp.async.bulk.prefetch.tensor", "discard", "applypriority")},
}
