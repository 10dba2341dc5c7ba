"""T6 after a loop: the wait after a pipelined loop waits on the phase the loop's own wait would wait on next.

A single-partition pipeline commits each iteration's MMAs to a barrier of a ring and, in the next iteration,
waits on that barrier with the ring's loop-carried phase before refilling the stage (Triton: `mbarrier.try_wait
[bar_prev], phase_prev` at the top of iteration k for the commit of iteration k - 1). After the last iteration the
epilogue waits for the last commit, which is exactly the wait the loop would have made at the top of iteration n:
same barrier, same parity. A wait after the loop on that barrier with the *other* parity waits for the phase
before, which has completed already (or, on a barrier's first phase, counts as complete: PTX ISA
#parallel-synchronization-and-communication-instructions-mbarrier-test-wait-try-wait), so it falls through while
the last MMAs are in flight and the accumulator read after it races them. The loop's wait is taken as the
one for the previous iteration's commit only when, in every iteration n simulated, its barrier is the one a
commit of the loop arrived on in iteration n - 1 (a wait lagging further behind has an older phase).

`iterations.LoopSimulation` gives the loop wait's (barrier, parity) in iteration n and the registers' values at
the end of iteration n - 1, from which the wait after the loop computes its own (through its def chain outside
the loop: `xor`, `add`, ...). An error needs, for every trip count simulated (1 .. 24, or the one the latch's branch
gives when it simulates to constants), the same barrier and the opposite parity; any unknown value decides
nothing.
"""
from __future__ import annotations

from typing import Optional

from bwtriton.ptx.ir import Instruction, Operand

from .async_copy import _WAITS, barrier_operand
from .context import Ctx
from .iterations import Affine, LoopSimulation, _add, _apply, _const
from .mbarrier_phase import natural_loops, spin_loop
from .phase_iterations import _on_every_iteration

_TRIPS = 24
_DEPTH = 16


def _exit_value(ctx: Ctx, sim: LoopSimulation, body: frozenset, latch_end: Instruction, op: Operand, n: int,
                depth: int = 0) -> Optional[Affine]:
    """The value of `op` after the loop ran n iterations and left through its latch (None when unknown)."""
    if op.kind == "imm" and isinstance(op.value, int):
        return _const(op.value)
    if op.kind == "addr":
        base = _exit_value(ctx, sim, body, latch_end, op.base, n, depth + 1) if op.base is not None else _const(0)
        return None if base is None else _add(base, _const(op.offset or 0))
    if op.kind != "reg" or op.negated or depth > _DEPTH:
        return None
    defs = ctx.func.definitions(op.name)
    inside = [d for d in defs if d.block in body]
    if inside:
        return sim.operand(latch_end, op, n - 1) if len(defs) == len(inside) or _outside_before(ctx, defs, body) \
            else None
    if len(defs) != 1 or defs[0].guard is not None or defs[0].defs != (op.name,):
        return None
    d = defs[0]
    vals = [_exit_value(ctx, sim, body, latch_end, o, n, depth + 1) for o in d.operands[1:]]
    return None if None in vals and d.opcode != "selp" else _apply(d, vals)


def _outside_before(ctx: Ctx, defs: list, body: frozenset) -> bool:
    """The register's definitions outside the loop are its entry values only (none after the loop)."""
    first = min(b for b in body)
    return all(d.block < first for d in defs if d.block not in body)


def _trip_counts(sim: LoopSimulation, latch_end: Instruction) -> range:
    """The trip counts to check: the one the latch's branch gives when it simulates to constants (a loop over
    a compile-time K), else every count from 1 to 24. The latch's conditional branch is either the back edge
    (`@%p bra header`, falling through to the exit) or the exit (`@!%p bra exit`, falling through to the header,
    as Triton 3.8+ lays out the rotated loop)."""
    g = latch_end.guard
    if latch_end.opcode != "bra" or g is None:
        return range(1, _TRIPS + 1)
    back_when_taken = _branch_is_back_edge(sim, latch_end)
    if back_when_taken is None:
        return range(1, _TRIPS + 1)
    for k in range(_TRIPS):
        v = sim.operand(latch_end, Operand("reg", g.reg, name=g.reg), k)
        if v is None or v[0]:
            return range(1, _TRIPS + 1)
        taken = bool(v[1]) != g.negated
        if taken != back_when_taken:   # the back edge is not taken: the loop ran k + 1 times
            return range(k + 1, k + 2)
    return range(1, _TRIPS + 1)


