"""Cluster Launch Control in the emulator: `clusterlaunchcontrol.try_cancel` / `query_cancel`, the 128-bit
response register, function-scope `.shared` variables, and a lazy grid scheduler that stealing can race against.

Grid scheduler (`GridSchedule`, `run_grid`): a launch has `workers` slots (the SMs that are free for it; default
1, the runner's old one-cluster-after-another order). The first `workers` clusters of the launch order start;
whenever one finishes, its slot starts the next cluster that is neither started nor cancelled. Started clusters
interleave round-robin (every warp a quantum of instructions per round). `seed` shuffles the launch order and each
round's order, so tests can run many schedules. `try_cancel` atomically takes the next cluster of the launch
order that has not started, so with fewer workers than clusters stealing really happens.

Response encoding (opaque in PTX; what ptxas-blackwell's decode of `query_cancel` reads, measured by
disassembling it: `LDS.128 R4..R7`, canceled = ``R6 & 1``, ``get_first_ctaid::x = R4``, ``::y = R5 & 0xffff``,
``::z = R5 >> 16``): 32-bit word 0 = first CTA id x, word 1 = y | z << 16, word 2 bit 0 = canceled, word 3 = 0.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ..errors import InputError
from ..ptx.ir import Directive, Function, Instruction
from .errors import EmulationError, UnsupportedInstructionError

RESPONSE_BYTES = 16
_U32 = np.uint32


# --- function-scope .shared variables --------------------------------------------------------------------------
_SHARED_DECL_RE = re.compile(r"^(?:\.align\s+(\d+)\s+)?\.(\w+)\s+([\w$]+)\s*(?:\[\s*(\d*)\s*\])?\s*$")
_ELEM_BYTES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "b32": 4, "u32": 4, "s32": 4, "f32": 4,
               "b64": 8, "u64": 8, "s64": 8, "f64": 8, "b128": 16}
#: Static variables sit below the dynamic `global_smem` window, which starts 1 KiB-aligned (as swizzled
#: operands need), like ptxas's layout (static first, then dynamic).
_DYNAMIC_ALIGN = 1024


def static_shared_layout(fn: Function) -> tuple[dict[str, int], int]:
    """Offsets of the `.shared` variables declared inside `fn` (inline-asm scopes) and the bytes to reserve
    before the dynamic shared memory. Same-named declarations of different scopes share one allocation: the
    asm that declares them runs its protocol to completion each time, so sharing is not observable."""
    offsets: dict[str, int] = {}
    off = 0
    for st in fn.statements:
        if not isinstance(st, Directive) or st.name != "shared":
            continue
        m = _SHARED_DECL_RE.match(st.args.strip())
        if not m or m.group(2) not in _ELEM_BYTES or (m.group(4) == "" and m.group(4) is not None):
            raise UnsupportedInstructionError(f"function-scope .shared declaration {st.args!r} is not emulated "
                                              "(expected `.shared [.align N] .type name[count]`)", line=st.line)
        align, ty, name, count = int(m.group(1) or 1), m.group(2), m.group(3), int(m.group(4) or 1)
        if name in offsets:
            continue
        off = (off + align - 1) // align * align
        offsets[name] = off
        off += _ELEM_BYTES[ty] * count
    reserved = (off + _DYNAMIC_ALIGN - 1) // _DYNAMIC_ALIGN * _DYNAMIC_ALIGN if off else 0
    return offsets, reserved


# --- the grid scheduler ------------------------------------------------------------------------------------------
@dataclass
class GridSchedule:
    """How the emulated launch starts clusters (see the module docstring) and, after `run`, what happened.

    `ran_by[cluster]` is the worker slot that processed that cluster's work (started it, or stole it);
    `stolen` lists (worker, requesting cluster, stolen cluster) in order; `started` the clusters that ran;
    `instructions[worker]` the warp-instructions the worker executed; `rounds` how many scheduling rounds the
    launch took and `finished_at[worker]` the last round the worker ran in (rounds are the emulator's time: each
    running cluster's warps get `quantum` instructions per round it runs in; a slow worker skips rounds)."""

    workers: int = 1
    seed: Optional[int] = None
    #: warp-instructions per warp per round at speed 1 (the round is the emulator's unit of time)
    quantum: int = 4000
    #: per-worker speed in (0, 1]: the worker runs in that fraction of the rounds (0.25: every 4th), modelling an
    #: SM time-shared with another kernel
    speeds: Optional[tuple] = None
    rounds: int = 0
    finished_at: dict = field(default_factory=dict)  # worker -> round in which it last ran anything
    ran_by: dict = field(default_factory=dict)
    stolen: list = field(default_factory=list)
    started: list = field(default_factory=list)
    failed_requests: int = 0
    instructions: dict = field(default_factory=dict)  # worker -> warp-instructions it executed (a load proxy)
    _pending: list = field(default_factory=list, repr=False)
    _worker_of: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.workers, int) or self.workers < 1:
            raise InputError(f"GridSchedule(workers=...) must be a positive int (emulated SMs free for the launch), "
                             f"got {self.workers!r}")
        if self.speeds is not None and (len(self.speeds) != self.workers or min(self.speeds) <= 0
                                        or max(self.speeds) > 1):
            raise InputError(f"GridSchedule(speeds=...) needs one speed in (0, 1] per worker ({self.workers}), "
                             f"got {self.speeds!r}")
        if not isinstance(self.quantum, int) or self.quantum < 1:
            raise InputError(f"GridSchedule(quantum=...) must be a positive int, got {self.quantum!r}")

    def reset(self) -> None:
        """Forget a previous run's record (a schedule object may be reused for another launch)."""
        self.ran_by, self.stolen, self.started, self.failed_requests, self.instructions = {}, [], [], 0, {}
        self.rounds, self.finished_at = 0, {}
        self._pending, self._worker_of = [], {}

    def cancel(self, requester) -> Optional[tuple]:
        """try_cancel: the next not-yet-started cluster (now owned by `requester`'s worker), or None."""
        if not self._pending:
            self.failed_requests += 1
            return None
        victim = self._pending.pop(0)
        worker = self._worker_of[requester]
        self.ran_by[victim] = worker
        self.stolen.append((worker, requester, victim))
        return victim

    def tiles_of_worker(self) -> dict[int, list]:
        """worker slot -> the clusters whose work it did, in order."""
        out: dict[int, list] = {}
        for c, w in self.ran_by.items():
            out.setdefault(w, []).append(c)
        return out


