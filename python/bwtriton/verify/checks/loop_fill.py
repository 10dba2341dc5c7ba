"""T4 across iterations: an MMA reading, d iterations after it was issued, the stage a TMA of the loop fills, with
no wait on that TMA's mbarrier on the way (a dropped ready wait in a single-partition pipeline).

The exact-address rule (`async_copy`) decides fills whose addresses are constants. In a pipelined loop the TMA of
iteration k fills the stage an MMA reads in iteration k + S - 1; a dataflow carries each TMA not known complete
with the number d of back edges of its loop crossed since its issue (d <= 4), dropped by any wait that may be on
its barrier (a wait whose barrier the value resolver cannot tell apart from the TMA's counts, unless both lie in
one loop and the simulation shows two disjoint periodic rings). At an MMA the pair is decided by `iterations.LoopSimulation` (`loop_refill._Pairs`): the MMA's first
operand address in iteration k + d must lie in the first 16 bytes the TMA writes in iteration k (a TMA box's
inner extent is a multiple of 16 bytes), in one simulated iteration: the MMA then reads bytes whose copy may be
in flight (PTX ISA #data-movement-and-conversion-instructions-cp-async-bulk-tensor: the writes are visible once
the mbarrier's phase completes).
"""
from __future__ import annotations

from typing import Optional

from bwtriton.ptx.ir import Instruction

from .async_copy import _WAITS, barrier_operand, is_tma_load, same_address
from .context import Ctx
from .dataflow import may_have_run, run_dataflow, union_states
from .iterations import LoopSimulation
from .loop_refill import _loop_of, _Pairs, iteration_counter
from .phase_iterations import _on_every_iteration

_MAX_D = 4


_SPAN = 24
_PERIOD = 12


def _ring(sim, ins: Instruction) -> Optional[frozenset]:
    """The barrier addresses `ins` uses over the simulated iterations, when they repeat with a period <= 12 (a
    wrap counter's ring); None when unknown or not periodic."""
    op = barrier_operand(ins)
    seq = [sim.operand(ins, op, k) for k in range(_SPAN)] if op is not None else [None]
    if any(v is None for v in seq):
        return None
    for p in range(1, _PERIOD + 1):
        if all(seq[k] == seq[k + p] for k in range(_SPAN - p)):
            return frozenset(seq)
    return None


def _rings_apart(ctx: Ctx, pairs: _Pairs, wait: Instruction, tma: Instruction) -> bool:
    """A wait and a TMA of one loop whose barriers are two disjoint rings (e.g. the MMA-barrier ring and the
    stage-ready ring of a Triton pipeline, told apart only per iteration)."""
    lp = _loop_of(pairs.loops, wait, tma)
    if lp is None:
        return False
    (latch, header), body = lp
    every = _on_every_iteration(ctx.func, body, header, latch, pairs.loops) | {wait.block, tma.block}
    sim = LoopSimulation(ctx, body, header, latch, every)
    a, b = _ring(sim, wait), _ring(sim, tma)
    return a is not None and b is not None and not (a & b)


def check_loop_fill(ctx: Ctx) -> None:
    """T4: an MMA in a later iteration does not read a stage whose TMA nothing has waited for."""
    ins_at = ctx.func.instructions
    tmas = [i for i in ins_at if is_tma_load(i)]
    if not tmas or not any(i.opcode == "tcgen05.mma" for i in ins_at):
        return
    pairs = _Pairs(ctx)
    if not pairs.loops:
        return
    bodies, edge = iteration_counter(ctx, pairs, _MAX_D)
    looped = set().union(*bodies)
    if not any(t.block in looped for t in tmas):
        return
    same: dict = {}

    def covers(wait: Instruction, tma: int) -> bool:
        if (wait.index, tma) not in same:
            verdict = same_address(ctx, barrier_operand(wait), barrier_operand(ins_at[tma]))
            same[(wait.index, tma)] = verdict is True or verdict is None and not _rings_apart(
                ctx, pairs, wait, ins_at[tma])
        return same[(wait.index, tma)]

    def step(st, ins, emit):
        if is_tma_load(ins) and ins.block in looped:
            return st | {(ins.index, 0)}
        if ins.opcode in _WAITS:
            return frozenset(x for x in st if not covers(ins, x[0]))
        if emit and ins.opcode == "tcgen05.mma":
            for t, d in sorted(st):
                if d >= 1 and may_have_run(ctx, ins_at[t]) and pairs.overlaps(ins, ins_at[t], d, write_later=False):
                    tma = ins_at[t]
                    ctx.add("async-copy-unwaited", "T4", "error", ins,
                            f"this MMA reads the stage the TMA at line {tma.line} filled {d} iteration(s) earlier, "
                            "with no wait on the mbarrier that TMA completes on in between: wait on the stage's "
                            "ready barrier (with the phase's parity) before the MMA", related=tma.line)
                    break
        return st

    run_dataflow(ctx, frozenset(), step, union_states, edge=edge)


__all__ = ["check_loop_fill"]
