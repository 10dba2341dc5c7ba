"""Asynchronous copies and the mbarriers that order them: copy completion (by the copy's own mechanism, see
`completion`) before the MMA reads the tile (T4), no refill of a stage an MMA still reads (P16), and no wait on an
mbarrier nothing arrives on (T5).

Addresses are compared through the value resolver. Only provable overlaps are reported (an exact TMA
destination inside an exact MMA operand tile); pipelined loops index stages with loop-carried registers, whose
ranges cannot be told apart, and are left alone rather than flooded with warnings (docs/verifier.md lists this
as a limit).
"""
from __future__ import annotations

from typing import Optional

from bwtriton.ptx.ir import Instruction, Operand

from .completion import after, issue, writes_shared
from .context import Ctx
from .dataflow import may_have_run, run_dataflow, union_states
from .mma_operands import smem_reads as _smem_reads

_WAITS = ("mbarrier.try_wait", "mbarrier.test_wait", "mbarrier.wait")


def is_tma_load(ins: Instruction) -> bool:
    """cp.async.bulk{.tensor} global -> shared completing on an mbarrier."""
    if ins.opcode not in ("cp.async.bulk.tensor", "cp.async.bulk"):
        return False
    mods = ins.modifiers
    sh = next((i for i, m in enumerate(mods) if m.startswith("shared")), None)
    gl = next((i for i, m in enumerate(mods) if m == "global"), None)
    return sh is not None and gl is not None and sh < gl and any(m.startswith("mbarrier") for m in mods)


def barrier_operand(ins: Instruction) -> Optional[Operand]:
    """The mbarrier address operand of a wait, arrive, tcgen05.commit or TMA load."""
    addrs = [o for o in ins.operands if o.kind == "addr"]
    if not addrs:
        return None
    return addrs[-1] if is_tma_load(ins) else addrs[0]


def same_address(ctx: Ctx, a: Optional[Operand], b: Optional[Operand]) -> Optional[bool]:
    """True/False when the two address operands provably hold the same / different shared address."""
    if a is None or b is None:
        return None
    va, vb = ctx.resolver.address(a), ctx.resolver.address(b)
    if va is None or vb is None or va.base is None or va.base != vb.base:
        return None
    if va.lo == va.hi and vb.lo == vb.hi:
        return va.lo == vb.lo
    if va.hi < vb.lo or vb.hi < va.lo:
        return False
    return None


def _tma_dst_in_operand(ctx: Ctx, tma: Instruction, reads) -> bool:
    """Whether the TMA's (exact) destination provably lies inside one of the (exact) operand tiles `reads`."""
    dst = ctx.resolver.address(tma.operands[0]) if tma.operands and tma.operands[0].kind == "addr" else None
    if dst is None or dst.base is None or dst.lo != dst.hi or not reads:
        return False
    return any(rv.base == dst.base and rv.lo == rv.hi and rv.lo <= dst.lo < rv.lo + exact
               for rv, exact, _ in reads)


def check_async_copies(ctx: Ctx) -> None:
    """T4 (a copy into shared memory is complete, by its own mechanism, before an MMA/cp reads the tile) and P16
    (no copy into a tile an MMA/cp not known complete still reads). Completion mechanisms: `completion`."""
    writers = [i for i in ctx.func.instructions if writes_shared(i)]
    readers = [i for i in ctx.func.instructions if i.opcode in ("tcgen05.mma", "tcgen05.cp")]
    if not writers or not readers:
        return
    reads = {r.index: _smem_reads(ctx, r) for r in readers}
    ins_at = ctx.func.instructions
    same: dict = {}

    def covers(wait: Instruction, idx: int) -> bool:
        key = (wait.index, idx)
        if key not in same:
            same[key] = same_address(ctx, barrier_operand(wait), barrier_operand(ins_at[idx])) is not False
        return same[key]

    # state: completion.Pending copies ("w", ...) and ("mma", index, commit index | -1) not known complete
    def step(st, ins, emit):
        if writes_shared(ins):
            if emit:
                for item in st:
                    if item[0] == "mma" and _tma_dst_in_operand(ctx, ins, reads.get(item[1])) \
                            and may_have_run(ctx, ins_at[item[1]]):
                        mma = ins_at[item[1]]
                        what = "TMA" if is_tma_load(ins) else ins.opcode
                        ctx.add("stage-reuse", "P16", "error", ins,
                                f"this {what} overwrites shared memory that the {mma.opcode} at line {mma.line} is "
                                "still reading: wait on the mbarrier its tcgen05.commit arrives on before "
                                "refilling the stage", related=mma.line)
            return st | {issue(ins)}
        if ins.opcode in ("tcgen05.mma", "tcgen05.cp"):
            if emit:
                for item in sorted(st, key=repr):
                    if item[0] == "w" and _tma_dst_in_operand(ctx, ins_at[item[1]], reads.get(ins.index)) \
                            and may_have_run(ctx, ins_at[item[1]]):
                        tma = ins_at[item[1]]
                        what = "TMA" if is_tma_load(tma) else tma.opcode
                        ctx.add("async-copy-unwaited", "T4", "error", ins,
                                f"{ins.opcode} reads the tile the {what} at line {tma.line} is still writing: its "
                                f"completion ({item[2].value}) is not awaited on some path in between",
                                related=tma.line)
            return st | {("mma", ins.index, -1)}
        if ins.opcode == "tcgen05.commit":
            return frozenset(("mma", x[1], ins.index) if x[0] == "mma" and x[2] == -1 else x for x in st)
        if ins.opcode in _WAITS:
            st = frozenset(x for x in st if not (x[0] == "mma" and x[2] >= 0 and covers(ins, x[2])))
        return after(st, ins, covers)

    run_dataflow(ctx, frozenset(), step, union_states)


def _arrives(ins: Instruction) -> bool:
    return ins.opcode in ("mbarrier.arrive", "mbarrier.arrive_drop", "tcgen05.commit", "cp.async.mbarrier.arrive",
                          "mbarrier.expect_tx", "mbarrier.complete_tx") or is_tma_load(ins) or (
        ins.opcode.startswith(("cp.async.bulk", "cp.reduce.async.bulk")) and
        any(m.startswith("mbarrier") for m in ins.modifiers))


def check_barrier_arrivals(ctx: Ctx) -> None:
    """T5: a wait on an mbarrier that no instruction of the kernel can arrive on never completes (deadlock)."""
    waits = [i for i in ctx.func.instructions if i.opcode in _WAITS]
    if not waits:
        return
    arrivals = [i for i in ctx.func.instructions if _arrives(i)]
    if any(a.has("multicast::cluster") or ".shared::cluster" in a.full_opcode and a.opcode != "tcgen05.commit"
           for a in arrivals):
        return  # arrivals from peer CTAs of the cluster: not visible in this CTA's code
    for w in waits:
        bar = barrier_operand(w)
        verdicts = [same_address(ctx, bar, barrier_operand(a)) for a in arrivals]
        if all(v is False for v in verdicts) and ctx.resolver.address(bar) is not None:
            ctx.add("mbarrier-never-arrived", "T5", "error", w,
                    "this waits on an mbarrier that no tcgen05.commit, mbarrier.arrive or TMA of the kernel "
                    "arrives on: the wait never completes (deadlock); wait on the barrier the producer signals")