def _runs_in_round(schedule: GridSchedule, worker: int) -> bool:
    """A worker of speed s runs in round r when floor(r * s) advances (speed 1: every round)."""
    if not schedule.speeds:
        return True
    s, r = schedule.speeds[worker], schedule.rounds
    return int(r * s) > int((r - 1) * s)


def run_grid(launch, coords: list, make_cluster: Callable, schedule: GridSchedule,
             max_instructions: int = 200_000_000, on_cluster_done: Optional[Callable] = None) -> None:
    """Run every cluster of `coords` (launch order) that is not cancelled, `schedule.workers` at a time.
    `make_cluster(coord)` builds a cluster (CTAs, warps) when it starts; clusters are built lazily."""
    from .scheduler import check_budget, cluster_done, finish_cluster, start_cluster, step_cluster

    rng = random.Random(schedule.seed) if schedule.seed is not None else None
    schedule.reset()
    order = list(coords)
    if rng:
        rng.shuffle(order)
    schedule._pending = order
    launch.grid_schedule = schedule
    active: list = []  # (worker, cluster)
    free = list(range(schedule.workers))
    total = 0
    while schedule._pending or active:
        while free and schedule._pending:
            coord = schedule._pending.pop(0)
            worker = free.pop(0)
            schedule._worker_of[coord] = worker
            schedule.ran_by[coord] = worker
            schedule.started.append(coord)
            cluster = make_cluster(coord)
            start_cluster(cluster)
            active.append((worker, cluster))
        if rng:
            rng.shuffle(active)
        schedule.rounds += 1
        still = []
        for worker, cluster in active:
            if not _runs_in_round(schedule, worker):
                still.append((worker, cluster))
                continue
            schedule.finished_at[worker] = schedule.rounds
            n = step_cluster(cluster, schedule.quantum)
            total += n
            schedule.instructions[worker] = schedule.instructions.get(worker, 0) + n
            if cluster_done(cluster):
                finish_cluster(cluster)
                free.append(worker)
                if on_cluster_done is not None:
                    on_cluster_done()
            else:
                still.append((worker, cluster))
        active = still
        free.sort()
        check_budget(total, max_instructions)
    launch.instructions += total


# --- instruction semantics ---------------------------------------------------------------------------------------
def _response(victim: Optional[tuple], nctas: int) -> np.ndarray:
    words = np.zeros(4, dtype=_U32)
    if victim is not None:
        x, y, z = victim
        words[0], words[1], words[2] = x * nctas, (y & 0xFFFF) | ((z & 0xFFFF) << 16), 1
    return words.view(np.uint8)


