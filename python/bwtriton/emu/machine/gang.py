"""Gangs: the warps of many CTAs executing each instruction together, over their lanes side by side.

Most of a kernel's instructions do the same thing in every CTA of a launch, only on other data, and one numpy
operation over (CTAs x 32) lanes costs about what it costs over 32. A gang takes B clusters of the launch and
makes, for each cluster rank, one `GangWarp` whose registers hold the lanes of every warp of those B CTAs (a
row of 32 lanes per warp, CTA-major); where the warps of a CTA take different paths (a branch on the warp id)
it splits into one GangWarp per warp id. `scheduler.run_warp` runs a GangWarp like a warp; two kinds of
instruction make up its program:

* gang-safe instructions (arithmetic, conversions, branches, global / param / plain shared loads and stores):
  the warp's own closure, run once over all lanes (the GangWarp's `lanes`);
* everything else (barriers, mbarriers, TMA, tcgen05, shuffles...): the closure runs once per row, on that
  CTA's own `Warp`, whose registers are bound to the gang's rows (`RowRegs`), so per-CTA state (barrier
  counts, asynchronous engines, TMEM, shared memory bookkeeping) is exactly what the warp-by-warp emulator keeps.

A gang-safe closure that meets something it cannot do for the whole gang (a shared::cluster access, bytes an
asynchronous operation owns) raises `GangFallback` before any side effect, and the instruction runs per CTA.
When the CTAs stop agreeing (a per-CTA step returns different results: one CTA's barrier releases, another's
does not), the gang dissolves: every CTA's warps take their rows back and the clusters finish warp by warp. So
a gang never changes what a kernel computes or which errors it gets, only how fast the uniform part runs.
"""
from __future__ import annotations

import copy
from typing import Callable, Optional

import numpy as np

from ..errors import DeadlockError
from .cells import Chunks, cells_get, cells_of, cells_set, gather, scatter
from .memory import SMEM_BASE, forget_summaries, word_cells
from .program import DIVERGED, DONE_PC, EXITED, YIELD
from .scheduler import (QUANTUM, check_budget, cluster_done, exit_lanes, finish_cluster, reselect, run_warp,
                        start_cluster, step_cluster)
from .warp import WARP_LANES, register_file

#: lanes of one GangWarp (clusters per gang = this / (32 * warps per CTA)); 0 turns gangs off
DEFAULT_GANG_LANES = 16384
#: gangs start as whole CTAs (every warp of a CTA in one gang) and split per warp id where warps diverge
CTA_GANGS = True
#: bytes a gang may hold in registers and stacked shared memory (bounds the gang for register-heavy kernels)
GANG_MEMORY_BYTES = 1 << 29
#: opcodes whose closures are gang-safe (they touch only registers, masks, global/param memory and, through
#: `GangWarp.shared`, plain shared memory). Everything else runs per CTA.
GANG_SAFE = frozenset(
    ("mov add sub mul mad fma div rem min max neg abs and or xor not cnot shl shr selp setp set bfe bfi prmt "
     "popc clz brev rcp sqrt rsqrt ex2 lg2 sin cos tanh copysign testp mul24 mad24 sad bfind fns shf lop3 dp4a "
     "dp2a cvt cvta bra ret exit ld ld.global.nc st cp.async cp.async.commit_group cp.async.wait_group "
     "cp.async.wait_all mma ldmatrix stmatrix").split())


class GangFallback(Exception):
    """Raised by a gang-safe closure, before any side effect, when this execution needs per-CTA handling."""


class Split(Exception):
    """A gang of whole CTAs diverged: it splits into one gang per warp id (`split`)."""

    def __init__(self, gw: "GangWarp") -> None:
        super().__init__("gang splits")
        self.gw = gw


class Dissolve(Exception):
    """The CTAs of a gang disagreed on an instruction's outcome: `results` are (row, result) of those that ran."""

    def __init__(self, gw: "GangWarp", results: list) -> None:
        super().__init__("gang dissolves")
        self.gw, self.results = gw, results