def _branch_is_back_edge(sim: LoopSimulation, bra: Instruction) -> Optional[bool]:
    """True when the latch's branch jumps to the loop header, False when it jumps out of the loop (the back
    edge is then the fall-through), None when its target is unresolved or another block of the loop."""
    blocks = [sim.ctx.func.label_block.get(t) for t in bra.targets]
    if not blocks or None in blocks:
        return None
    if all(b == sim.header for b in blocks):
        return True
    if all(b not in sim.body for b in blocks):
        return False
    return None


def _loop_exits_to(ctx: Ctx, body: frozenset, latch: int, wait: Instruction) -> bool:
    """`wait` lies after the loop: outside its body and reachable from the latch's exit edge."""
    if wait.block in body:
        return False
    exits = [s for s in ctx.func.blocks[latch].succs if s not in body]
    if not exits:
        return False
    seen, work = set(exits), list(exits)
    while work:
        b = work.pop()
        if b == wait.block:
            return True
        for s in ctx.func.blocks[b].succs:
            if s not in seen and s not in body:
                seen.add(s)
                work.append(s)
    return False


def check_exit_wait_parity(ctx: Ctx) -> None:
    """T6: a wait after a loop on the barrier the loop's next wait would use, with the opposite parity."""
    waits = [i for i in ctx.func.instructions if i.opcode in _WAITS and i.has("parity") and len(i.operands) >= 3]
    if len(waits) < 2:
        return
    loops = natural_loops(ctx.func)
    flagged = {f.line for f in ctx.findings if f.check.startswith("mbarrier-parity")}
    for (latch, header), body in loops:
        if spin_loop(ctx.func, latch, body) or not ctx.func.blocks[latch].instructions:
            continue
        every = _on_every_iteration(ctx.func, body, header, latch, loops)
        inner = [w for w in waits if w.block in every]
        after = [w for w in waits if w.line not in flagged and _loop_exits_to(ctx, body, latch, w)]
        if not inner or not after:
            continue
        sim = LoopSimulation(ctx, body, header, latch, every)
        latch_end = ctx.func.blocks[latch].instructions[-1]
        trips = _trip_counts(sim, latch_end)
        loop_seq = {w.index: [(sim.operand(w, barrier_operand(w), n), sim.operand(w, w.operands[2], n))
                              for n in trips] for w in inner}
        # the barriers the loop's commits arrive on, per iteration (iteration n - 1 for trip count n); a commit
        # under a condition (Triton skips the MMA block of a masked k-tile) is evaluated as if its block ran
        commit_seq = []
        for c in ctx.func.instructions:
            if c.opcode != "tcgen05.commit" or c.block not in body or not c.operands or c.operands[0].kind != "addr":
                continue
            csim = sim if c.block in every else LoopSimulation(ctx, body, header, latch, every | {c.block})
            commit_seq.append([csim.operand(c, c.operands[0], n - 1) for n in trips])
        for w in after:
            seq = [(_exit_value(ctx, sim, body, latch_end, barrier_operand(w), n),
                    _exit_value(ctx, sim, body, latch_end, w.operands[2], n)) for n in trips]
            if any(b is None or p is None or p[0] for b, p in seq):
                continue
            for lw in inner:
                ls = loop_seq[lw.index]
                if any(b is None or p is None or p[0] for b, p in ls):
                    continue
                # the loop's wait in iteration n is for the commit of iteration n - 1 (lag one), so its parity is
                # the phase of the last commit after n iterations
                if not any(all(cb is not None and cb == lb for cb, (lb, _) in zip(cs, ls)) for cs in commit_seq):
                    continue
                if all(b == lb and (p[1] ^ lp[1]) & 1 for (b, p), (lb, lp) in zip(seq, ls)):
                    flagged.add(w.line)
                    ctx.add("mbarrier-parity-stale", "T6", "error", w,
                            f"this wait after the loop uses the barrier the loop's wait (line {lw.line}) would use "
                            "next, with the opposite parity: it waits for the phase before, which has completed "
                            "already, and falls through while the loop's last commit is pending; wait with the "
                            "loop's phase (the parity its next wait would use)", related=lw.line)
                    break


__all__ = ["check_exit_wait_parity"]
