"""The timing recorder: per-warp clocks kept while the emulator runs a launch (timing on only).

Each instruction of the kernel image is wrapped (`instrument`) so that, after its handler ran, the executing
warp's clock advances by the instruction's issue cost, and a wait that passes moves the clock to the moment what it
waited for happened. Asynchronous operations (TMA, tcgen05.mma/cp/commit, cp.async) get their completion time when
they are issued (`on_issue`, called by machine/async_engine.py): they queue FIFO on the issuing SM's TMA unit or
tensor core. Synchronisation objects carry times: an mbarrier phase completes at its latest arrival (a warp's
arrive, an operation's complete_tx / commit arrival), a bar.sync / barrier.cluster generation at its latest
arriving warp, plus the table's latency. Nothing here changes what the kernel computes: the handlers run
unchanged and only the wrapper's books differ."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..machine.cells import Chunks
from ..machine.program import YIELD, address_reader
from ..machine.memory import split_cluster_address
from .costs import B200, MMA_KINDS, B200Costs

_U32 = np.dtype(np.uint32)

# instruction classes (the per-warp retired-instruction counts use these names)
ALU, TMA, MMA, TMEM_LD, TMEM_ST, TMEM_WAIT, MBAR_WAIT, MBAR_ARRIVE, BAR, CLUSTER_ARRIVE, CLUSTER_WAIT, \
    CLUSTER_SYNC, GLOBAL_ST, GLOBAL_LD, BULK_WAIT, CP_WAIT = (
        "alu", "tma", "tcgen05.mma/cp/commit", "tcgen05.ld", "tcgen05.st", "tcgen05.wait", "mbarrier wait",
        "mbarrier arrive", "bar.sync", "cluster arrive", "cluster wait", "cluster sync", "st.global",
        "ld.global", "bulk wait", "cp.async wait")

# stall reasons of the timeline
WAIT_TMA, WAIT_MMA, WAIT_BARRIER, WAIT_CLUSTER, WAIT_TMEM, BUSY = (
    "waiting on TMA", "waiting on MMA", "waiting on a barrier", "waiting on the cluster barrier",
    "waiting on tcgen05.ld", "issuing")


def classify(ins) -> str:
    """The timing class of one PTX instruction."""
    op = ins.opcode
    if op.startswith("cp.async.bulk.tensor") or op.startswith("cp.async.bulk") and not op.endswith("group"):
        return TMA
    if op.startswith("cp.async.bulk.wait_group"):
        return BULK_WAIT
    if op.startswith("cp.async.wait"):
        return CP_WAIT
    if op in ("tcgen05.mma", "tcgen05.cp", "tcgen05.commit") or op.startswith("tcgen05.mma"):
        return MMA
    if op == "tcgen05.ld":
        return TMEM_LD
    if op == "tcgen05.st":
        return TMEM_ST
    if op == "tcgen05.wait":
        return TMEM_WAIT
    if op in ("mbarrier.try_wait", "mbarrier.test_wait"):
        return MBAR_WAIT
    if op.startswith("mbarrier.arrive") or op in ("mbarrier.expect_tx", "mbarrier.complete_tx"):
        return MBAR_ARRIVE
    if op in ("bar", "barrier", "bar.sync", "barrier.sync", "bar.arrive", "barrier.arrive", "bar.red"):
        return BAR
    if op == "barrier.cluster":
        mods = ins.modifiers
        return CLUSTER_ARRIVE if "arrive" in mods else CLUSTER_WAIT if "wait" in mods else CLUSTER_SYNC
    if op in ("st", "red", "atom") and "global" in ins.modifiers:
        return GLOBAL_ST
    if op == "ld" and "global" in ins.modifiers:
        return GLOBAL_LD
    return ALU


@dataclass
class WarpClock:
    """One warp's clock, its retired instruction classes and its timeline segments (start, end, state)."""

    name: str
    t: float = 0.0
    counts: dict = field(default_factory=dict)
    segments: list = field(default_factory=list)
    awaited: object = None     # bar.sync / cluster generation this warp waits for
    ld_done: float = 0.0       # when its outstanding tcgen05.ld data arrives

    def busy(self, cycles: float) -> None:
        self._add(self.t, self.t + cycles, BUSY)
        self.t += cycles

    def stall_until(self, t: float, reason: str) -> None:
        if t > self.t:
            self._add(self.t, t, reason)
            self.t = t

    def _add(self, a: float, b: float, state: str) -> None:
        if self.segments and self.segments[-1][2] == state and self.segments[-1][1] == a:
            self.segments[-1] = (self.segments[-1][0], b, state)
        else:
            self.segments.append((a, b, state))


