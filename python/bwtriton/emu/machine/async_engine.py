"""Asynchronous operations of one cluster (TMA, cp.async(.bulk), tcgen05.mma/cp/commit) and when they complete.

Schedule "latest" (the default) completes every operation at the latest moment the PTX memory model allows:
only when a thread *observes* it -- waits on the mbarrier it completes (mbarrier.try_wait/test_wait), waits on
its bulk / cp.async group (cp.async.bulk.wait_group, cp.async.wait_group) -- or when every warp is stuck, or at
exit. Until then the shared-memory bytes it writes hold poison, the bytes it reads must not be overwritten, and
TMEM columns it writes are unreadable. Schedule "eager" completes each operation as it is issued (the optimistic
model, for speed comparisons). See docs/emulator_async.md.

The engine only keeps books; the families (tma.py, tcgen05.py, memops.py) describe each operation as an
`AsyncOp` and call the checks below before touching memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from .cells import Chunks, cells_get, cells_set
from ..errors import AsyncOverwriteError, MissingProxyFenceError, PoisonReadError, short

SCHEDULES = ("latest", "eager")


@dataclass(eq=False)
class AsyncOp:
    """One asynchronous operation. `writes`: (SharedMemory, index) poisoned until completion (index: a slice or
    an offset array); `reads`: (SharedMemory, lo, hi) offsets it reads until completion; `tmem`: (TensorMemory,
    columns) it writes; `tx` / `arrive`: mbarrier transaction bytes / arrivals delivered at completion;
    `finish`: deferred effects (data movement) run at completion; `observe`: the wait that completes it."""

    kind: str
    line: int
    text: str
    issuer: tuple
    finish: Optional[Callable[[], None]] = None
    writes: list = field(default_factory=list)
    reads: list = field(default_factory=list)
    tmem: list = field(default_factory=list)
    tx: list = field(default_factory=list)
    arrive: list = field(default_factory=list)
    covers: list = field(default_factory=list)
    tracked_by_commit: bool = False
    observe: str = ""
    seq: int = 0
    done: bool = False

    def describe(self) -> str:
        return f"the {self.kind} at PTX line {self.line} (`{short(self.text)}`)"


class AsyncEngine:
    """Pending asynchronous operations of one cluster, in issue order."""

    #: the timing model's recorder (bwtriton.emu.timing) when a launch runs with timing=True; None otherwise
    recorder = None

    def __init__(self, schedule: str = "latest") -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        self.eager = schedule == "eager"
        self.pending: dict[int, AsyncOp] = {}      # seq -> op, in issue order
        self.delivering: dict[int, AsyncOp] = {}   # the pending ops with mbarrier tx / arrivals
        self.tcgen05: dict[tuple, list] = {}       # issuer -> its tcgen05 MMA/cp ops not yet known complete
        self.seq = 0

    # -- issue / completion --------------------------------------------------------------------------------
    def issue(self, w, op: AsyncOp) -> AsyncOp:
        """Queue `op` (issued by warp `w`): poison what it writes, reserve what it reads."""
        for smem, idx in op.writes:
            lo, hi = _bounds(idx)
            self.check_write(smem, lo, hi, op.describe(), idx=idx)
        self.seq += 1
        op.seq = self.seq
        for smem, idx in op.writes:
            cells_set(smem.poison, idx, op.seq)
            smem.n_poison += 1
        for smem, lo, hi in op.reads:
            smem.async_reads.append((lo, hi, op))
        for tm, cols in op.tmem:
            tm.inflight[cols] += 1
        if op.kind == "tcgen05.commit":  # tracks every prior tcgen05 op of the issuing thread (warp here)
            mine = [p for p in self.tcgen05.get(op.issuer, ()) if not p.done]
            self.tcgen05[op.issuer] = mine
            op.covers = list(mine)
        if op.tracked_by_commit:
            self.tcgen05.setdefault(op.issuer, []).append(op)
        self.pending[op.seq] = op
        if op.tx or op.arrive:
            self.delivering[op.seq] = op
        w.launch.progress += 1
        if self.recorder is not None:
            self.recorder.on_issue(w, op)
        if self.eager:
            self.complete(op)
        return op

    def complete(self, op: AsyncOp) -> None:
        """Perform `op`'s deferred effects and release its books (covered ops first, in order)."""
        if op.done:
            return
        op.done = True
        if self.recorder is not None:
            self.recorder.before_complete(op)
        for c in op.covers:
            self.complete(c)
        if op.finish is not None:
            op.finish()
        for smem, idx in op.writes:
            # every byte still holds op.seq: issuing anything that writes poisoned bytes raises (check_write)
            cells_set(smem.poison, idx, 0)
            smem.n_poison -= 1
            if smem.any_unfenced:  # the bytes' newest writer is this operation, not an earlier generic store
                cells_set(smem.unfenced, idx, 0)
        for smem, lo, hi in op.reads:
            smem.async_reads = [r for r in smem.async_reads if r[2] is not op]
        for tm, cols in op.tmem:
            tm.inflight[cols] -= 1
            tm.writer_seq[cols] = op.seq
        seq = max([c.seq for c in op.covers] + [op.seq])
        for bar, nbytes in op.tx:
            bar.complete_tx(nbytes, seq)
        for bar in op.arrive:
            bar.arrive(1, seq)
        del self.pending[op.seq]
        self.delivering.pop(op.seq, None)
        if self.recorder is not None:
            self.recorder.after_complete(op)

    def settle(self, bar) -> bool:
        """A thread waits on mbarrier `bar` whose current phase is incomplete. Complete the pending operations
        that deliver to it if (and only if) their arrivals are enough to finish the phase -- the latest moment the
        waiter can be let through. Returns whether anything completed."""
        ops = [op for op in self.delivering.values()
               if any(b is bar for b, _ in op.tx) or any(b is bar for b in op.arrive)]
        if not ops:
            return False
        arrivals = sum(1 for op in ops for b in op.arrive if b is bar)
        if bar.pending - arrivals > 0:
            return False
        phase = bar.phase
        for op in ops:
            self.complete(op)
            if bar.phase != phase:
                break
        return True

    def complete_group(self, ops: list) -> None:
        for op in ops:
            self.complete(op)

    def complete_all(self) -> int:
        """Complete everything pending (every warp is stuck, or the cluster exited); returns how many."""
        n = len(self.pending)
        while self.pending:
            self.complete(next(iter(self.pending.values())))
        return n

    # -- checks ---------------------------------------------------------------------------------------------
    def check_async_read(self, smem, off: np.ndarray, reader: str) -> None:
        """The async proxy (`reader`) reads shared::cta offsets `off`: no pending writer, no unfenced generic
        write."""
        self.check_generic_read(smem, off, reader)
        line = smem.unfenced_line(off)
        if line:
            raise MissingProxyFenceError(
                f"{reader} reads shared memory written through the generic proxy at PTX line {line} with no "
                "fence.proxy.async in between: insert fence.proxy.async.shared::cta after the stores (before the "
                "barrier that hands the buffer to the issuing thread)")

    def check_generic_read(self, smem, off: np.ndarray, reader: str) -> None:
        seq = smem.poisoned_by(off)
        if seq:
            op = self.pending[seq]
            raise PoisonReadError(
                f"{reader} reads shared memory (offset 0x{_first(smem, off, seq):x} of CTA {smem.rank}) that "
                f"{op.describe()} is still writing: its completion was never observed, so the bytes are "
                f"undefined. {op.observe or 'Wait for its completion'} before the read")

    def check_write(self, smem, lo: int, hi: int, writer: str, idx=None) -> None:
        """Something writes shared::cta offsets [lo, hi): no pending async read or write may still use them."""
        op = smem.reader_of(lo, hi)
        if op is not None:
            raise AsyncOverwriteError(
                f"{writer} overwrites shared memory (offsets 0x{lo:x}..0x{hi - 1:x} of CTA {smem.rank}) that "
                f"{op.describe()} still reads: its completion was never observed (the stage was reused too "
                f"early). {self.observe_of(op)} before refilling the buffer")
        if smem.n_poison:
            seg = cells_get(smem.poison, idx if idx is not None else slice(lo, hi))
            seq = int(seg.max()) if seg.size else 0
            if seq:
                other = self.pending[seq]
                raise AsyncOverwriteError(
                    f"{writer} writes shared memory (offsets 0x{lo:x}..0x{hi - 1:x} of CTA {smem.rank}) that "
                    f"{other.describe()} is still writing. {other.observe or 'Wait for its completion'} first")

    def observe_of(self, op: AsyncOp) -> str:
        """How a kernel observes `op`'s completion (names the covering tcgen05.commit when there is one)."""
        for c in self.delivering.values():
            if c.kind == "tcgen05.commit" and op in c.covers:
                return (f"Wait on the mbarrier that {c.describe()} arrives on (mbarrier.try_wait.parity with the "
                        "right phase)")
        return op.observe or "Wait for its completion"


def _bounds(idx) -> tuple[int, int]:
    if isinstance(idx, slice):
        return idx.start, idx.stop
    if isinstance(idx, Chunks):
        return idx.bounds()
    return int(idx.min()), int(idx.max()) + 1


def _first(smem, off: np.ndarray, seq: int) -> int:
    hit = np.asarray(off).ravel()[smem.poison[np.asarray(off).ravel()] == seq]
    return int(hit[0]) if hit.size else 0


def issuer_of(w) -> tuple:
    """Who issued an operation: the warp, named with its CTA's id (the clusters of a gang share one engine, and a
    tcgen05.commit covers the earlier tcgen05 operations of its own issuing warp only)."""
    return (w.cta.ctaid, w.cta.rank, w.wid)


def engine_of(w) -> AsyncEngine:
    """The asynchronous engine of the warp's cluster."""
    return w.cta.cluster.engine
