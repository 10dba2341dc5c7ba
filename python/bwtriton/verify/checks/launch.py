"""Checks of how the kernel is built and launched: T1 (trap-only entry), P1 (one cta_group), P18 (cluster for
cta_group::2), P6 (.sync.aligned), P7 (single-thread issue)."""
from __future__ import annotations

from bwtriton.ptx.cfg import reachable_blocks
from bwtriton.ptx.smt import z3

from .context import Ctx, cta_group_of
from .dataflow import IMPRECISE, run_dataflow


def check_trap_only(ctx: Ctx) -> None:
    """T1: an entry whose every path ends in `trap` (Triton's answer to resource overflow)."""
    f = ctx.func
    if not f.is_entry or not f.blocks:
        return
    reach = reachable_blocks(f)
    traps = [b for b in reach if f.blocks[b].terminal == "trap"]
    exits = [b for b in reach if f.blocks[b].terminal == "exit"]
    if traps and not exits:
        line = f.blocks[traps[0]].instructions[-1].line
        real = [i for i in f.instructions if i.opcode not in ("trap", "ret", "exit")]
        what = "whose whole body is `trap`" if not real else "on which every path ends in `trap`"
        ctx.add("trap-only-body", "T1", "error", line,
                f"entry {f.name} is a kernel {what}: it can never do useful work. Triton 3.6 emits this when "
                "a kernel over-subscribes a resource (e.g. accumulators needing more than 512 TMEM columns); "
                "shrink the tile/accumulators or the number of stages")


def check_cta_group(ctx: Ctx) -> None:
    """P1: one cta_group for every tcgen05 instruction of the kernel."""
    groups = [(cta_group_of(i), i) for i in ctx.func.instructions if i.is_tcgen05 and cta_group_of(i)]
    if not groups:
        return
    first = groups[0]
    for g, ins in groups[1:]:
        if g != first[0]:
            ctx.add("cta-group-mixed", "P1", "error", ins,
                    f"{ins.full_opcode} uses cta_group::{g} but line {first[1].line} uses cta_group::{first[0]}; "
                    "all tcgen05 instructions of a kernel must use the same .cta_group", related=first[1].line)


def check_cluster(ctx: Ctx) -> None:
    """P18: cta_group::2 needs a cluster of (an even number >= 2 of) CTAs."""
    two = [i for i in ctx.func.instructions if i.is_tcgen05 and cta_group_of(i) == 2]
    if not two:
        return
    size = ctx.func.cluster_size
    if size is None:
        ctx.add("cta-group2-cluster", "P18", "warning", two[0],
                "cta_group::2 is used but the entry declares no .reqnctapercluster: it only works when launched "
                "with a cluster of 2 (or an even number of) CTAs; declare `.reqnctapercluster 2` / "
                "`.explicitcluster` (Triton: num_ctas=2)")
    elif size < 2 or size % 2:
        ctx.add("cta-group2-cluster", "P18", "error", two[0],
                f"cta_group::2 needs CTA pairs but .reqnctapercluster gives {size} CTA(s) per cluster; "
                "use an even cluster size (Triton: num_ctas=2)")


def check_sync_aligned(ctx: Ctx) -> None:
    """P6: warp-collective tcgen05 instructions must be .sync.aligned."""
    for ins in ctx.func.instructions:
        if ins.opcode in ("tcgen05.alloc", "tcgen05.dealloc", "tcgen05.relinquish_alloc_permit", "tcgen05.ld",
                          "tcgen05.st", "tcgen05.wait") and not (ins.has("sync") and ins.has("aligned")):
            ctx.add("not-sync-aligned", "P6", "error", ins,
                    f"{ins.opcode} is warp-collective and must carry .sync.aligned")


def check_single_thread_issue(ctx: Ctx) -> None:
    """P7: mma/cp/commit/shift start one operation per issuing thread: expect an elect/predicate guard."""
    for ins in ctx.func.instructions:
        if ins.opcode in ("tcgen05.mma", "tcgen05.cp", "tcgen05.commit", "tcgen05.shift") and ins.guard is None:
            ctx.add("unguarded-issue", "P7", "warning", ins,
                    f"{ins.opcode} is issued by every thread that reaches it (no predicate guard): each thread "
                    "starts its own operation; guard it with an elect.sync predicate")


_IDENTIFY_CTA = ("%cluster_ctarank", "%cluster_ctaid.x", "%cluster_ctaid.y", "%cluster_ctaid.z", "%ctaid.x",
                 "%ctaid.y", "%ctaid.z")


def check_leader_issue(ctx: Ctx) -> None:
    """P18: a cta_group::2 mma/commit/cp acts for both CTAs of the pair, so only the leader (even
    %cluster_ctarank) may issue it: the path's branch facts and the instruction's guard must imply an even rank."""

    issuers = [i for i in ctx.func.instructions if i.opcode in ("tcgen05.mma", "tcgen05.commit", "tcgen05.cp")
               and cta_group_of(i) == 2]
    tr = ctx.facts_oracle.translator
    if not issuers or z3 is None or tr is None:
        return
    reads_cta_id = any(o.kind == "sreg" and o.name in _IDENTIFY_CTA for i in ctx.func.instructions
                       for o in i.operands)
    rank = tr.fresh(("sreg", "%cluster_ctarank"), 32)
    todo = {i.index for i in issuers}

    def step(payload, ins, emit):
        if not (emit and ins.index in todo):
            return payload
        facts = set(ctx.current_facts)
        undecided = IMPRECISE in facts or any(f[0][0] == "reg" for f in facts)
        if ins.guard is not None:
            canon = ctx.numbering.predicate(ins.guard.reg)
            if canon is not None:
                facts.add((canon[0], (not ins.guard.negated) != canon[1]))
        if ctx.facts_oracle.solve(facts, [rank & 1 == 1]) is None:
            return payload  # only an even-ranked (leader) CTA reaches it
        if reads_cta_id and undecided:
            ctx.add("cta-group2-leader", "P18", "warning", ins,
                    f"could not prove that only the leader CTA (even %cluster_ctarank) issues this cta_group::2 "
                    f"{ins.opcode}; the peer CTA must not issue it")
        else:
            ctx.add("cta-group2-leader", "P18", "error", ins,
                    f"this cta_group::2 {ins.opcode} can be issued by the odd (peer) CTA of the pair as well: it "
                    "acts for both CTAs, so guard it with %cluster_ctarank % 2 == 0 (the leader only)")
        return payload

    run_dataflow(ctx, frozenset([0]), step, lambda states: frozenset().union(*states))