@dataclass
class OpTiming:
    """When an asynchronous operation started and finished (cycles), what it moved and computed."""

    kind: str
    issue: float
    start: float
    end: float
    nbytes: int = 0
    flops: int = 0
    consumed_by: str = ""      # the warp whose wait observed its completion (filled in at completion)


class TimingRecorder:
    """Clocks, resource queues and synchronisation times for one launch. Created by `emu.run(timing=True)`."""

    def __init__(self, costs: B200Costs = B200, active_sms: int = 0) -> None:
        self.c = costs
        self.active_sms = active_sms or int(costs.v("sm_count"))
        self.warps: dict = {}          # Warp -> WarpClock
        self.free: dict = {}           # (CTA id, resource) -> cycle the unit is free
        self.ops: list = []            # OpTiming of every asynchronous operation, in issue order
        self.pending: dict = {}        # id(AsyncOp) -> (OpTiming, its cluster) until it completes
        self.bar_acc: dict = {}        # id(mbarrier) -> (latest arrival time of its current phase, by what)
        self.bar_state: dict = {}      # id(mbarrier) -> (phase, pending, tx) last seen
        self.bar_done: dict = {}       # (id(mbarrier), phase) -> (completion time, reason)
        self.gen_acc: dict = {}        # (object id, generation) -> latest arrival time
        self.gen_done: dict = {}       # (object id, generation) -> release time
        self.current = None            # the warp whose instruction is executing
        self.clusters: list = []       # every cluster seen (per-cluster time = its warps' latest clock)
        self._wrapped: dict = {}       # id(prog.code) -> instrumented code
        self.completed_by: dict = {}   # Warp -> op timings its current instruction completed

    # -- the machine's view -----------------------------------------------------------------------------------
    def instrument(self, cluster) -> None:
        """Point every warp of `cluster` at the timed version of its code."""
        self.clusters.append(cluster)
        for cta in cluster.ctas:
            code = self._wrapped.get(id(cta.prog.code))
            if code is None:
                code = self._wrapped[id(cta.prog.code)] = [
                    self._wrap(h, ins, cta.prog) for h, ins in zip(cta.prog.code, cta.prog.fn.instructions)]
            for w in cta.warps:
                w.code = code
                self.warps[w] = WarpClock(f"cluster {cluster.cluster_id} CTA rank {cta.rank} warp {w.wid}")

    def _wrap(self, handler: Callable, ins, prog) -> Callable:
        cls = classify(ins)
        cost = self._issue_cost(cls, ins)
        sync = self._sync_reader(cls, ins, prog)
        rec = self

        def timed(w):
            wc = rec.warps[w]
            eng = w.cta.cluster.engine
            if eng.recorder is not rec:
                eng.recorder = rec
            rec.current = w
            pre = sync[0](w, wc) if sync else None
            r = handler(w)
            if r == YIELD:
                if sync:
                    sync[1](w, wc, pre, True)
                return r
            wc.counts[cls] = wc.counts.get(cls, 0) + 1
            if sync:
                sync[1](w, wc, pre, False)
            elif cls in (MBAR_ARRIVE, TMA, MMA):
                rec._note_barriers(w.cta.cluster, wc.t)
            rec.completed_by.pop(w, None)
            wc.busy(cost)
            return r
        return timed

    def _issue_cost(self, cls: str, ins) -> float:
        c = self.c
        if cls == TMEM_LD:
            return max(c.v("alu_cycles"), _tmem_bytes(ins) / c.v("tcgen05_ld_bytes_per_cycle"))
        if cls == TMEM_ST:
            return max(c.v("alu_cycles"), _tmem_bytes(ins) / c.v("tcgen05_st_bytes_per_cycle"))
        if cls == GLOBAL_ST:
            return max(c.v("alu_cycles"), 32 * _vector_bytes(ins) / c.v("global_store_bytes_per_cycle"))
        if cls == MMA and ins.opcode.startswith("tcgen05.mma"):
            return c.v("mma_issue_cycles")
        return c.v("alu_cycles")

    # -- synchronisation objects ------------------------------------------------------------------------------
    def _sync_reader(self, cls: str, ins, prog):
        """(before, after) callbacks for the instructions whose passing depends on another agent's time."""
        if cls == MBAR_WAIT:
            rd = address_reader(ins.operands[1], prog, ins)
            return (lambda w, wc: None, lambda w, wc, pre, blocked: self._mbar_wait(w, wc, rd, blocked))
        if cls == BAR:
            ops = ins.operands
            rd_id = prog.src(ops[0], _U32, ins) if ops else (lambda w: 0)
            return (lambda w, wc: self._bar_before(w, rd_id), self._bar_after)
        if cls in (CLUSTER_ARRIVE, CLUSTER_WAIT, CLUSTER_SYNC):
            return (lambda w, wc: (w.cluster_gen, w.cta.cluster.bar_gen), self._cluster_after)
        if cls == TMEM_WAIT:
            return (lambda w, wc: None, lambda w, wc, pre, blocked: wc.stall_until(wc.ld_done, WAIT_TMEM))
        if cls == TMEM_LD:
            return (lambda w, wc: None, self._tmem_ld_after)
        if cls in (BULK_WAIT, CP_WAIT):
            return (lambda w, wc: None, self._group_wait_after)
        return None

    def _tmem_ld_after(self, w, wc, pre, blocked) -> None:
        wc.ld_done = wc.t + self.c.v("tcgen05_ld_latency_cycles")

    def _group_wait_after(self, w, wc, pre, blocked) -> None:
        if blocked:
            return
        self._note_barriers(w.cta.cluster, wc.t)
        # the group's operations were completed by this wait (engine hook): the latest of their ends
        ends = [o.end for o in self.completed_by.get(w, [])]
        if ends:
            wc.stall_until(max(ends), WAIT_TMA)

    def _mbar_wait(self, w, wc, rd, blocked: bool) -> None:
        self._note_barriers(w.cta.cluster, wc.t)
        if blocked:
            return
        addrs = rd(w)
        lanes = w.mask if w.mask is not None else slice(None)
        a = np.asarray(addrs)[lanes]
        if not np.size(a):
            return
        rank, local = split_cluster_address(int(np.asarray(a).flat[0]), w.cta.rank)
        bar = w.cta.cluster.ctas[rank].mbarriers.get(local)
        if bar is None:
            return
        done = self.bar_done.get((id(bar), bar.phase))
        if done is not None:
            wc.stall_until(done[0] + self.c.v("mbarrier_latency_cycles"), done[1])

    def _bar_before(self, w, rd_id):
        bid = int(np.asarray(rd_id(w)).flat[0])
        b = w.cta.barriers.get(bid)
        return bid, (b.gen if b is not None else 0), w.bar_wait

    def _bar_after(self, w, wc, pre, blocked: bool) -> None:
        bid, gen, waiting = pre
        key = (id(w.cta), bid)
        if waiting is None:  # this execution is the warp's arrival
            self.gen_acc[key, gen] = max(self.gen_acc.get((key, gen), 0.0), wc.t)
            b = w.cta.barriers.get(bid)
            if b is not None and b.gen > gen:
                self.gen_done[key, gen] = self.gen_acc.pop((key, gen)) + self.c.v("bar_sync_latency_cycles")
        else:
            gen = waiting[1]
        if not blocked and (key, gen) in self.gen_done:
            wc.stall_until(self.gen_done[key, gen], WAIT_BARRIER)

    def _cluster_after(self, w, wc, pre, blocked: bool) -> None:
        my_gen, cl_gen = pre
        cl = w.cta.cluster
        key = id(cl)
        if my_gen is None and w.cluster_gen is not None or (my_gen is None and cl.bar_gen > cl_gen):
            # an arrival (arrive, or the arrive half of a sync)
            self.gen_acc[key, cl_gen] = max(self.gen_acc.get((key, cl_gen), 0.0), wc.t)
            if cl.bar_gen > cl_gen:
                self.gen_done[key, cl_gen] = (self.gen_acc.pop((key, cl_gen))
                                              + self.c.v("cluster_barrier_latency_cycles"))
            my_gen = cl_gen
        if not blocked and w.cluster_gen is None and my_gen is not None and (key, my_gen) in self.gen_done:
            wc.stall_until(self.gen_done[key, my_gen], WAIT_CLUSTER)

    def _note_barriers(self, cluster, t: float, reason: str = WAIT_BARRIER) -> None:
        """Attribute every change of the cluster's mbarriers since the last look to an agent at time `t`."""
        for cta in cluster.ctas:
            for bar in cta.mbarriers.values():
                k = id(bar)
                st = (bar.phase, bar.pending, bar.tx)
                old = self.bar_state.get(k)
                if old == st:
                    continue
                self.bar_state[k] = st
                if old is None:
                    continue
                acc_t, acc_r = self.bar_acc.get(k, (0.0, reason))
                if t >= acc_t:
                    acc_t, acc_r = t, reason
                if st[0] > old[0]:
                    self.bar_done[k, st[0]] = (acc_t, acc_r)
                    self.bar_acc.pop(k, None)
                else:
                    self.bar_acc[k] = (acc_t, acc_r)

    # -- the async engine's hooks -----------------------------------------------------------------------------
    def on_issue(self, w, op) -> None:
        """An asynchronous operation was issued by warp `w`: queue it on its SM's unit and time its completion."""
        wc = self.warps.get(w)
        t = wc.t if wc is not None else 0.0
        c = self.c
        cta = id(w.cta)
        kind = op.kind
        if kind == "tcgen05.commit":
            covered = [self.pending.get(id(p), (None,))[0] for p in op.covers]
            end = max([o.end for o in covered if o is not None] + [t]) + c.v("mma_latency_cycles")
            timing = OpTiming(kind, t, t, end)
        elif kind.startswith("tcgen05"):
            flops, rate = _mma_flops(op, c)
            nbytes = 0
            if kind == "tcgen05.cp":
                nbytes = _op_bytes(op)
                busy = nbytes / c.v("tcgen05_cp_bytes_per_cycle")
            else:
                busy = flops / rate
                if "cta_group::2" in op.text:  # both SMs of the pair compute a 128-row half each
                    flops *= 2
            start = max(t, self.free.get((cta, "tensor"), 0.0))
            self.free[cta, "tensor"] = start + busy
            timing = OpTiming(kind, t, start, start + busy, nbytes, flops)
        elif kind == "clusterlaunchcontrol.try_cancel":
            timing = OpTiming(kind, t, t, t + c.v("clc_latency_cycles"))
        else:  # TMA loads/stores, bulk copies, cp.async: bytes through the SM's share of L2
            nbytes = _op_bytes(op)
            per_sm = min(c.v("tma_bytes_per_cycle_per_sm"),
                         c.v("l2_bytes_per_s") / self.active_sms / c.v("sm_clock_hz"))
            start = max(t, self.free.get((cta, "tma"), 0.0))
            busy = nbytes / per_sm
            self.free[cta, "tma"] = start + busy
            timing = OpTiming(kind, t, start, start + busy + c.v("tma_latency_cycles"), nbytes)
        self.ops.append(timing)
        self.pending[id(op)] = (timing, w.cta.cluster)

    def before_complete(self, op) -> None:
        """Before `op` delivers its arrivals: what the running instruction changed so far is the warp's doing."""
        w = self.current
        entry = self.pending.get(id(op))
        if w is not None and entry is not None and w.cta.cluster is entry[1]:
            self._note_barriers(entry[1], self.warps[w].t)

    def after_complete(self, op) -> None:
        """`op` delivered its arrivals: they happened at its completion time; the running wait consumed it."""
        timing, cluster = self.pending.pop(id(op), (None, None))
        if timing is None:
            return
        reason = WAIT_MMA if op.kind.startswith("tcgen05") else WAIT_TMA
        self._note_barriers(cluster, timing.end, reason)
        w = self.current
        if w is not None and w.cta.cluster is cluster:
            timing.consumed_by = self.warps[w].name
            self.completed_by.setdefault(w, []).append(timing)


