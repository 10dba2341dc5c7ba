"""P11 after a loop: the accumulator read after a pipelined loop needs a wait for the loop's last commit.

A single-partition pipeline commits each iteration's MMAs to a barrier of a ring and waits on that barrier one
iteration later (before refilling the stage the MMAs read), so the in-loop waits never cover the last
iteration's commit: the epilogue's wait after the loop does. The path check (`sync.check_accumulator_sync`)
cannot see this, because a wait on a possibly-equal barrier counts there, and the in-loop wait's barrier is a
loop-carried ring slot. Here `iterations.LoopSimulation` decides it per iteration: for every trip count n
simulated, every wait of the loop body in iteration n - 1 is on a barrier provably other than the one the commit
arrives on in iteration n - 1 (same affine form, other constant). If the loop's exit then leads, through blocks
without a wait or a conditional branch, to a tcgen05.ld of the committed MMAs' accumulator columns, that ld
reads TMEM the last MMAs may still write (PTX ISA #tcgen05-memory-consistency-model-canonical-sync-patterns:
tcgen05.commit -> mbarrier wait -> tcgen05.ld).

The commit's block must run in the last iteration for some thread: it runs in every iteration
(`_on_every_iteration`), or is skipped only by branches on loop-invariant predicates (the warp-0 test around
Triton's MMA block) whose values selecting it z3 proves satisfiable together. Anything unknown decides nothing.
"""
from __future__ import annotations

from bwtriton.ptx.ir import Instruction

from .async_copy import _WAITS, barrier_operand
from .dataflow import _branch_facts
from .context import Ctx
from .exit_parity import _trip_counts
from .iterations import LoopSimulation
from .mbarrier_phase import natural_loops, spin_loop
from .phase_iterations import _on_every_iteration
from .tmem_regions import same_region_overlap, tmem_region

_MASK = 0xFFFFFFFF


def _differ(a, b) -> bool:
    """Two simulated addresses that are provably different: the same affine terms, other constants."""
    return a is not None and b is not None and a[0] == b[0] and (a[1] - b[1]) & _MASK != 0


def _invariant(ctx: Ctx, body: frozenset, reg: str, depth: int = 0) -> bool:
    """`reg` has one value in every iteration: defined outside the loop only, or once inside it (unguarded)
    from such values."""
    defs = ctx.func.definitions(reg)
    inside = [d for d in defs if d.block in body]
    if not inside:
        return True
    if depth > 6 or len(defs) != 1 or defs[0].guard is not None:
        return False
    return all(o.kind != "reg" or _invariant(ctx, body, o.name, depth + 1) for o in defs[0].operands[1:]
               if o.kind in ("reg", "imm", "sreg"))


def _reaches_in_body(ctx: Ctx, body: frozenset, header: int, start: int, goal: int) -> bool:
    seen, work = {start}, [start]
    while work:
        x = work.pop()
        if x == goal:
            return True
        for s in ctx.func.blocks[x].succs:
            if s in body and s != header and s not in seen:
                seen.add(s)
                work.append(s)
    return False


def _runs_every_iteration_for_some_thread(ctx: Ctx, body: frozenset, header: int, latch: int, every: frozenset,
                                          block: int) -> bool:
    """`block` runs in every iteration for the threads that take its side of each loop-invariant branch, and
    those sides are satisfiable together (z3, on the predicates' value keys)."""
    if block in every:
        return True
    succs: dict[int, list[int]] = {b: list(ctx.func.blocks[b].succs) for b in body}
    facts = []
    for b in body:
        last = ctx.func.blocks[b].instructions[-1] if ctx.func.blocks[b].instructions else None
        if last is None or last.opcode != "bra" or last.guard is None or len(succs[b]) != 2:
            continue
        toward = [s for s in succs[b] if s in body and _reaches_in_body(ctx, body, header, s, block)]
        if len(toward) != 1 or not _invariant(ctx, body, last.guard.reg):
            continue
        edge = _branch_facts(ctx, b, toward[0])
        if not edge or any(f[0][0] not in ("eq", "ge") for f in edge):
            return False   # a predicate z3 does not model: whether a thread takes that side is unknown
        facts.extend(edge)
        succs[b] = toward
    # the latch must not be reachable from the header avoiding `block` on the pruned edges
    seen, work = {header}, [header]
    while work:
        x = work.pop()
        for s in succs.get(x, ()):
            if s in body and s != block and s not in seen and s != header:
                seen.add(s)
                work.append(s)
    if latch in seen or header == block:
        return header == block
    return bool(facts) and ctx.facts_oracle.feasible(facts) is True


