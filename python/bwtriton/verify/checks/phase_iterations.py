"""T6 per iteration: a wait whose barrier comes round again in a later iteration must wait on the other parity.

`iterations.LoopSimulation` gives each wait's barrier address and parity in iterations 0 .. N-1 of one run of
its loop. A barrier of the ring is waited on again when its address (an affine form over the loop invariants)
recurs; if every wait on it over those iterations uses one parity, the waits after the first fall through
on the phase already completed (PTX ISA #parallel-synchronization-and-communication-instructions-mbarrier-
test-wait-try-wait: `.parity` waits for the completion of the phase of that parity). This decides the rings
`ptx.stages` does not see as wrapping counters, e.g. Gluon's `i % STAGES` through `mul.hi` with the barrier
address strength-reduced, and frozen parities computed in the loop.
"""
from __future__ import annotations

from bwtriton.ptx.ir import Function

from .async_copy import _WAITS, barrier_operand, same_address
from .context import Ctx
from .iterations import LoopSimulation
from .mbarrier_phase import natural_loops, spin_loop

_ITERATIONS = 24   # covers two rounds of a ring of up to 12 stages


def _on_every_iteration(func: Function, body: frozenset, header: int, latch: int, loops: list) -> frozenset:
    """Blocks of `body` that run in every iteration: on every header -> latch path and in no inner loop
    (spin loops, whose blocks hold only a wait and its branch, are not inner loops here)."""
    inner = set()
    for (u, h), b in loops:
        if h != header and b < body and not spin_loop(func, u, b):
            inner |= b
    out = set()
    for blk in body - inner:
        if blk in (header, latch):
            out.add(blk)
            continue
        seen, work = {header}, [header]
        while work:   # is the latch reachable from the header avoiding blk?
            x = work.pop()
            for s in func.blocks[x].succs:
                if s in body and s != blk and s not in seen and s != header:
                    seen.add(s)
                    work.append(s)
        if latch not in seen:
            out.add(blk)
    return frozenset(out)


def check_parity_per_iteration(ctx: Ctx) -> None:
    """T6: over the simulated iterations of a loop, a recurring barrier waited on with one parity only."""
    waits = [i for i in ctx.func.instructions if i.opcode in _WAITS and i.has("parity") and len(i.operands) >= 3]
    if not waits:
        return
    loops = natural_loops(ctx.func)
    inits = [i for i in ctx.func.instructions if i.opcode in ("mbarrier.init", "mbarrier.inval")]
    flagged = {f.line for f in ctx.findings if f.check == "mbarrier-parity-stuck"}
    for (latch, header), body in loops:
        if spin_loop(ctx.func, latch, body):
            continue
        every = _on_every_iteration(ctx.func, body, header, latch, loops)
        sim = LoopSimulation(ctx, body, header, latch, every)
        events: dict = {}   # barrier value -> [(iteration, wait)]
        parities: dict = {}
        for w in (w for w in waits if w.block in every):
            bar_op = barrier_operand(w)
            seq = [(sim.operand(w, bar_op, k), sim.operand(w, w.operands[2], k)) for k in range(_ITERATIONS)]
            if bar_op is None or any(b is None or p is None for b, p in seq):
                continue
            for k, (b, p) in enumerate(seq):
                events.setdefault(b, []).append((k, w))
                parities.setdefault(b, set()).add(p)
        for bar, evs in events.items():
            rounds = {k for k, _ in evs}
            if len(rounds) < 2 or len(parities[bar]) != 1:
                continue
            w = min(evs, key=lambda e: (e[0], e[1].index))[1]
            if w.line in flagged or any(i.block in body and same_address(ctx, barrier_operand(i), barrier_operand(w))
                                        is not False for i in inits):
                continue   # reported by the invariant-barrier rule, or the ring is re-initialised in the loop
            again = sorted(rounds)[:2]
            flagged.add(w.line)
            ctx.add("mbarrier-parity-stuck", "T6", "error", w,
                    f"this wait's mbarrier comes round again in iteration {again[1]} (after iteration {again[0]}) "
                    "with the same parity: that wait falls through on the phase already completed instead of "
                    "waiting for the next one; flip the parity each time the ring wraps (phase = (i // STAGES) & 1)")


__all__ = ["check_parity_per_iteration"]
