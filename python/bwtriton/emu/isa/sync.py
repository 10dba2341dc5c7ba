"""Control flow and synchronisation: bra / brx.idx / ret, bar.sync, barrier.cluster, mbarrier.*, elect, shfl,
vote, redux, fences (ordering is implicit in a sequential emulator) and other warp-level operations."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ...ptx.ir import Instruction
from ..machine.async_engine import Clock, clock_of, engine_of
from ..errors import EmulationError, UnsupportedInstructionError
from ..machine.memory import MBarrier, split_cluster_address
from ..machine.program import DIVERGED, DONE_PC, EXITED, Program, YIELD, active_index, address_reader, as_lanes
from ..machine.state import FamilyState

U32 = np.dtype(np.uint32)
U64 = np.dtype(np.uint64)
BOOL = np.dtype(bool)


# --- the state this family keeps --------------------------------------------------------------------------
@dataclass
class SyncWarpState:
    #: the asynchronous completions this warp observed (async_engine.Clock: waits, barriers, tcgen05.wait::ld)
    observed: Clock = field(default_factory=Clock)
    #: (barrier id, generation) of the named barrier this warp waits for
    bar_wait: Optional[tuple[int, int]] = None
    #: the barrier.cluster generation this warp waits for
    cluster_gen: Optional[int] = None


@dataclass
class SyncCTAState:
    #: shared offset -> memory.MBarrier (TMA, tcgen05.commit and CLC complete transactions on them too)
    mbarriers: dict = field(default_factory=dict)
    #: barrier id -> NamedBarrier
    barriers: dict = field(default_factory=dict)


@dataclass
class SyncClusterState:
    """barrier.cluster: generation, threads arrived, the clock the arrivals carry and the one the last completed
    generation carried (what its waiters observe)."""

    bar_gen: int = 0
    bar_arrived: int = 0
    bar_obs: Clock = field(default_factory=Clock)
    bar_done_obs: Clock = field(default_factory=Clock)


STATE = FamilyState("sync", warp=SyncWarpState, cta=SyncCTAState, cluster=SyncClusterState)


# --- branches ------------------------------------------------------------------------------------------
def diverge(w, taken: np.ndarray, target: int) -> int:
    """Split the active lanes: `taken` go to `target`, the rest fall through."""
    act = w.mask if w.mask is not None else np.ones(len(w.live), dtype=bool)
    if w.lane_pc is None:
        w.lane_pc = np.where(w.live, w.pc, DONE_PC)
    w.lane_pc[act & ~taken] = w.pc + 1
    w.lane_pc[act & taken] = target
    return DIVERGED


def _bra(ins: Instruction, prog: Program) -> Callable:
    target = prog.label_pc[ins.targets[0]]
    if ins.guard is None:
        return lambda w: target
    g = prog.slot(ins.guard.reg, ins)
    neg = ins.guard.negated

    def bra(w):
        p = w.R[g]
        if neg:
            p = ~p
        m = w.mask
        taken = p if m is None else p & m
        if not taken.any():
            return None
        if (m is None and taken.all()) or (m is not None and (taken == m).all()):
            return target
        return diverge(w, taken, target)
    return bra


def _brx(ins: Instruction, prog: Program) -> Callable:
    targets = [prog.label_pc[t] for t in ins.targets]
    rd = prog.src(ins.operands[0], U32, ins)

    def brx(w):
        idx = as_lanes(np.asarray(rd(w)), w.lanes)
        act = active_index(w)
        vals = np.unique(idx[act])
        if len(vals) != 1:
            raise UnsupportedInstructionError("brx.idx with a lane-divergent index")
        k = int(vals[0])
        if k >= len(targets):
            raise EmulationError(f"brx.idx index {k} outside its {len(targets)}-entry table")
        return targets[k]
    return brx


def _exit(w):
    return EXITED


def _trap(ins: Instruction) -> Callable:
    def trap(w):
        raise EmulationError("the kernel executed `trap` (a device-side assert failed?)", where=w.where())
    return trap


# --- CTA barriers ----------------------------------------------------------------------------------------
class NamedBarrier:
    """A named barrier: threads arrived in the current generation, the generation, the expected count, and per
    recent generation the clock its arrivals carried (what every released waiter observes)."""

    __slots__ = ("arrived", "gen", "expected", "obs")

    def __init__(self) -> None:
        self.arrived = 0
        self.gen = 0
        self.expected = 0
        self.obs: dict[int, Clock] = {}


def _bar(ins: Instruction, prog: Program, wait: bool) -> Callable:
    ops = ins.operands
    rd_id = prog.src(ops[0], U32, ins) if ops else (lambda w: 0)
    rd_cnt = prog.src(ops[1], U32, ins) if len(ops) > 1 else None

    def bar(w):
        bid = int(np.asarray(rd_id(w)).flat[0])
        cta = w.cta
        b = cta.barriers.get(bid)
        if b is None:
            b = cta.barriers[bid] = NamedBarrier()
        if w.bar_wait is not None:  # resumed: has our generation been released?
            wbid, gen = w.bar_wait
            if b.gen > gen:
                w.bar_wait = None
                clock_of(w).join(b.obs.get(gen) or Clock())
                return None
            return YIELD
        expected = int(np.asarray(rd_cnt(w)).flat[0]) if rd_cnt else cta.nthreads
        b.expected = expected
        gen = b.gen
        arrivals = b.obs.get(gen)
        if arrivals is None:
            arrivals = b.obs[gen] = Clock()
            b.obs.pop(gen - 16, None)  # waiters resume long before 16 more generations complete
        arrivals.join(engine_of(w).release(w))
        b.arrived += 32
        if b.arrived >= expected:
            b.arrived = 0
            b.gen += 1
            clock_of(w).join(arrivals)
            w.launch.progress += 1
            return None
        if not wait:
            return None
        w.bar_wait = (bid, gen)
        w.blocked_on = f"bar.sync {bid} ({b.arrived}/{expected} threads arrived)"
        return YIELD
    return bar


def _cluster_arrive(w):
    cl = w.cta.cluster
    w.cluster_gen = cl.bar_gen
    cl.bar_obs.join(engine_of(w).release(w))
    cl.bar_arrived += 32
    if cl.bar_arrived >= cl.nthreads:
        cl.bar_arrived = 0
        cl.bar_gen += 1
        cl.bar_done_obs = cl.bar_obs
        cl.bar_obs = Clock()
        w.launch.progress += 1


def _cluster_wait(w):
    cl = w.cta.cluster
    if w.cluster_gen is None:
        raise EmulationError("barrier.cluster.wait without a preceding barrier.cluster.arrive", where=w.where())
    if cl.bar_gen > w.cluster_gen:
        w.cluster_gen = None
        clock_of(w).join(cl.bar_done_obs)
        return None
    w.blocked_on = f"barrier.cluster.wait ({cl.bar_arrived}/{cl.nthreads} threads arrived)"
    return YIELD


def _cluster_sync(w):
    if w.cluster_gen is None:
        _cluster_arrive(w)
    return _cluster_wait(w)


# --- mbarriers --------------------------------------------------------------------------------------------
def find_mbarrier(w, addr: int, ins_line: int = 0) -> MBarrier:
    rank, local = split_cluster_address(int(addr), w.cta.rank)
    cta = w.cta.cluster.ctas[rank]
    bar = cta.mbarriers.get(local)
    if bar is None:
        raise EmulationError(f"mbarrier at shared address 0x{local:x} of CTA rank {rank} is not initialised "
                             "(missing mbarrier.init, or used after mbarrier.inval)", where=w.where())
    return bar


def _lanes_by_address(w, addrs: np.ndarray) -> dict[int, int]:
    idx = active_index(w)
    out: dict[int, int] = {}
    for a in addrs[idx].tolist():
        out[a] = out.get(a, 0) + 1
    return out


def _mbarrier_init(ins: Instruction, prog: Program) -> Callable:
    ops = ins.operands
    rd = address_reader(ops[0], prog, ins)
    rc = prog.src(ops[1], U32, ins)

    def init(w):
        addrs = rd(w)
        cnt = as_lanes(np.asarray(rc(w)), w.lanes)
        for lane in active_index(w):
            rank, local = split_cluster_address(int(addrs[lane]), w.cta.rank)
            c = int(cnt[lane])
            w.cta.cluster.ctas[rank].mbarriers[local] = MBarrier(count=c, pending=c, line=ins.line)
        w.launch.progress += 1
    return init


def _mbarrier_inval(ins: Instruction, prog: Program) -> Callable:
    ops = ins.operands
    rd = address_reader(ops[0], prog, ins)

    def inval(w):
        for a in set(rd(w)[active_index(w)].tolist()):
            rank, local = split_cluster_address(a, w.cta.rank)
            w.cta.cluster.ctas[rank].mbarriers.pop(local, None)
    return inval


def _mbarrier_arrive(ins: Instruction, prog: Program) -> Callable:
    ops = ins.operands
    has_state = ops[0].kind in ("reg", "sink") and len(ops) >= 2 and ops[1].kind == "addr"
    addr_op = ops[1] if has_state else ops[0]
    rest = ops[2:] if has_state else ops[1:]
    rd = address_reader(addr_op, prog, ins)
    wr = prog.dst(ops[0], ins) if has_state else None
    expect_tx = "expect_tx" in ins.modifiers
    rtx = prog.src(rest[0], U32, ins) if rest else None
    drop = ins.opcode == "mbarrier.arrive_drop"

    def arrive(w):
        addrs = rd(w)
        n_arg = int(np.asarray(rtx(w)).flat[0]) if rtx is not None else None
        state = 0
        engine = engine_of(w)
        clock = engine.release(w)
        for a, n in _lanes_by_address(w, addrs).items():
            bar = find_mbarrier(w, a)
            state = bar.phase
            for _ in range(n):
                if expect_tx:
                    bar.expect_tx(n_arg or 0)
                    engine.deliver(bar, clock, arrivals=1)
                else:
                    if drop:
                        bar.count -= 1
                    engine.deliver(bar, clock, arrivals=n_arg or 1)
        w.launch.progress += 1
        if wr is not None:
            wr(w, np.uint64(state))
    return arrive


def _mbarrier_expect_tx(ins: Instruction, prog: Program) -> Callable:
    ops = ins.operands
    rd = address_reader(ops[0], prog, ins)
    rtx = prog.src(ops[1], U32, ins)

    def expect(w):
        tx = int(np.asarray(rtx(w)).flat[0])
        for a, n in _lanes_by_address(w, rd(w)).items():
            find_mbarrier(w, a).expect_tx(tx * n)
    return expect


def _mbarrier_wait(ins: Instruction, prog: Program) -> Callable:
    ops = ins.operands
    parity = "parity" in ins.modifiers
    wr = prog.dst(ops[0], ins)
    rd = address_reader(ops[1], prog, ins)
    rs = prog.src(ops[2], U64, ins)
    blocking = ins.opcode == "mbarrier.try_wait"

    def try_wait(w):
        addrs = rd(w)
        st = as_lanes(np.asarray(rs(w)), w.lanes)
        idx = active_index(w)
        res = np.zeros(32, dtype=bool)
        engine = engine_of(w)
        seen = []
        a_act, s_act = addrs[idx], st[idx]
        if (a_act == a_act[0]).all() and (s_act == s_act[0]).all():  # the usual case: one barrier, one phase
            pairs = [(idx, int(a_act[0]), int(s_act[0]))]
        else:
            pairs = [(np.array([lane]), int(addrs[lane]), int(st[lane])) for lane in idx]
        for lanes, a, s in pairs:
            bar = find_mbarrier(w, a)
            done = bar.phase_done(s) if parity else bar.phase > s
            if not done and engine.settle(bar):  # the latest moment: pending work completes when observed
                done = bar.phase_done(s) if parity else bar.phase > s
            res[lanes] = done
            if done:
                seen.append(bar)
        if blocking and not res[idx].any():
            w.blocked_on = f"mbarrier.try_wait at 0x{int(addrs[idx[0]]):x}"
            return YIELD
        for bar in seen:
            engine.observe_barrier(w, bar)
        wr(w, res)
    return try_wait


def _mbarrier_complete_tx(ins: Instruction, prog: Program) -> Callable:
    ops = ins.operands
    rd = address_reader(ops[0], prog, ins)
    rtx = prog.src(ops[1], U32, ins)

    def complete_tx(w):
        tx = int(np.asarray(rtx(w)).flat[0])
        engine = engine_of(w)
        clock = engine.release(w)
        for a, n in _lanes_by_address(w, rd(w)).items():
            engine.deliver(find_mbarrier(w, a), clock, tx=tx * n)
        w.launch.progress += 1
    return complete_tx


# --- warp-level data exchange ---------------------------------------------------------------------------
def _elect(ins: Instruction, prog: Program) -> Callable:
    pair = ins.operands[0]
    wr_r = prog.dst(pair.items[0], ins) if pair.kind == "pair" else prog.dst(pair, ins)
    wr_p = prog.dst(pair.items[1], ins) if pair.kind == "pair" else None
    rm = prog.src(ins.operands[1], U32, ins)
    lanes = np.arange(32)

    def elect(w):
        member = (np.uint32(np.asarray(rm(w)).flat[0]) >> lanes.astype(np.uint32)) & 1
        act = (w.mask if w.mask is not None else np.ones(32, bool)) & (member == 1)
        leader = int(np.argmax(act)) if act.any() else 0
        wr_r(w, np.uint32(leader))
        if wr_p is not None:
            wr_p(w, lanes == leader)
    return elect


def _shfl(ins: Instruction, prog: Program) -> Callable:
    mode = next(m for m in ins.modifiers if m in ("up", "down", "bfly", "idx"))
    d = ins.operands[0]
    wr_d = prog.dst(d.items[0] if d.kind == "pair" else d, ins)
    wr_p = prog.dst(d.items[1], ins) if d.kind == "pair" else None
    ra, rb, rc = (prog.src(o, U32, ins) for o in ins.operands[1:4])
    lane = np.arange(32, dtype=np.int64)

    def shfl(w):
        a = as_lanes(np.asarray(ra(w)), w.lanes)
        b = as_lanes(np.asarray(rb(w)).astype(np.int64), w.lanes) & 31
        c = as_lanes(np.asarray(rc(w)).astype(np.int64), w.lanes)
        clamp, segmask = c & 31, (c >> 8) & 31
        max_lane = (lane & segmask) | (clamp & ~segmask)
        min_lane = lane & segmask
        if mode == "up":
            j = lane - b
            ok = j >= max_lane
        elif mode == "down":
            j = lane + b
            ok = j <= max_lane
        elif mode == "bfly":
            j = lane ^ b
            ok = j <= max_lane
        else:
            j = min_lane | (b & ~segmask)
            ok = j <= max_lane
        j = np.where(ok, j, lane) & 31
        wr_d(w, a[j])
        if wr_p is not None:
            wr_p(w, ok)
    return shfl


def _vote(ins: Instruction, prog: Program) -> Callable:
    mode = next(m for m in ins.modifiers if m in ("all", "any", "uni", "ballot"))
    wr = prog.dst(ins.operands[0], ins)
    rp = prog.src(ins.operands[1], BOOL, ins)

    def vote(w):
        p = as_lanes(np.asarray(rp(w)), w.lanes)
        act = w.mask if w.mask is not None else np.ones(32, bool)
        vals = p[act]
        if mode == "ballot":
            bits = int(np.sum((p & act).astype(np.uint64) << np.arange(32, dtype=np.uint64)))
            return wr(w, np.uint32(bits))
        r = vals.all() if mode == "all" else vals.any() if mode == "any" else (vals.all() or not vals.any())
        return wr(w, np.bool_(r))
    return vote


def _redux(ins: Instruction, prog: Program) -> Callable:
    mode = next(m for m in ins.modifiers if m in ("add", "min", "max", "and", "or", "xor"))
    t = ins.types[-1]
    dt = np.dtype(np.int32) if t == "s32" else U32
    wr = prog.dst(ins.operands[0], ins)
    ra = prog.src(ins.operands[1], dt, ins)
    fn = {"add": lambda v: v.astype(np.int64).sum(), "min": np.min, "max": np.max,
          "and": np.bitwise_and.reduce, "or": np.bitwise_or.reduce, "xor": np.bitwise_xor.reduce}[mode]

    def redux(w):
        v = as_lanes(np.asarray(ra(w)), w.lanes)[active_index(w)]
        r = fn(v)
        return wr(w, np.array([int(r) & 0xFFFFFFFF], dtype=np.uint32).view(dt)[0])
    return redux


def _activemask(ins: Instruction, prog: Program) -> Callable:
    wr = prog.dst(ins.operands[0], ins)

    def am(w):
        act = w.mask if w.mask is not None else np.ones(32, bool)
        return wr(w, np.uint32(int(np.sum(act.astype(np.uint64) << np.arange(32, dtype=np.uint64)))))
    return am


def _proxy_fence(ins: Instruction) -> Callable:
    """fence.proxy.async{.shared::cta, .shared::cluster, .global}: generic-proxy writes made so far become visible
    to the async proxy. Lenient on purpose: any thread's fence covers every earlier write of its CTA (the pattern
    "all threads store, fence, barrier, one thread issues" and "store, barrier, issuer fences" both pass)."""
    mods = ins.modifiers
    if "global" in mods:
        return lambda w: None
    cluster = "shared::cluster" in mods

    def fence(w):
        for cta in (w.cta.cluster.ctas if cluster else (w.cta,)):
            cta.smem.proxy_fence()
    return fence


def _fence(ins: Instruction, prog: Program) -> Callable:
    """`fence` with a .proxy.async qualifier (fence.proxy.async::generic.release.sync_restrict::shared::cta.cluster)
    is a proxy fence; the other fences order memory, which this emulator's sequential execution already does."""
    if "proxy" in ins.modifiers and any(m.startswith("async") for m in ins.modifiers):
        return _proxy_fence(ins)
    return _noop