def _straight_after_exit(ctx: Ctx, body: frozenset, latch: int) -> list[Instruction]:
    """The instructions every thread leaving the loop through its latch runs next, up to the first wait or
    conditional branch: one exit edge, then blocks with a single successor."""
    exits = [s for s in ctx.func.blocks[latch].succs if s not in body]
    if len(exits) != 1:
        return []
    out, b, seen = [], exits[0], set()
    while b not in seen and b not in body:
        seen.add(b)
        nxt = list(ctx.func.blocks[b].succs)
        for ins in ctx.func.blocks[b].instructions:
            if ins.opcode in ("bra", "brx") and ins.guard is not None:
                if ins.opcode != "bra" or not _never_taken(ctx, ins):
                    return out
                nxt = [s for s in nxt if s == b + 1]   # the fall-through
                continue
            if ins.opcode in _WAITS:
                return out
            out.append(ins)
        if len(nxt) != 1:
            return out
        b = nxt[0]
    return out


def _never_taken(ctx: Ctx, bra: Instruction) -> bool:
    """A guarded branch whose guard is set to a constant earlier in its own block that makes it fall through
    (`mov.pred complete, -1; @!complete bra waitLoop`: a spin loop whose wait became a constant). The spin
    loops' `complete` is a register of every wait's own scope, so it is read from the block, not numbered."""
    for ins in reversed(ctx.func.blocks[bra.block].instructions[:ctx.func.blocks[bra.block].instructions.index(bra)]):
        if bra.guard.reg in ins.defs:
            op = ins.operands[1] if ins.opcode == "mov" and ins.guard is None and len(ins.operands) == 2 else None
            return op is not None and op.kind == "imm" and isinstance(op.value, int) and \
                (op.value != 0) == bra.guard.negated
    return False


def _reads_d(ctx: Ctx, ld: Instruction, mma: Instruction) -> bool:
    """The ld's lanes x columns meet the MMA's D tile (both exact TMEM references of one allocation)."""
    return same_region_overlap(tmem_region(ctx, ld), tmem_region(ctx, mma)) is True


def check_exit_read_unwaited(ctx: Ctx) -> None:
    """P11: a tcgen05.ld right after a pipelined loop, of the accumulator of the loop's last commit, with no
    wait on that commit's barrier in the last iteration or after the loop."""
    ins_at = ctx.func.instructions
    if not any(i.opcode == "tcgen05.commit" for i in ins_at):
        return
    loops = natural_loops(ctx.func)
    for (latch, header), body in loops:
        if spin_loop(ctx.func, latch, body) or not ctx.func.blocks[latch].instructions:
            continue
        lds = [i for i in _straight_after_exit(ctx, body, latch) if i.opcode == "tcgen05.ld"]
        commits = [c for c in ins_at if c.opcode == "tcgen05.commit" and c.block in body and c.operands
                   and c.operands[0].kind == "addr"]
        if not lds or not commits:
            continue
        every = _on_every_iteration(ctx.func, body, header, latch, loops)
        sim = LoopSimulation(ctx, body, header, latch, every)
        trips = _trip_counts(sim, ctx.func.blocks[latch].instructions[-1])
        waits = [w for w in ins_at if w.opcode in _WAITS and w.block in body]
        for c in commits:
            if not _runs_every_iteration_for_some_thread(ctx, body, header, latch, every, c.block):
                continue
            csim = sim if c.block in every else LoopSimulation(ctx, body, header, latch, every | {c.block})
            last = [csim.operand(c, c.operands[0], n - 1) for n in trips]
            if any(b is None for b in last):
                continue
            covered = False
            for w in waits:
                wsim = sim if w.block in every else LoopSimulation(ctx, body, header, latch, every | {w.block})
                if not all(_differ(wsim.operand(w, barrier_operand(w), n - 1), b) for n, b in zip(trips, last)):
                    covered = True
                    break
            if covered:
                continue
            group = [m for m in ctx.func.blocks[c.block].instructions if m.opcode == "tcgen05.mma"
                     and m.index < c.index]
            for ld in lds:
                m = next((m for m in group if _reads_d(ctx, ld, m)), None)
                if m is not None:
                    ctx.add("acc-read-unsynced", "P11", "error", ld,
                            f"tcgen05.ld after the loop reads the accumulator of the MMA at line {m.line}, whose "
                            f"last commit (line {c.line}) no wait covers: the loop waits on each commit one "
                            "iteration later, on another barrier of the ring, and nothing after the loop waits "
                            "for the last; wait on that barrier with the loop's next phase before reading (the load "
                            f"reads {tmem_region(ctx, ld)[1]}, the MMA writes {tmem_region(ctx, m)[1]})",
                            related=m.line)


__all__ = ["check_exit_read_unwaited"]