class RowRegs:
    """A CTA warp's view of its 32 lanes in a GangWarp's registers (reads are views, writes copy in).

    Register arrays may be shared between slots (a `mov` stores its source array), so the first write to a slot
    during one per-CTA step copies that slot's array (`owned` holds the slots copied in this step)."""

    __slots__ = ("regs", "lo", "hi", "owned")

    def __init__(self, regs: list, row: int, owned: set) -> None:
        self.regs, self.lo, self.hi, self.owned = regs, 32 * row, 32 * row + 32, owned

    def __getitem__(self, slot: int) -> np.ndarray:
        return self.regs[slot][self.lo:self.hi]

    def __setitem__(self, slot: int, value) -> None:
        if slot not in self.owned:
            self.regs[slot] = self.regs[slot].copy()
            self.owned.add(slot)
        self.regs[slot][self.lo:self.hi] = value

    def __len__(self) -> int:
        return len(self.regs)


class GangShared:
    """The shared memories of one cluster rank's CTAs in a gang, stacked so one gather serves every lane. Each
    CTA's `SharedMemory` keeps working on its row (its arrays become views of the stacks). To the asynchronous
    engine it is one more shared memory (flat `data`/`poison`/`unfenced`), for operations a gang issues at once
    (cp.async): its poison count is the CTAs' (changes go to every CTA's memory, so per-CTA accesses see them).
    `lane_base` maps each gang lane to its CTA's row of the stacks."""

    rank = "gang"

    def __init__(self, smems: list, rows_per_cta: int = 1) -> None:
        self.smems = smems
        self.size = size = smems[0].size
        stride = (size + 15) // 16 * 16  # rows 16-byte aligned: aligned accesses gather whole words
        b = len(smems)
        self.data2d = np.zeros((b, stride), dtype=np.uint8)
        self.poison2d = np.zeros((b, stride), dtype=smems[0].poison.dtype)
        self.unfenced2d = np.zeros((b, stride), dtype=smems[0].unfenced.dtype)
        self.writer2d = np.zeros((b, stride // 4), dtype=smems[0].async_writer.dtype)  # per 4-byte word
        for i, s in enumerate(smems):  # fresh CTAs: nothing to copy (zeros are what a new SharedMemory holds)
            s.data, s.poison, s.unfenced = self.data2d[i, :size], self.poison2d[i, :size], self.unfenced2d[i, :size]
            s.async_writer = self.writer2d[i, :s.async_writer.size]
        self.data = self.data2d.reshape(-1)
        self.poison = self.poison2d.reshape(-1)
        self.unfenced = self.unfenced2d.reshape(-1)
        self.async_writer = self.writer2d.reshape(-1)
        self.stride = stride
        self.lane_base = np.repeat(np.arange(b, dtype=np.int64) * stride, 32 * rows_per_cta)

    def for_rows(self, rows_per_cta: int) -> "GangShared":
        """The same stacks seen by a gang whose every CTA has `rows_per_cta` rows of 32 lanes."""
        view = copy.copy(self)
        view.lane_base = np.repeat(np.arange(len(self.smems), dtype=np.int64) * self.stride, 32 * rows_per_cta)
        return view

    # -- what the asynchronous engine reads and updates (asyncops.AsyncEngine.issue / complete) --------------
    @property
    def n_poison(self) -> int:
        """Pending asynchronous writes into any of the CTAs (a gang's or one CTA's own): nonzero makes the engine
        check the poison of what a new operation writes."""
        return max(s.n_poison for s in self.smems)

    @n_poison.setter
    def n_poison(self, value: int) -> None:
        delta = value - self.n_poison  # the engine counts a gang operation in (+1) and out (-1)
        for s in self.smems:
            s.n_poison += delta

    @property
    def any_unfenced(self) -> bool:
        return any(s.any_unfenced for s in self.smems)

    def set_async_writer(self, idx, code: int) -> None:
        """SharedMemory.set_async_writer over the stacks: a gang's copy that tiles the same span in each CTA it
        writes is set as one slice of every such CTA's row."""
        b = len(self.smems)
        if isinstance(idx, Chunks) and idx.first.size % b == 0:
            local = idx.first.reshape(b, -1) - (np.arange(b, dtype=np.int64) * self.stride)[:, None]
            row = local[0]
            lo, hi = int(row.min()), int(row.max()) + idx.size
            for s in self.smems:
                s.any_async_written = True
                forget_summaries(s, lo, hi)
            if (local == row).all():  # every CTA's lanes (CTA-major) at the same offsets
                n, size = row.size, idx.size
                if hi - lo == n * size:  # tiling one span: a slice of every row
                    self.writer2d[:, lo >> 2:(hi + 3) >> 2] = code
                    return
                step = int(row[1] - row[0]) if n > 1 else 0
                if n > 1 and step > size and step % 4 == 0 and (lo + n * step) >> 2 <= self.writer2d.shape[1] \
                        and int(row[0]) == lo and (np.diff(row) == step).all():
                    # evenly spaced chunks (a column of rows): a strided view of every row
                    view = self.writer2d[:, lo >> 2:(lo + n * step) >> 2].reshape(b, n, step >> 2)
                    view[:, :, :size >> 2] = code
                    return
        else:
            for s in self.smems:
                s.any_async_written = True
                s.writer_summary.clear()
        cells_set(self.async_writer, word_cells(idx), code)

    @property
    def any_async_written(self) -> bool:
        """Whether some CTA's bytes name an asynchronous writer (a gang's own writes clear the names)."""
        return any(s.any_async_written for s in self.smems)

    def reader_of(self, lo: int, hi: int):
        return None  # gang operations are issued only when no CTA's pending reads overlap them (pending_read)

    def pending_read(self, lo: int, hi: int) -> bool:
        """Whether a pending asynchronous read (an MMA's operands, a TMA store's source) of any CTA overlaps
        CTA offsets [lo, hi)."""
        return any(s.async_reads and s.reader_of(lo, hi) is not None for s in self.smems)

    # -- plain loads and stores ------------------------------------------------------------------------------
    def cells(self, addr: np.ndarray, nbytes: int, lanes: Optional[np.ndarray]) -> tuple[np.ndarray, int, int]:
        """Flat offsets (into the stacks) of the first byte of each access, and the span of CTA offsets."""
        off = addr.astype(np.int64) - SMEM_BASE
        if not off.size:
            raise GangFallback("no lanes")
        lo, hi = int(off.min()), int(off.max()) + nbytes
        if lo < 0 or hi > self.size:
            raise GangFallback("outside shared memory")  # the per-CTA path reports the fault
        base = self.lane_base if lanes is None else self.lane_base[lanes]
        return base + off, lo, hi

    def read(self, addr: np.ndarray, nbytes: int, lanes: Optional[np.ndarray]) -> np.ndarray:
        flat, lo, hi = self.cells(addr, nbytes, lanes)
        if any(s.n_poison for s in self.smems):
            # Asynchronous writers own whole aligned chunks (cp.async 4/8/16 bytes, TMA boxes) and a kernel that
            # skips a wait skips it for the whole chunk, so an aligned access's first byte decides; a poisoned
            # access goes to the per-CTA path, which checks every byte and names the racing instructions.
            hit = self.poison[flat].any() if nbytes % 4 == 0 and not (flat & 3).any() else \
                self.poison2d[:, lo:hi].any()
            if hit:
                raise GangFallback("pending asynchronous write")
        if self.any_async_written and self.writer2d[:, lo >> 2:(hi + 3) >> 2].any():
            raise GangFallback("bytes an asynchronous write produced")  # each CTA's reader must have observed it
        return gather(self.data, flat, nbytes)

    def write(self, addr: np.ndarray, data: np.ndarray, lanes: Optional[np.ndarray], line: int) -> None:
        nbytes = data.shape[1]
        flat, lo, hi = self.cells(addr, nbytes, lanes)
        cells = cells_of(flat, nbytes)
        if self.pending_read(lo, hi) or (any(s.n_poison for s in self.smems) and cells_get(self.poison, cells).any()):
            raise GangFallback("pending asynchronous operations")  # the per-CTA path names the race
        scatter(self.data, flat, data)
        cells_set(self.unfenced, cells, line)  # what SharedMemory.mark_generic_write records
        if self.any_async_written:
            cells_set(self.async_writer, word_cells(cells), 0)
            for s in self.smems:
                s.writer_summary.clear()
        for s in self.smems:
            s.any_unfenced = True


class GangWarp:
    """One warp (same cluster rank, same warp id) of B clusters: `rows` are those CTAs' own warps; registers span
    32 * B lanes (CTA row b = lanes 32b .. 32b+31)."""

    is_gang = True

    __slots__ = ("rows", "warps_per_cta", "shared", "code", "nl", "lanes", "launch", "wid", "R", "live", "mask",
                 "lane_pc", "pc", "done", "all_lanes", "executed", "blocked_on", "_sregs")

    def __init__(self, rows: list, shared: GangShared, code: list, warps_per_cta: int = 1) -> None:
        first = rows[0]
        self.rows = rows
        self.warps_per_cta = warps_per_cta
        self.shared = shared
        self.code = code
        self.nl = self.lanes = WARP_LANES * len(rows)
        self.launch = first.launch
        self.wid = first.wid
        self.R = register_file(first.cta.prog.slot_dtypes, self.nl)
        self.live = np.concatenate([w.live for w in rows])
        self.mask = None if self.live.all() else self.live.copy()
        self.lane_pc = None
        self.pc = 0
        self.done = not self.live.any()
        self.all_lanes = np.arange(self.nl)
        self.executed = 0
        self.blocked_on = ""
        self._sregs: dict = {}

    @property
    def fn(self):
        return self.rows[0].fn

    def sreg(self, name: str) -> np.ndarray:
        v = self._sregs.get(name)
        if v is None:
            v = self._sregs[name] = np.concatenate([np.broadcast_to(w.sreg(name), (32,)) for w in self.rows])
        return v

    def active_rows(self) -> list:
        """The CTA warps (rows) with an active lane: those a per-CTA step runs."""
        act = self.mask if self.mask is not None else self.live
        return [row for row, on in zip(self.rows, act.reshape(-1, 32).any(axis=1)) if on]

    def where(self) -> str:
        if self.warps_per_cta > 1:
            return f"{len(self.rows) // self.warps_per_cta} whole CTAs run together (first: {self.rows[0].where()})"
        return f"warp {self.wid} of {len(self.rows)} CTAs run together (first: {self.rows[0].where()})"


# --- building the gang's program ----------------------------------------------------------------------------
def _per_cta(f: Callable) -> Callable:
    """Run closure `f` once per CTA row with active lanes, on that CTA's own warp; one result for the gang, or
    Dissolve when they differ."""
    def run(gw: GangWarp):
        act = gw.mask if gw.mask is not None else gw.live
        results = []
        owned: set = set()
        for b, w in enumerate(gw.rows):
            lo = 32 * b
            m = act[lo:lo + 32]
            if not m.any():
                continue
            w.R = RowRegs(gw.R, b, owned)
            w.live = gw.live[lo:lo + 32]
            w.mask = None if m.all() else m.copy()
            w.lane_pc = None if gw.lane_pc is None else gw.lane_pc[lo:lo + 32]
            w.pc = gw.pc
            results.append((b, f(w)))
        if gw.warps_per_cta > 1 and any(r == YIELD for _, r in results):
            # The warps of a CTA ran this instruction one after another; a barrier that the last of them
            # completed releases the earlier ones when they run it again -- what the scheduler would do next.
            results = [(b, f(gw.rows[b]) if r == YIELD else r) for b, r in results]
        first = results[0][1] if results else None
        if all(r == first for _, r in results) and first != DIVERGED:
            if first == YIELD:
                gw.blocked_on = gw.rows[results[0][0]].blocked_on
            return first
        raise Dissolve(gw, results)
    return run


def _gang_safe(f: Callable, per_cta: Callable) -> Callable:
    def run(gw: GangWarp):
        try:
            return f(gw)
        except GangFallback:
            return per_cta(gw)
    return run


def gang_code(prog) -> list:
    """The gang's closure for every instruction of `prog` (cached on it)."""
    code = prog.gang_code
    if code is None:
        code = []
        for ins, f in zip(prog.fn.instructions, prog.code):
            per_cta = _per_cta(f)
            code.append(_gang_safe(f, per_cta) if ins.opcode in GANG_SAFE and "b128" not in ins.types
                        else per_cta)
        prog.gang_code = code
    return code


def cta_gang_code(prog) -> list:
    """The closures of a gang of whole CTAs: the gang's, splitting the gang where its lanes diverge (warps of a
    CTA taking different paths -- warp specialisation -- run as one gang per warp id from there on)."""
    code = prog.cta_gang_code
    if code is None:
        code = prog.cta_gang_code = [_splitting(f) for f in gang_code(prog)]
    return code


def _splitting(f: Callable) -> Callable:
    def run(gw: GangWarp):
        r = f(gw)
        if r == DIVERGED:
            raise Split(gw)  # the lanes' PCs are set (sync.diverge): `split` carries them over
        return r
    return run


def gang_eligible(prog) -> bool:
    """Gangs need CTAs that do not depend on the launch order (CLC work stealing does)."""
    return not any(ins.opcode.startswith("clusterlaunchcontrol.") for ins in prog.fn.instructions)


# --- running -------------------------------------------------------------------------------------------------
def build_gang(clusters: list, whole_ctas: bool = False) -> list:
    """The GangWarps over `clusters` (already started): one per (rank, warp id), or with `whole_ctas` one per
    rank holding every warp of its CTAs (rows CTA-major), for kernels whose warps run the same code -- a
    quarter or an eighth as many instructions, each over that many more lanes."""
    prog = clusters[0].ctas[0].prog
    gws = []
    for rank in range(len(clusters[0].ctas)):
        nw = len(clusters[0].ctas[rank].warps)
        shared = GangShared([c.ctas[rank].smem for c in clusters], nw if whole_ctas else 1)
        if whole_ctas and nw > 1:
            rows = [w for c in clusters for w in c.ctas[rank].warps]
            gws.append(GangWarp(rows, shared, cta_gang_code(prog), warps_per_cta=nw))
            continue
        for wid in range(nw):
            gws.append(GangWarp([c.ctas[rank].warps[wid] for c in clusters], shared, gang_code(prog)))
    return gws


def split(gws: list, gw: GangWarp) -> None:
    """Replace gang-of-whole-CTAs `gw` in `gws` by one GangWarp per warp id, each taking its lanes' registers,
    liveness and program counters."""
    nw, ncta = gw.warps_per_cta, len(gw.rows) // gw.warps_per_cta
    shared = gw.shared.for_rows(1)
    parts = []
    for k in range(nw):
        lanes = ((np.arange(ncta)[:, None] * nw + k) * 32 + np.arange(32)).ravel()
        part = GangWarp(gw.rows[k::nw], shared, gang_code(gw.rows[0].cta.prog))
        part.R = [a[lanes] for a in gw.R]
        part.live = gw.live[lanes]
        part.pc = gw.pc
        part.lane_pc = None if gw.lane_pc is None else gw.lane_pc[lanes]
        part.done = not part.live.any()
        part.mask = None if part.live.all() else part.live.copy()
        if part.lane_pc is not None and not part.done:
            reselect(part)
        parts.append(part)
    i = gws.index(gw)
    gws[i:i + 1] = parts


def step_gang(gws: list, clusters: list, budget: int) -> tuple[int, bool]:
    """One round of every GangWarp. Returns (warp-instructions retired, dissolved?)."""
    launch = clusters[0].launch
    total, progressed = 0, False
    for gw in list(gws):
        if gw.done:
            continue
        before = launch.progress
        try:
            n, _ = run_warp(gw, budget)
        except Split as sp:
            split(gws, sp.gw)
            progressed = True  # the branch that diverged retired; its parts run from the next round
            continue
        except Dissolve as d:
            dissolve(gws, d)
            return total, True
        total += n * len(gw.rows)
        progressed |= bool(n) or launch.progress != before
    # the gang's clusters share one engine (run_gangs)
    if not progressed and not clusters[0].engine.complete_all() and not all(g.done for g in gws):
        blocked = "; ".join(f"{g.where()} at pc {g.pc}: {g.blocked_on or 'running'}" for g in gws if not g.done)
        raise DeadlockError(f"deadlock: no warp can make progress and no asynchronous work is pending -- {blocked}")
    return total, False

def dissolve(gws: list, d: Optional[Dissolve] = None) -> None:
    """Give every CTA warp its rows back (registers, lanes, PCs); the warp whose per-CTA step disagreed takes
    each CTA's own outcome of that step."""
    outcome = {b: r for b, r in d.results} if d is not None else {}
    for gw in gws:
        for b, w in enumerate(gw.rows):
            lo, hi = 32 * b, 32 * b + 32
            r = outcome.get(b) if gw is (d.gw if d else None) else None
            own_lane_pc = w.lane_pc if r == DIVERGED else None
            w.R = [a[lo:hi].copy() for a in gw.R]
            w.live = gw.live[lo:hi].copy()
            w.pc = gw.pc
            w.lane_pc = None if gw.lane_pc is None else gw.lane_pc[lo:hi].copy()
            w.done = gw.done or not w.live.any()
            if w.done:
                continue
            act = (gw.mask if gw.mask is not None else gw.live)[lo:hi].copy()
            w.mask = None if (w.lane_pc is None and w.live.all()) else w.live.copy()
            if w.lane_pc is not None:
                reselect(w)
            if gw is (d.gw if d else None) and b in outcome:
                _apply(w, r, act, own_lane_pc)


def _apply(w, r, act: np.ndarray, own_lane_pc) -> None:
    """Advance warp `w` past the instruction it just executed at w.pc on lanes `act`, as run_warp would."""
    if r == YIELD:
        return
    if r == DIVERGED:
        w.lane_pc = own_lane_pc.copy()
        reselect(w)
        return
    if w.lane_pc is None and (act == w.live).all():
        if r == EXITED:
            exit_lanes(w)
            if not w.done:
                w.pc += 1
                w.mask = w.live.copy()
            return
        w.pc = w.pc + 1 if r is None else r
        return
    if w.lane_pc is None:
        w.lane_pc = np.where(w.live, w.pc, DONE_PC)
    if r is None:
        w.lane_pc[act] = w.pc + 1
    elif r >= 0:
        w.lane_pc[act] = r
    elif r == EXITED:
        w.mask = act
        exit_lanes(w)
        if w.done:
            return
        w.lane_pc[~w.live] = DONE_PC
    reselect(w)


def _clusters_per_gang(cluster, lanes: int) -> int:
    """As many clusters as fit in `lanes` lanes per warp and in GANG_MEMORY_BYTES."""
    cta = cluster.ctas[0]
    nwarps = max(len(cta.warps), 1)
    reg_bytes = sum(dt.itemsize for dt in cta.prog.slot_dtypes) * 32 * nwarps
    smem_bytes = cta.smem.size * (1 + cta.smem.poison.itemsize + cta.smem.unfenced.itemsize)
    per_cluster = (reg_bytes + smem_bytes) * len(cluster.ctas)
    return max(1, min(lanes // (32 * nwarps), GANG_MEMORY_BYTES // max(per_cluster, 1)))


def run_gangs(launch, coords: list, make_cluster: Callable, max_instructions: int, lanes: int,
              on_cluster_done: Optional[Callable] = None, on_round: Optional[Callable] = None) -> None:
    """Run the launch's clusters (launch order) in gangs of as many clusters as fit in `lanes` lanes per warp;
    a gang that dissolves finishes its clusters warp by warp, round-robin. `on_round` is called after every
    scheduling round (progress display); launch.instructions counts as the run goes."""
    total = 0
    i = 0
    while i < len(coords):
        first = make_cluster(coords[i], registers=False)
        per_gang = _clusters_per_gang(first, lanes)
        clusters = [first] + [make_cluster(c, registers=False) for c in coords[i + 1:i + per_gang]]
        i += len(clusters)
        if len(clusters) == 1:
            for w in (w for cta in first.ctas for w in cta.warps):
                w.allocate_registers()
        for c in clusters:
            start_cluster(c)
        for c in clusters[1:]:  # one engine: operations a gang issues at once belong to all its clusters
            c.engine = clusters[0].engine
        dissolved = len(clusters) == 1
        gws = [] if dissolved else build_gang(clusters, whole_ctas=CTA_GANGS)
        while not dissolved and not all(g.done for g in gws):
            n, dissolved = step_gang(gws, clusters, QUANTUM)
            total += n
            launch.instructions += n
            check_budget(total, max_instructions)
            if on_round is not None:
                on_round()
        if not dissolved:
            for g in gws:  # the rows' warps are done too (their registers no longer matter)
                for w in g.rows:
                    w.done = True
        while not all(cluster_done(c) for c in clusters):
            for c in clusters:
                if not cluster_done(c):
                    n = step_cluster(c)
                    total += n
                    launch.instructions += n
            check_budget(total, max_instructions)
        for c in clusters:
            finish_cluster(c)
            if on_cluster_done is not None:
                on_cluster_done()