def _bar_cta(ins: Instruction, prog: Program) -> Optional[Callable]:
    """bar / barrier .sync (the default) and .arrive; .red is not emulated."""
    mode = ins.modifiers[0] if ins.modifiers else "sync"
    if mode == "red":
        raise UnsupportedInstructionError("bar.red", line=ins.line, text=ins.text)
    if mode == "sync":
        return _bar(ins, prog, wait=True)
    if mode == "arrive":
        return _bar(ins, prog, wait=False)
    return None


def _barrier_cluster(ins: Instruction, prog: Program) -> Callable:
    if "arrive" in ins.modifiers:
        return lambda w: _cluster_arrive(w)
    if "wait" in ins.modifiers:
        return _cluster_wait
    return _cluster_sync


def _noop(w) -> None:
    return None


def _compiles_to(closure: Callable) -> Callable:
    """The handler of an instruction whose closure does not depend on its operands."""
    return lambda ins, prog: closure


#: opcode -> instruction compiler (rows of the ISA table, isa/table.py)
HANDLERS: dict[str, Callable] = {
    "bra": _bra, "brx": _brx, "ret": _compiles_to(_exit), "exit": _compiles_to(_exit),
    "trap": lambda ins, prog: _trap(ins),
    "bar": _bar_cta, "barrier": _bar_cta, "barrier.cluster": _barrier_cluster,
    "mbarrier.init": _mbarrier_init, "mbarrier.inval": _mbarrier_inval, "mbarrier.arrive": _mbarrier_arrive,
    "mbarrier.arrive_drop": _mbarrier_arrive, "mbarrier.expect_tx": _mbarrier_expect_tx,
    "mbarrier.try_wait": _mbarrier_wait, "mbarrier.test_wait": _mbarrier_wait,
    "mbarrier.complete_tx": _mbarrier_complete_tx,
    "elect": _elect, "shfl": _shfl, "vote": _vote, "redux": _redux, "activemask": _activemask,
    "fence": _fence, "fence.proxy.async": lambda ins, prog: _proxy_fence(ins),
    # ordering and hints with nothing to do in a sequential emulator
    **{op: _compiles_to(_noop) for op in ("fence.proxy.tensormap", "fence.proxy.alias", "membar", "setmaxnreg",
                                           "bar.warp", "nanosleep", "pmevent", "griddepcontrol.launch_dependents",
                                           "griddepcontrol.wait")},
}
