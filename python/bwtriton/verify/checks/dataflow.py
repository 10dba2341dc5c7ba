"""The path-sensitive forward dataflow the path checks share: predicate facts learned on branch edges prune
infeasible paths (see `run_dataflow`)."""
from __future__ import annotations

from typing import Callable, Iterable, Optional

from bwtriton.ptx.cfg import forward_dataflow

from .context import Ctx


def _fact(ctx: Ctx, reg: str, value: bool) -> tuple[tuple, bool]:
    """A predicate fact in canonical form: keyed by the predicate's *value* when it is a kernel-invariant
    integer comparison (so `K > 0` and a separately computed `K < 1` are one fact, opposite polarity), else by
    the register (("reg", name): killed when the register is redefined)."""
    canon = ctx.numbering.predicate(reg)
    if canon is None:
        return (("reg", reg), value)
    key, flip = canon
    return (key, value != flip)


def _branch_facts(ctx: Ctx, u: int, v: int) -> Optional[tuple[tuple[tuple, bool], ...]]:
    """Predicate facts that hold on edge u -> v of a conditional `@%p bra` (with or/and/not.pred derivations)."""
    if (u, v) in ctx.edge_facts:
        return ctx.edge_facts[(u, v)]
    ctx.edge_facts[(u, v)] = facts = _derive_branch_facts(ctx, u, v)
    return facts


def _derive_branch_facts(ctx: Ctx, u: int, v: int) -> Optional[tuple[tuple[tuple, bool], ...]]:
    blocks = ctx.func.blocks
    last = blocks[u].instructions[-1] if blocks[u].instructions else None
    if last is None or last.opcode != "bra" or last.guard is None or len(blocks[u].succs) < 2:
        return None
    taken = ctx.func.label_block.get(last.targets[0]) if last.targets else None
    if taken is None or taken == u + 1:
        return None
    if len(ctx.func.definitions(last.guard.reg)) != 1:
        return None  # loop-carried or scoped (e.g. try_wait's `complete`): facts would only split paths
    value = (v == taken) != last.guard.negated
    facts = [(last.guard.reg, value)]
    work = [(last.guard.reg, value)]
    while work and len(facts) < 16:
        reg, val = work.pop()
        defs = ctx.func.definitions(reg)
        if len(defs) != 1:
            continue
        d = defs[0]
        srcs = [o for o in d.operands[1:] if o.kind == "reg"]
        derived = []
        if d.opcode == "or" and not val:
            derived = [(o.name, o.negated) for o in srcs]        # a|b false -> a false, b false
        elif d.opcode == "and" and val:
            derived = [(o.name, not o.negated) for o in srcs]    # a&b true -> a true, b true
        elif d.opcode == "not" and srcs:
            derived = [(srcs[0].name, not val)]
        for f in derived:
            if f not in facts:
                facts.append(f)
                work.append(f)
    canonical: dict[tuple, bool] = {}
    for reg, val in facts:
        key, cval = _fact(ctx, reg, val)
        if canonical.setdefault(key, cval) != cval:
            return None  # the branch contradicts itself: leave the edge alone rather than guess
    return tuple(canonical.items())


_MAX_BUNDLES = 64


def run_dataflow(ctx: Ctx, init: frozenset, step: Callable, join: Callable[[Iterable], frozenset],
                 on_exit: Optional[Callable] = None, edge: Optional[Callable] = None) -> None:
    """Path-sensitive (on branch predicates) set dataflow; replays the fixpoint once with `emit` enabled.

    The state is a set of bundles (facts, payload): `facts` are predicate values learned from conditional
    branches (killed when the predicate is redefined); an edge contradicting a bundle's facts drops the bundle,
    which removes infeasible paths such as "MMA issued under !%p2 ... wait skipped under %p2".
    """
    func = ctx.func
    # facts keyed by a register die when it is redefined; value-keyed facts (invariant comparisons) never do
    pred_defs = {ins.index: frozenset(("reg", r) for r in ins.defs) for ins in func.instructions if ins.defs}

    def norm(bundles) -> frozenset:
        by_facts: dict = {}
        for facts, payload in bundles:
            by_facts[facts] = join([by_facts[facts], payload]) if facts in by_facts else payload
        if len(by_facts) > _MAX_BUNDLES:  # too many paths: forget the facts, keep the payload
            return frozenset([(frozenset(), join(list(by_facts.values())))])
        return frozenset(by_facts.items())

    def run_block(block, bundles, emit):
        out = []
        for facts, payload in bundles:
            for ins in block.instructions:
                payload = step(payload, ins, emit)
                killed = pred_defs.get(ins.index)
                if killed and facts:
                    facts = frozenset(f for f in facts if f[0] not in killed)
            out.append((facts, payload))
        return out

    def transfer(block, bundles):
        return norm(run_block(block, bundles, False))

    def edge_fn(u, v, bundles):
        facts_uv = _branch_facts(ctx, u, v)
        out = []
        for facts, payload in bundles:
            if edge is not None:
                payload = edge(u, v, payload)
            if facts_uv:
                d = dict(facts)
                if any(d.get(r, val) != val for r, val in facts_uv):
                    continue  # infeasible for this bundle
                facts = facts | frozenset(facts_uv)
            out.append((facts, payload))
        return frozenset(out)

    def join_bundles(states):
        allb = []
        for s in states:
            allb.extend(s)
        return norm(allb)

    ins_states = forward_dataflow(func, frozenset([(frozenset(), init)]), transfer, join_bundles, edge_fn)
    for b in func.blocks:
        if b.id not in ins_states:
            continue
        outs = run_block(b, ins_states[b.id], True)
        if b.terminal == "exit" and on_exit is not None:
            for _, payload in outs:
                on_exit(payload, b)


def union_states(states: Iterable[frozenset]) -> frozenset:
    """Join of set states: the union (a "may" analysis)."""
    out = frozenset()
    for s in states:
        out |= s
    return out
