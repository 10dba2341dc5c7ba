"""P13, named barriers: an accumulator released by one thread must be read completely by every reader first.

Triton's and Gluon's epilogue partitions read the accumulator with `tcgen05.ld` in all their warps, then
`tcgen05.wait::ld`, then `bar.sync id, count` (a named barrier over the partition's warps), and only then one
thread arrives on the accumulator's `empty` mbarrier (init count 1), handing the columns back to the MMA warp.
The named barrier is the ordering: without it the single arrival releases the columns while the other warps'
loads may still be pending, and the next tile's MMA overwrites them (PTX ISA
#parallel-synchronization-and-communication-instructions-bar (bar.sync waits for `count` threads of barrier
`id`), #tcgen05-instructions-tcgen05-wait (only wait::ld completes a thread's tcgen05.ld)).

Checked as a dataflow over the reader's paths: a tcgen05.ld of columns another thread's MMA writes leaves a
token ("pending"); `tcgen05.wait::ld` turns it into "own reads complete"; a blocking CTA barrier (`bar.sync`,
`barrier.sync`, `bar.red`, `barrier.cluster.wait`) clears it. An `mbarrier.arrive` reached with a pending token
is an error (the thread's own loads are not complete); reached with "own reads complete" it is an error when the
arrive's guard is false for some thread on the same path (z3 finds one): that thread read the columns too and
nothing orders its reads before the release. Only releases some thread waits on before an MMA into the columns
count (a single-tile kernel's last release hands the accumulator to no one). A barrier whose count leaves out
some readers is not detected.
"""
from __future__ import annotations

from bwtriton.ptx.ir import Instruction

from .async_copy import _WAITS, barrier_operand, same_address
from .context import Ctx
from .cross_warp import _overlap, reaches, tmem_extent
from .dataflow import IMPRECISE, may_have_run, run_dataflow, union_states

def _blocking_barrier(ins: Instruction) -> bool:
    """bar.sync / barrier.sync / bar.red (CTA or named barrier, waits for its count) or barrier.cluster.wait;
    not bar.arrive (does not wait) nor bar.warp.sync (one warp)."""
    if ins.opcode in ("bar", "barrier"):
        return ins.has("sync") or ins.has("red")
    return ins.opcode == "barrier.cluster" and ins.has("wait")


def _guard_false_somewhere(ctx: Ctx, ins: Instruction, facts) -> bool:
    """A thread on this path (its facts) for which the guard of `ins` is false."""
    tr = ctx.facts_oracle.translator
    if ins.guard is None or tr is None or IMPRECISE in facts:
        return False
    pred = ctx.numbering.predicate(ins.guard.reg)
    if pred is None:
        return False
    key, flip = pred
    false = tr.fact(key, flip != ins.guard.negated)   # the guard's value is (key holds) xor flip xor negated
    return false is not None and ctx.facts_oracle.solve(facts, [false]) is not None


def check_release_order(ctx: Ctx) -> None:
    """P13: the reads of every warp before a single-thread release of the accumulator (named barrier)."""
    ins_at = ctx.func.instructions
    mmas = [i for i in ins_at if i.opcode == "tcgen05.mma"]
    lds = [i for i in ins_at if i.opcode == "tcgen05.ld"]
    arrives = [i for i in ins_at if i.opcode == "mbarrier.arrive" and not i.has("expect_tx")]
    if not (mmas and lds and arrives):
        return
    d_cols = {m.index: tmem_extent(ctx, m) for m in mmas}
    readers = set()
    for ld in lds:
        cols = tmem_extent(ctx, ld)
        if any(_overlap(cols, d_cols[m.index]) and not reaches(ctx, m, ld) and not reaches(ctx, ld, m)
               for m in mmas):
            readers.add(ld.index)   # reads another thread's accumulator: the epilogue
    # a release matters only if some thread waits on its barrier before an MMA into the columns (the next tile's
    # MMA); a single-tile kernel's final release hands the accumulator to no one
    waits = [i for i in ins_at if i.opcode in _WAITS]
    writers = [m for m in mmas if any(_overlap(d_cols[m.index], tmem_extent(ctx, ins_at[r])) for r in readers)]
    releases = {a.index for a in arrives if any(reaches(ctx, ins_at[r], a) for r in readers)
                and any(reaches(ctx, w, m) and same_address(ctx, barrier_operand(w), barrier_operand(a)) is not False
                        for w in waits for m in writers)}
    if not releases:
        return

    def step(st, ins, emit):
        if ins.index in readers:
            return st | {("pending", ins.index)}
        if ins.opcode == "tcgen05.wait" and ins.has("ld"):
            return frozenset(("complete", x[1]) if x[0] == "pending" else x for x in st)
        if _blocking_barrier(ins):
            return frozenset(x for x in st if x[0] != "complete")
        if ins.index in releases and st and emit and may_have_run(ctx, ins):
            pending = sorted(x[1] for x in st if x[0] == "pending")
            if pending:
                ctx.add("acc-release-early", "P13", "error", ins,
                        f"this arrive hands the accumulator back while the tcgen05.ld at line "
                        f"{ins_at[pending[0]].line} may still be reading it: tcgen05.wait::ld first",
                        related=ins_at[pending[0]].line)
            elif _guard_false_somewhere(ctx, ins, ctx.current_facts):
                ld = ins_at[min(x[1] for x in st)]
                ctx.add("acc-release-early", "P13", "error", ins,
                        f"only some threads arrive here, handing the accumulator back, but nothing orders the "
                        f"other warps' tcgen05.ld (line {ld.line}) before it: put a named barrier (bar.sync id, "
                        "count over the reading warps) between their tcgen05.wait::ld and this arrive",
                        related=ld.line)
        return st

    run_dataflow(ctx, frozenset(), step, union_states)


__all__ = ["check_release_order"]
