"""Asynchronous operations of one cluster (TMA, cp.async(.bulk), tcgen05.mma/cp/commit) and when they complete.

Schedule "latest" (the default) completes every operation at the latest moment the PTX memory model allows:
only when a thread *observes* it -- waits on the mbarrier it completes (mbarrier.try_wait/test_wait), waits on
its bulk / cp.async group (cp.async.bulk.wait_group, cp.async.wait_group) -- or when every warp is stuck, or at
exit. Until then the shared-memory bytes it writes hold poison and TMEM columns it writes are unreadable.
Schedule "eager" completes each operation as it is issued (the optimistic model, for speed comparisons). See
docs/emulator_async.md.

Whether a warp may overwrite what an asynchronous operation read (a stage an MMA read, a TMA store's source, TMEM
columns a tcgen05.ld read), or read what one wrote (an accumulator), does not depend on when this schedule
happened to complete it: every warp carries a vector `Clock` of the asynchronous events whose completion it has
observed (through mbarrier waits, bar.sync, barrier.cluster, mbarrier arrivals, wait_group, tcgen05.wait::ld),
and each access checks the clock -- an operation completed because another warp waited on it is still unobserved
by this one.

The engine only keeps books; the families (tma.py, tcgen05.py, memops.py) describe each operation as an
`AsyncOp` and call the checks below before touching memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from .cells import Chunks, cells_get, cells_set
from .memory import word_cells
from ..errors import (AsyncOverwriteError, AsyncRaceError, MissingProxyFenceError, PoisonReadError,
                      UnorderedGenericStoreError,
                      UnobservedWriteReadError, short)

SCHEDULES = ("latest", "eager")


class Clock(dict):
    """A vector clock: event source -> the newest of its events whose completion this holder has observed. The
    sources: ("tc", issuer) counts a thread's tcgen05.mma/cp (a tcgen05.commit covers a prefix of them),
    ("bulk", issuer) its TMA stores / bulk copies to global (retired in order by wait_group), ("ld", warp) a
    warp's tcgen05.ld (completed by its tcgen05.wait::ld), ("st", warp, PTX line) a warp's tcgen05.st at that line
    (completed by its tcgen05.wait::st), ("tx", mbarrier) the TMA loads / bulk copies to shared
    completing on an mbarrier (in phase order), ("cp", warp) a warp's cp.async (retired in order by
    wait_group)."""

    __slots__ = ()

    def join(self, other: "Clock") -> None:
        """Observe everything `other` observed."""
        get = self.get
        for k, v in other.items():
            if get(k, 0) < v:
                self[k] = v

    def saw(self, key: tuple, idx: int) -> bool:
        return self.get(key, 0) >= idx


_NO_CLOCK = Clock()


def clock_of(w) -> Clock:
    """The clock of warp `w` (isa/sync.py declares it); a gang, which issues only what no pending or recorded
    access overlaps, has none."""
    return getattr(w, "observed", _NO_CLOCK)


@dataclass(eq=False)
class AsyncOp:
    """One asynchronous operation. `writes`: (SharedMemory, index) poisoned until completion (index: a slice or
    an offset array); `reads`: (SharedMemory, lo, hi) offsets it reads until completion; `tmem`: (TensorMemory,
    flat cells lane * 512 + column) it writes; `tx` / `arrive`: mbarrier transaction bytes / arrivals delivered
    at completion; `finish`: deferred effects (data movement) run at completion; `observe`: the wait that
    completes it."""

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
    #: a reader of what this operation writes must have observed its completion (TMA load, bulk copy, cp.async)
    reader_must_observe: bool = False
    observe: str = ""
    seq: int = 0
    done: bool = False
    #: the event source counting this operation and its number there (observing it: clock[key] >= idx)
    key: tuple = ()
    idx: int = 0
    #: what a waiter on the mbarrier this operation delivers to observes: the issuer's clock at issue and, for a
    #: tcgen05.commit, the issuer's tcgen05 operations up to the commit
    clock: Optional[Clock] = None

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
        self.counter: dict[tuple, int] = {}        # event source -> its newest event number
        self.sources: list[tuple] = [()]          # TMEM writer codes: source number << 32 | event number
        self._source_no: dict[tuple, int] = {}
        self.barrier_clocks: dict[int, list] = {}  # id(mbarrier) -> [mbarrier, arrivals' clock, completed clock]
        self.commits: dict[tuple, list] = {}       # ("tc", issuer) -> its recent commits: (covered up to, text)
        self.st_keys: dict[tuple, set] = {}        # issuer -> its ("st", issuer, line) sources (tcgen05.wait::st)
        #: id(shared memory) -> [memory, {(lo, hi, ("st", warp)): (epoch, line)}]: generic stores of a CTA with
        #: several warps or of a multi-CTA cluster, which another warp's or CTA's async proxy may read only after
        #: observing them
        self.peer_stores: dict[int, list] = {}
        self._store_epoch: dict[tuple, int] = {}   # ("st", warp) -> the epoch of its newest recorded store
        #: writer code -> the asynchronous write it names (the newest ones, for messages)
        self.write_ops: dict[int, AsyncOp] = {}

    def next_event(self, key: tuple) -> int:
        n = self.counter.get(key, 0) + 1
        self.counter[key] = n
        return n

    def writer_code(self, key: tuple, idx: int) -> int:
        """One int64 naming event `idx` of source `key` (what TMEM keeps per column for its newest writer)."""
        no = self._source_no.get(key)
        if no is None:
            no = self._source_no[key] = len(self.sources)
            self.sources.append(key)
        return no << 32 | idx

    def writer_of(self, code: int) -> tuple[tuple, int]:
        return self.sources[code >> 32], code & 0xFFFFFFFF

    # -- generic stores read by another CTA ------------------------------------------------------------------
    def release(self, w) -> Clock:
        """Warp `w` arrives on a barrier (a release): its generic stores so far become observable through it.
        Returns its clock, to be joined into the barrier."""
        clock = clock_of(w)
        if self.peer_stores and clock is not _NO_CLOCK:
            key = ("st", issuer_of(w))
            if self.counter.get(key, 0) < self._store_epoch.get(key, 0):
                clock[key] = self.next_event(key)
        return clock

    def record_peer_store(self, w, smem, lo: int, hi: int, line: int) -> None:
        """Warp `w` stored into [lo, hi) of its CTA's `smem` (of a CTA with several warps, or of a multi-CTA
        cluster): remember by whom and in which epoch (its next release), for an async read by another warp or
        CTA (check_peer_read). The newest MAX_READ_RECORDS ranges are kept."""
        key = ("st", issuer_of(w))
        epoch = self.counter.get(key, 0) + 1
        self._store_epoch[key] = epoch
        books = self.peer_stores.get(id(smem))
        if books is None or books[0] is not smem:
            books = self.peer_stores[id(smem)] = [smem, {}]
        recs = books[1]
        recs.pop((lo, hi, key), None)   # re-inserted last: the dict keeps the newest stores in order
        recs[(lo, hi, key)] = (epoch, line)
        if len(recs) > MAX_READ_RECORDS:
            del recs[next(iter(recs))]

    def check_peer_read(self, w, smem, lo: int, hi: int, reader: str) -> None:
        """Warp `w` makes the async proxy read [lo, hi) of `smem`: every generic store there by another warp (of
        this CTA, or of another CTA of the cluster) must have been released by its warp and observed by `w` (a
        CTA barrier, barrier.cluster, or an mbarrier the storing warp arrives on and `w` waits on)."""
        books = self.peer_stores.get(id(smem))
        if books is None or books[0] is not smem:
            return
        clock = clock_of(w)
        own = ("st", issuer_of(w))
        peer = smem is not w.cta.smem
        for (r_lo, r_hi, key), (epoch, line) in books[1].items():
            if lo < r_hi and r_lo < hi and key != own and not clock.saw(key, epoch):
                span = f"offsets 0x{max(lo, r_lo):x}..0x{min(hi, r_hi) - 1:x}"
                if peer:
                    raise AsyncRaceError(
                        f"{reader} reads shared memory of CTA {smem.rank} ({span}) that warp {key[1][2]} of that "
                        f"CTA stored through the generic proxy at PTX line {line}, and the issuing thread never "
                        "observed those stores: order them before the read across the cluster "
                        "(barrier.cluster.arrive.release + barrier.cluster.wait.acquire, or an mbarrier the storing "
                        "warps arrive on and the issuing thread waits on)")
                raise UnorderedGenericStoreError(
                    f"{reader} reads shared memory ({span}) that warp {key[1][2]} stored through the generic proxy "
                    f"at PTX line {line}, and the issuing warp {w.wid} never synchronised with that warp after the "
                    "store: a fence.proxy.async alone does not order another warp's stores; put a CTA barrier "
                    "(bar.sync) between the fenced stores and the issue")

    # -- mbarrier clocks -----------------------------------------------------------------------------------
    def _bar_clocks(self, bar) -> list:
        got = self.barrier_clocks.get(id(bar))
        if got is None or got[0] is not bar:
            got = self.barrier_clocks[id(bar)] = [bar, Clock(), Clock()]
        return got

    def deliver(self, bar, clock: Clock, arrivals: int = 0, tx: int = 0) -> None:
        """`arrivals` arrivals and `tx` completed transaction bytes on `bar`, by a holder of `clock`: a waiter
        that sees the phase complete observes every clock delivered to it (and to its earlier phases)."""
        books = self._bar_clocks(bar)
        books[1].join(clock)
        phase = bar.phase
        if tx:
            bar.complete_tx(tx)
        if arrivals:
            bar.arrive(arrivals)
        if bar.phase != phase:
            books[2].join(books[1])
            books[1] = Clock()

    def observe_barrier(self, w, bar) -> None:
        """Warp `w` saw a completed phase of `bar`."""
        got = self.barrier_clocks.get(id(bar))
        if got is not None and got[0] is bar:
            clock_of(w).join(got[2])

    # -- issue / completion --------------------------------------------------------------------------------
    def issue(self, w, op: AsyncOp) -> AsyncOp:
        """Queue `op` (issued by warp `w`): poison what it writes, record what it reads."""
        clock = clock_of(w)
        for smem, idx in op.writes:
            lo, hi = _bounds(idx)
            self.check_write(smem, lo, hi, op.describe(), idx=idx, by=w)
        self.seq += 1
        op.seq = self.seq
        if op.tracked_by_commit:
            op.key = ("tc", op.issuer)
        elif op.reads:
            op.key = ("bulk", op.issuer)
        elif op.reader_must_observe:
            # a waiter on the mbarrier observes every earlier load completing on it; cp.async retire per warp
            # (a gang's: per warp id, observed by each CTA's warp at its wait_group)
            op.key = ("tx", id(op.tx[0][0])) if op.tx else ("cp", op.issuer)
        if op.key:
            op.idx = self.next_event(op.key)
        if op.tx or op.arrive:
            op.clock = Clock(clock)
            if op.reader_must_observe and op.key:
                op.clock[op.key] = op.idx
            if op.kind == "tcgen05.commit":
                tc = ("tc", op.issuer)
                op.clock[tc] = max(op.clock.get(tc, 0), self.counter.get(tc, 0))
                books = self.commits.setdefault(tc, [])
                books.append((self.counter.get(tc, 0), op.describe()))
                del books[:-64]
        for smem, idx in op.writes:
            cells_set(smem.poison, idx, op.seq)
            smem.n_poison += 1
        if op.reader_must_observe:
            self._record_write(op)
        for smem, lo, hi in op.reads:
            _record_read(smem, lo, hi, op)
        for tm, cells in op.tmem:
            tm.inflight[cells] += 1
            tm.writer_seq[cells] = self.writer_code(op.key, op.idx)
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
        """Perform `op`'s deferred effects and release its books (covered ops first, in order). What it read
        stays recorded: a later writer must still have observed this completion (check_write)."""
        if op.done:
            return
        op.done = True
        if self.recorder is not None:
            self.recorder.before_complete(op)
        for c in op.covers:
            self.complete(c)
        if op.finish is not None:
            op.finish()
            op.finish = None  # its captured data is not needed again (write_ops may keep the op for messages)
        for smem, idx in op.writes:
            # every byte still holds op.seq: issuing anything that writes poisoned bytes raises (check_write)
            cells_set(smem.poison, idx, 0)
            smem.n_poison -= 1
            if smem.any_unfenced:  # the bytes' newest writer is this operation, not an earlier generic store
                cells_set(smem.unfenced, idx, 0)
        for tm, cells in op.tmem:
            tm.inflight[cells] -= 1
        for bar, nbytes in op.tx:
            self.deliver(bar, op.clock, tx=nbytes)
        for bar in op.arrive:
            self.deliver(bar, op.clock, arrivals=1)
        del self.pending[op.seq]
        self.delivering.pop(op.seq, None)
        if self.recorder is not None:
            self.recorder.after_complete(op)

    def _record_write(self, op: AsyncOp) -> None:
        """Name `op` as the newest writer of the bytes it writes."""
        code = self.writer_code(op.key, op.idx)
        self.write_ops[code] = op
        if len(self.write_ops) > MAX_WRITE_RECORDS:
            del self.write_ops[next(iter(self.write_ops))]
        for smem, idx in op.writes:
            smem.set_async_writer(idx, code)

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

    def check_observed_writes(self, w, smem, cells, reader: str, span: Optional[tuple[int, int]] = None) -> None:
        """Warp `w` (the issuing thread's, for an asynchronous reader) reads shared::cta `cells` (a slice or an
        offset array; `span`: their [lo, hi) when the caller knows it): the newest asynchronous write of each
        byte must be one whose completion `w` observed -- whenever this schedule completed it (a completed load
        that another warp waited on is still unobserved here). Call it after the poison check: a pending writer
        is reported as a PoisonReadError."""
        clock = clock_of(w)
        if clock is _NO_CLOCK:
            return
        lo, hi = span if span is not None else _bounds(cells)
        # the words over the span are a superset of those read (one slice, no gather; the MMAs of one stage read
        # the same granules: their summary is kept until the next asynchronous write); only a miss there needs the
        # exact words
        w_lo, w_hi = (lo & ~1023) >> 2, ((hi + 1023) & ~1023) >> 2  # 1 KiB granules: a swizzle atom, or more
        summary = smem.writer_summary.get((w_lo, w_hi))
        if summary is None:
            summary = smem.writer_summary[(w_lo, w_hi)] = self._newest_per_source(smem.async_writer[w_lo:w_hi])
        if all(clock.get(key, 0) >= idx for key, idx in summary):
            return
        words = word_cells(cells)
        seg = cells_get(smem.async_writer, words)
        code = self._unobserved(clock, seg)
        if not code:
            return
        op = self.write_ops.get(code)
        what = op.describe() if op is not None else "an asynchronous write"
        how = op.observe if op is not None and op.observe else "Wait for its completion"
        flat = np.arange(words.start, words.stop) if isinstance(words, slice) else \
            words.ravel() if isinstance(words, Chunks) else np.asarray(words).ravel()
        first = 4 * int(flat[seg.ravel() == code][0])
        raise UnobservedWriteReadError(
            f"{reader} reads shared memory (offset 0x{first:x} of CTA {smem.rank}) that {what} wrote, and this "
            "thread never observed that write completing (the wait that orders it was skipped or passed on a "
            f"stale phase, and no barrier handed it on): on hardware the bytes may still be in flight. {how} "
            "in the reading thread (or in a thread that hands it on through an mbarrier arrive or a barrier) "
            "before the read")

    def _newest_per_source(self, codes: np.ndarray) -> list[tuple[tuple, int]]:
        """(source, newest event) of every writer source among `codes` (each source's events are observed in
        order: observing the newest covers the rest)."""
        newest = int(codes.max()) if codes.size else 0
        if not newest:
            return []
        oldest = int(codes.min())
        if not oldest:
            oldest = int(codes[codes != 0].min())
        if oldest >> 32 == newest >> 32:
            return [self.writer_of(newest)]
        src = codes >> 32
        present = np.flatnonzero(np.bincount(src, minlength=1)).tolist()
        return [self.writer_of(int(codes[src == n].max())) for n in present if n]

    def _unobserved(self, clock: Clock, codes: np.ndarray) -> int:
        """The newest writer code among `codes` whose event `clock` has not observed (0: none)."""
        newest = int(codes.max()) if codes.size else 0
        if not newest:
            return 0
        oldest = int(codes.min())
        if not oldest:
            oldest = int(codes[codes != 0].min())
        lo_src, hi_src = oldest >> 32, newest >> 32
        if lo_src == hi_src:  # one source (a TMA ring's mbarrier, one warp's cp.async): its newest event decides
            key, idx = self.writer_of(newest)
            return 0 if clock.get(key, 0) >= idx else newest
        # several (cp.async of several warps: numbered together, so the range is short): each against its own
        seen = np.array([clock.get(self.sources[n], 0) for n in range(lo_src, hi_src + 1)], dtype=np.int64)
        flat = codes.ravel()
        src = (flat >> 32) - lo_src
        missed = (flat & 0xFFFFFFFF) > seen[np.clip(src, 0, hi_src - lo_src)]
        missed &= flat != 0
        return int(flat[missed].max()) if missed.any() else 0

    def check_generic_read(self, smem, off: np.ndarray, reader: str) -> None:
        seq = smem.poisoned_by(off)
        if seq:
            op = self.pending[seq]
            raise PoisonReadError(
                f"{reader} reads shared memory (offset 0x{_first(smem, off, seq):x} of CTA {smem.rank}) that "
                f"{op.describe()} is still writing: its completion was never observed, so the bytes are "
                f"undefined. {op.observe or 'Wait for its completion'} before the read")

    def check_write(self, smem, lo: int, hi: int, writer: str, idx=None, by=None) -> None:
        """Warp `by` makes `writer` write shared::cta offsets [lo, hi) (None, or a gang: writes only where nothing
        is recorded): every asynchronous read of them must have completed and that completion must have been
        observed by the writer; no pending asynchronous write may still own them."""
        if by is not None and getattr(smem, "async_reads", None):  # a gang's stacked memory records none
            self._check_reads(smem, lo, hi, writer, by)
        if smem.n_poison:
            seg = cells_get(smem.poison, idx if idx is not None else slice(lo, hi))
            seq = int(seg.max()) if seg.size else 0
            if seq:
                other = self.pending[seq]
                raise AsyncOverwriteError(
                    f"{writer} writes shared memory (offsets 0x{lo:x}..0x{hi - 1:x} of CTA {smem.rank}) that "
                    f"{other.describe()} is still writing. {other.observe or 'Wait for its completion'} first")

    def _check_reads(self, smem, lo: int, hi: int, writer: str, by) -> None:
        clock = clock_of(by)
        if clock is _NO_CLOCK:
            return
        kept = []
        for rec in smem.async_reads:
            r_lo, r_hi, op = rec
            if not (lo < r_hi and r_lo < hi):
                kept.append(rec)
                continue
            if not op.done or not clock.saw(op.key, op.idx):
                when = ("its completion was never observed" if not op.done else
                        "it has completed, but this warp never observed that completion (another warp's wait did)")
                raise AsyncOverwriteError(
                    f"{writer} overwrites shared memory (offsets 0x{max(lo, r_lo):x}..0x{min(hi, r_hi) - 1:x} of "
                    f"CTA {smem.rank}) that {op.describe()} still reads as far as this warp can tell: {when}, "
                    "so on hardware the read may still be in progress (the stage was reused too early). "
                    f"{self.observe_of(op)} in the writing thread "
                    "(or in a thread that hands it on through an mbarrier arrive or a barrier) before refilling "
                    "the buffer")
            # the record goes once no writer can still miss it: this write covers it whole (a later writer is
            # ordered after this one or races with it), or every warp that can still write observed it
            if not (lo <= r_lo and r_hi <= hi) and not _seen_by_all(by, op):
                kept.append(rec)
        smem.async_reads = kept

    def observe_of(self, op: AsyncOp) -> str:
        """How a kernel observes `op`'s completion (names the first tcgen05.commit tracking it)."""
        for c in self.commits.get(op.key, ()):
            if c[0] >= op.idx:
                return (f"Wait on the mbarrier that {c[1]} arrives on (mbarrier.try_wait.parity with the right "
                        "phase)")
        return op.observe or "Wait for its completion"


#: recorded asynchronous reads of one shared memory beyond which reads no writer can reach any more are dropped
MAX_READ_RECORDS = 256
#: asynchronous writes kept to name in messages (older ones are named by their event only)
MAX_WRITE_RECORDS = 4096


def _record_read(smem, lo: int, hi: int, op: AsyncOp) -> None:
    """Remember that `op` reads [lo, hi) of `smem`. A newer read of the same bytes by the same source subsumes an
    older one (observing the newer implies observing the older: each source completes in order)."""
    recs = [r for r in smem.async_reads if not (r[0] == lo and r[1] == hi and r[2].key == op.key)]
    recs.append((lo, hi, op))
    if len(recs) > MAX_READ_RECORDS:
        recs = recs[-MAX_READ_RECORDS:]
    smem.async_reads = recs


def _seen_by_all(w, op: AsyncOp) -> bool:
    """Whether every warp of `w`'s cluster still running has observed `op`'s completion."""
    for cta in w.cta.cluster.ctas:
        for other in cta.warps:
            if not other.done and not clock_of(other).saw(op.key, op.idx):
                return False
    return True


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
