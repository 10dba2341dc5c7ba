"""The grid scheduler: which clusters of a launch run, and when (`GridSchedule`, `run_grid`).

A launch has `workers` slots (the SMs that are free for it; default 1: one cluster after the other). The first
`workers` clusters of the launch order start; whenever one finishes, its slot starts the next cluster that is
neither started nor cancelled. Started clusters interleave round-robin (every warp a quantum of instructions per
round). `seed` shuffles the launch order and each round's order, so tests can run many schedules. CLC's
`try_cancel` (isa/clc.py) atomically takes the next cluster of the launch order that has not started
(`GridSchedule.cancel`), so with fewer workers than clusters stealing really happens.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Optional

from ...errors import InputError
from .scheduler import check_budget, cluster_done, finish_cluster, start_cluster, step_cluster


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