def _op_bytes(op) -> int:
    n = sum(nb for _, nb in op.tx)
    if n:
        return n
    for _, idx in op.writes:  # the cells written (a swizzled write spans more offsets than it writes)
        if isinstance(idx, slice):
            n += idx.stop - idx.start
        elif isinstance(idx, Chunks):
            n += idx.first.size * idx.size
        else:
            n += int(np.size(idx))
    for _, lo, hi in op.reads:
        n += hi - lo
    return n


_KIND = re.compile(r"kind::(\w+)")


def _mma_flops(op, c: B200Costs) -> tuple[int, float]:
    """FLOPs of one SM's part of a tcgen05.mma (2 x 128 x N x K: a cta_group::2 MMA is timed on the leader's
    half) and the tensor-core rate of its kind. N comes from the TMEM columns it writes (an fp32 accumulator: one per column)."""
    m = _KIND.search(op.text)
    entry, k = MMA_KINDS.get(m.group(1) if m else "f16", MMA_KINDS["f16"])
    n = 0
    if op.tmem:
        _, cells = op.tmem[0]   # flat TMEM cells (lane * 512 + column): N is the number of distinct columns
        n = int(np.unique(np.asarray(cells) % 512).size)
    return 2 * 128 * max(n, 1) * k, c.v(entry)


def _vector_bytes(ins) -> int:
    width = 1
    for m in ins.modifiers:
        if m in ("v2", "v4", "v8"):
            width = int(m[1:])
    bits = next((int(t[1:]) for t in ins.types if t[1:].isdigit()), 32)
    return width * bits // 8


def _tmem_bytes(ins) -> int:
    """Bytes a tcgen05.ld / st moves for one warp: 32 lanes x its 32-bit registers."""
    vec = next((o for o in ins.operands if o.kind == "vec"), None)
    nregs = len(vec.items) if vec is not None else 1
    return 32 * 4 * nregs
