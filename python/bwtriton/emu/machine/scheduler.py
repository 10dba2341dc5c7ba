"""Runs one cluster: warps round-robin (a quantum of instructions each), blocked warps yield, and a round in which
nothing can move is a deadlock. Asynchronous work (asyncops.py) completes when a warp observes it; only when every
warp is stuck does the scheduler complete whatever is still pending (the latest moment), before calling it a
deadlock."""
from __future__ import annotations

import sys
import time

import numpy as np

from ...errors import InputError
from .async_engine import SCHEDULES, AsyncEngine
from ..errors import DeadlockError, EmulationError, TmemLeakError
from .program import DIVERGED, DONE_PC, EXITED, YIELD

QUANTUM = 4000


def reselect(w) -> None:
    """Divergent warp: run the lanes with the smallest PC next; reconverge when all live lanes agree."""
    lp = np.where(w.live, w.lane_pc, DONE_PC)
    m = int(lp.min())
    act = lp == m
    w.pc = m
    if (act == w.live).all():
        w.lane_pc = None
        w.mask = None if w.live.all() else w.live.copy()
    else:
        w.mask = act


def exit_lanes(w) -> None:
    act = w.mask if w.mask is not None else w.live
    w.live = w.live & ~act
    if not w.live.any():
        w.done = True


def run_warp(w, budget: int) -> tuple[int, bool]:
    """Execute up to `budget` instructions; returns (instructions retired, blocked?)."""
    code = w.code
    n = 0
    while n < budget and not w.done:
        if w.lane_pc is None:  # converged fast path
            pc = w.pc
            while n < budget:
                w.pc = pc
                r = code[pc](w)
                if r is None:
                    pc += 1
                elif r >= 0:
                    pc = r
                else:
                    break
                n += 1
            else:
                w.pc = pc
                break
            if r == YIELD:
                w.pc = pc
                w.executed += n
                return n, True
            n += 1
            if r == EXITED:
                exit_lanes(w)
                if w.done:
                    break
                w.pc = pc + 1
                w.mask = w.live.copy()
            elif r == DIVERGED:
                reselect(w)
            continue
        # divergent: per-lane PCs, one instruction at a time
        r = code[w.pc](w)
        if r == YIELD:
            w.executed += n
            return n, True
        n += 1
        if r is None:
            w.lane_pc[w.mask] = w.pc + 1
        elif r >= 0:
            w.lane_pc[w.mask] = r
        elif r == EXITED:
            exit_lanes(w)
            if w.done:
                break
            w.lane_pc[~w.live] = DONE_PC
        reselect(w)
    w.executed += n
    return n, False


def start_cluster(cluster) -> None:
    """Give a new cluster its asynchronous engine (one per cluster: its CTAs share TMA/tcgen05 completion)."""
    cluster.engine = AsyncEngine(cluster.launch.schedule)


def step_cluster(cluster, budget: int = QUANTUM) -> int:
    """One round: every live warp runs up to `budget` instructions. Returns the instructions retired; raises
    DeadlockError when no warp can move and no asynchronous work is pending."""
    warps = [w for cta in cluster.ctas for w in cta.warps]
    launch = cluster.launch
    total, progressed = 0, False
    for w in [w for w in warps if not w.done]:
        before = launch.progress
        n, _ = run_warp(w, budget)
        total += n
        progressed |= bool(n) or launch.progress != before
    if not progressed and not cluster.engine.complete_all() and any(not w.done for w in warps):
        blocked = "; ".join(f"{w.where()} at PTX line {_line(w)}: {w.blocked_on or 'running'}"
                            for w in warps if not w.done)
        raise DeadlockError(f"deadlock: no warp can make progress and no asynchronous work is pending -- {blocked}")
    return total


def cluster_done(cluster) -> bool:
    return all(w.done for cta in cluster.ctas for w in cta.warps)


def finish_cluster(cluster) -> None:
    """After every warp exited: complete what is still pending, then check that no TMEM is left allocated."""
    cluster.engine.complete_all()
    for cta in cluster.ctas:
        if cta.tmem.allocations:
            col, (n, line) = next(iter(cta.tmem.allocations.items()))
            raise TmemLeakError(f"CTA {cta.ctaid} exited with TMEM columns {col}..{col + n - 1} still allocated "
                                "(add tcgen05.dealloc before exit)", line=line)


def check_budget(total: int, max_instructions: int) -> None:
    if total > max_instructions:
        raise EmulationError(f"more than {max_instructions} warp-instructions without finishing: an infinite "
                             "loop? (raise max_instructions if the kernel is just big)")


def _line(w) -> int:
    fn = w.cta.prog.fn
    return fn.instructions[w.pc].line if w.pc < len(fn.instructions) else fn.end_line


def check_schedule(schedule: str) -> str:
    """Validate a `schedule=` argument ("latest": adversarial, the default; "eager": optimistic)."""
    if schedule not in SCHEDULES:
        raise InputError(f"unknown schedule {schedule!r}: use 'latest' (asynchronous work completes as late as "
                         "the memory model allows; strict) or 'eager' (completes at issue; for speed comparisons)")
    return schedule


class ProgressMeter:
    """Progress of a launch on a terminal: clusters done/total and warp-instructions per second, redrawn at most
    every `interval_s` seconds (also between gang rounds), and only once the run has taken more than `after_s`
    seconds (short runs print nothing)."""

    def __init__(self, total_clusters: int, enabled=None, after_s: float = 2.0, stream=None,
                 interval_s: float = 0.5):
        self.total = total_clusters
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else bool(enabled)
        self.after_s = after_s
        self.interval_s = interval_s
        self.t0 = self.last = time.perf_counter()
        self.done = 0
        self.shown = False

    def tick(self, launch) -> None:
        """One cluster finished."""
        self.done += 1
        self.refresh(launch)

    def refresh(self, launch) -> None:
        """Redraw (rate-limited) without a cluster finishing: long gangs report while they run."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.t0 < self.after_s or (now - self.last < self.interval_s and self.done < self.total):
            return
        self.last = now
        rate = launch.instructions / max(now - self.t0, 1e-9)
        self.stream.write(f"\r[emu] clusters {self.done}/{self.total}  {rate / 1e3:.0f} k warp-instr/s")
        self.shown = True
        if self.done == self.total:
            self.close()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
            self.shown = False