def _try_cancel(ins: Instruction, prog) -> Callable:
    from .memops import address_reader
    from .memory import split_cluster_address
    from .asyncops import AsyncOp, engine_of, issuer_of
    from .tma import _mbarrier_at
    if "mbarrier::complete_tx::bytes" not in ins.modifiers or len(ins.operands) != 2:
        raise UnsupportedInstructionError("clusterlaunchcontrol.try_cancel needs the "
                                          ".mbarrier::complete_tx::bytes form with [addr], [mbar]", line=ins.line)
    multicast = "multicast::cluster::all" in ins.modifiers
    rd_addr = address_reader(ins.operands[0], prog, ins)
    rd_bar = address_reader(ins.operands[1], prog, ins)
    line, text = ins.line, ins.text

    def try_cancel(w):
        sched = getattr(w.launch, "grid_schedule", None)
        if sched is None:
            raise EmulationError("clusterlaunchcontrol.try_cancel needs the lazy grid scheduler "
                                 "(bwtriton.emu.clc.run_grid); this launch path has none", where=w.where())
        if getattr(w.cta, "clc_saw_failure", False):
            raise EmulationError("clusterlaunchcontrol.try_cancel after this CTA observed a failed one (query_cancel"
                                 ".is_canceled false): undefined behaviour in PTX; end the persistent loop when a "
                                 "cancel fails", where=w.where())
        cluster = w.cta.cluster
        addrs, bars = np.broadcast_to(rd_addr(w), (32,)), np.broadcast_to(rd_bar(w), (32,))
        lanes = np.flatnonzero(w.mask if w.mask is not None else w.live)
        for lane in lanes:  # every active thread issues its own request (the verifier flags more than one)
            _, addr = split_cluster_address(int(addrs[lane]), w.cta.rank)
            _, bar = split_cluster_address(int(bars[lane]), w.cta.rank)
            if addr % 16:
                raise EmulationError(f"try_cancel response address 0x{addr:x} is not 16-byte aligned",
                                     where=w.where())
            victim = sched.cancel(cluster.cluster_id)
            data = _response(victim, len(cluster.ctas))
            targets = cluster.ctas if multicast else [w.cta]

            saddr = np.array([addr], dtype=np.uint64)

            def deliver(targets=targets, saddr=saddr, data=data):
                for cta in targets:
                    cta.smem.write(saddr, data[None, :])
            cells = [(cta.smem, slice(int(o), int(o) + RESPONSE_BYTES))
                     for cta in targets for o in cta.smem.offsets(saddr, RESPONSE_BYTES)]
            op = AsyncOp(kind="clusterlaunchcontrol.try_cancel", line=line, text=text, issuer=issuer_of(w),
                         finish=deliver, writes=cells,
                         tx=[(_mbarrier_at(w, cta, bar, line), RESPONSE_BYTES) for cta in targets],
                         observe=f"Wait on its mbarrier (shared 0x{bar:x}, mbarrier.try_wait.parity)")
            for smem, idx in cells:  # poison: the response is undefined until its mbarrier wait
                smem.data[idx] = 0xFF
            engine_of(w).issue(w, op)
    return try_cancel


def _mov_b128(ins: Instruction, prog) -> Callable:
    dst, src = ins.operands
    d = prog.slot(dst.name, ins)
    if src.kind == "vec" and len(src.items) == 2:
        lo, hi = (prog.src(it, np.dtype(np.uint64), ins) for it in src.items)

        def pack(w):
            v = np.stack([np.broadcast_to(lo(w), (32,)), np.broadcast_to(hi(w), (32,))], axis=1)
            w.R[d] = v if w.mask is None else np.where(w.mask[:, None], v, w.R[d])
        return pack
    if src.kind == "reg":
        s = prog.slot(src.name, ins)

        def copy(w):
            w.R[d] = w.R[s].copy() if w.mask is None else np.where(w.mask[:, None], w.R[s], w.R[d])
        return copy
    raise UnsupportedInstructionError("mov.b128 from something other than {lo64, hi64} or a .b128 register",
                                      line=ins.line, text=ins.text)


def _query_cancel(ins: Instruction, prog) -> Callable:
    what = ins.modifiers[0] if ins.modifiers else ""
    dst, src = ins.operands
    if src.kind != "reg":
        raise UnsupportedInstructionError("query_cancel needs a .b128 register response", line=ins.line)
    s = prog.slot(src.name, ins)
    words = {"get_first_ctaid::x": lambda lo, hi: lo & 0xFFFFFFFF,
             "get_first_ctaid::y": lambda lo, hi: (lo >> 32) & 0xFFFF,
             "get_first_ctaid::z": lambda lo, hi: (lo >> 48) & 0xFFFF,
             "is_canceled": lambda lo, hi: hi & 1}
    if what not in words:
        raise UnsupportedInstructionError(f"clusterlaunchcontrol.query_cancel.{what} is not emulated "
                                          "(is_canceled, get_first_ctaid::x/y/z are)", line=ins.line)
    decode = words[what]
    out = prog.dst(dst, ins)

    def query(w):
        r = w.R[s]
        if r.ndim != 2:
            raise EmulationError(f"{src.name} holds no try_cancel response (not written as .b128)", where=w.where())
        v = decode(r[:, 0], r[:, 1])
        if what == "is_canceled":
            act = w.mask if w.mask is not None else w.live
            if (act & (v == 0)).any():
                w.cta.clc_saw_failure = True  # a later try_cancel of this CTA is undefined behaviour
            out(w, v != 0)
        else:
            out(w, v.astype(_U32))
    return query


#: opcode -> instruction compiler; `compile_instruction` is what the emulator's dispatch calls.
ISA: dict[str, Callable] = {
    "clusterlaunchcontrol.try_cancel": _try_cancel,
    "clusterlaunchcontrol.query_cancel": _query_cancel,
}


def compile_instruction(ins: Instruction, prog) -> Optional[Callable]:
    """The closure for a CLC instruction or a 128-bit `mov`, None for anything else."""
    if ins.opcode in ISA:
        return ISA[ins.opcode](ins, prog)
    if ins.opcode == "mov" and ins.types == ("b128",):
        return _mov_b128(ins, prog)
    return None
