"""The path-sensitive forward dataflow the path checks share: predicate facts learned on branch edges prune
infeasible paths (see `run_dataflow`)."""
from __future__ import annotations

from typing import Callable, Iterable, Optional

from bwtriton.ptx.cfg import forward_dataflow
from bwtriton.ptx.ir import Instruction
from bwtriton.ptx.smt import _leaves_of

from .context import Ctx


def _fact(ctx: Ctx, reg: str, value: bool) -> tuple[tuple, bool]:
    """A predicate fact in canonical form: keyed by the predicate's *value* when it is a kernel-invariant
    integer comparison (so `K > 0` and a separately computed `K < 1` are one fact, opposite polarity), else by
    the register (("reg", name): killed when the register is redefined)."""
    canon = ctx.numbering.predicate(reg)
    if canon is None:
        twin = _twin_setp(ctx, reg)
        return (("reg", reg), value) if twin is None else (("reg", twin[0]), value != twin[1])
    key, flip = canon
    return (key, value != flip)


_COMPLEMENT = {"lt": "ge", "ge": "lt", "le": "gt", "gt": "le", "eq": "ne", "ne": "eq"}


def _twin_setp(ctx: Ctx, reg: str) -> Optional[tuple[str, bool]]:
    """(earlier predicate, flip) when `reg` is set by a setp comparing the same registers as an earlier setp of
    its block, with nothing redefining them in between: Triton's `setp.lt %p43, %i, %n; setp.ge %p44, %i, %n`
    on a loop counter (no invariant key) are then one fact, so "wait skipped under !%p43, MMAs issued under
    !%p44" is seen as infeasible. Integer comparisons only (a float NaN makes `lt` and `ge` both false)."""
    memo = ctx.edge_facts
    mkey = ("twin-setp", reg)
    if mkey in memo:
        return memo[mkey]
    memo[mkey] = None
    defs = ctx.func.definitions(reg)
    if len(defs) != 1 or defs[0].opcode != "setp" or defs[0].guard is not None or len(defs[0].operands) != 3:
        return None
    d = defs[0]
    rel = next((m for m in d.modifiers if m in _COMPLEMENT), None)
    if rel is None or len(d.modifiers) != 1 or not d.types or d.types[0][:1] not in ("s", "u", "b"):
        return None
    srcs = [o.text for o in d.operands[1:]]
    block = ctx.func.blocks[d.block].instructions
    at = block.index(d)
    for prev in reversed(block[:at]):
        if prev.opcode == "setp" and prev.guard is None and len(prev.defs) == 1 and prev.types == d.types \
                and len(prev.modifiers) == 1 and [o.text for o in prev.operands[1:]] == srcs \
                and len(ctx.func.definitions(prev.defs[0])) == 1 and prev.defs[0] not in srcs:
            prel = prev.modifiers[0]
            if prel == rel or prel == _COMPLEMENT[rel]:
                memo[mkey] = (prev.defs[0], prel != rel)
                return memo[mkey]
        if any(o.kind == "reg" and o.name in prev.defs for o in d.operands[1:]):
            return None   # an operand redefined between the two comparisons
    return None


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
    return _predicate_facts(ctx, last.guard.reg, (v == taken) != last.guard.negated)


def _guard_facts(ctx: Ctx, ins: Instruction) -> tuple:
    """Facts that hold whenever the guarded `ins` executes (its predicate is true), cached; () if unguarded."""
    cache = ctx.edge_facts
    key = ("guard", ins.index)
    if key not in cache:
        g = ins.guard
        facts = None
        if g is not None and len(ctx.func.definitions(g.reg)) == 1:
            facts = _predicate_facts(ctx, g.reg, not g.negated)
        cache[key] = facts or ()
    return cache[key]


def _predicate_facts(ctx: Ctx, reg0: str, value: bool) -> Optional[tuple[tuple[tuple, bool], ...]]:
    """Canonical facts implied by predicate register `reg0` having truth `value` (through and/or/not.pred)."""
    facts = [(reg0, value)]
    work = [(reg0, value)]
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
#: fact marking a bundle whose path facts were forgotten (too many paths, or the solver gave up): findings on
#: it are not known to be on a feasible path, so they are reported as warnings, never errors
IMPRECISE = (("imprecise",), True)


def _fact_leaves(fact) -> frozenset:
    """Leaf values a path fact depends on (its comparison key, or the value a per-path register holds)."""
    key, val = fact
    if key[0] in ("val", "pval"):
        return _leaves_of(val[0] if key[0] == "pval" else val)
    return _leaves_of(key) if key[0] in ("eq", "ge") else frozenset()


class PathValues:
    """Per-path values of loop-carried registers that branch conditions compare.

    A loop counter such as `%r931` has two definitions (`add %r931, %r374, -1` before the loop, `add %r931,
    %r931, -1` in the latch), so it has no kernel-invariant key. On a path that has just executed the first
    definition, though, its value *is* that invariant expression, and the loop-exit test `setp.eq %p377, %r931,
    0` evaluated on the first iteration is a fact about `max(cdiv(K, 64), 1) - 1`, which the solver can relate
    to the prologue's `K + 63 < 64` guard. These per-path values live in a bundle's facts as
    (("val", reg), key) and (("pval", pred), (key, flip)); redefining the register kills them."""

    def __init__(self, ctx: Ctx) -> None:
        func, num = ctx.func, ctx.numbering
        self.num = num
        tracked: set[str] = set()
        setps, self.fact_regs = self._branch_setps(ctx)
        for setp in setps:
            for o in setp.operands[1:]:
                if o.kind == "reg" and len(func.definitions(o.name)) > 1:
                    tracked.add(o.name)
        self.fact_regs |= tracked
        self.def_key: dict[int, tuple[str, Optional[tuple]]] = {}   # ins index -> (reg, invariant key | None)
        self.setps: dict[int, Instruction] = {}                    # setp reading a tracked register
        for ins in func.instructions:
            if len(ins.defs) == 1 and ins.defs[0] in tracked:
                key = num._expr(ins, 1) if ins.guard is None and ins.opcode != "setp" else None
                self.def_key[ins.index] = (ins.defs[0], key)
            if ins.opcode == "setp" and len(ins.defs) == 1 and any(
                    o.kind == "reg" and o.name in tracked for o in ins.operands[1:]):
                self.setps[ins.index] = ins
        # registers that name values in facts ("var" leaves): facts about them die when they are redefined
        self.var_regs: set[str] = set()
        for setp in setps:
            canon = num.predicate(setp.defs[0]) if len(setp.defs) == 1 else None
            if canon is not None:
                self.var_regs.update(k[1] for k in _leaves_of(canon[0]) if k[0] == "var")
        for _, key in self.def_key.values():
            if key is not None:
                self.var_regs.update(k[1] for k in _leaves_of(key) if k[0] == "var")
        for setp in self.setps.values():
            self.var_regs.update(o.name for o in setp.operands[1:] if o.kind == "reg")
        #: instructions whose effect on the facts must be replayed (the others leave every path's facts alone)
        self.relevant = frozenset(i.index for i in func.instructions
                                  if i.index in self.def_key or self.fact_regs.intersection(i.defs)
                                  or self.var_regs.intersection(i.defs))

    @staticmethod
    def _branch_setps(ctx: Ctx) -> tuple[list[Instruction], set[str]]:
        """The setp instructions branch guards derive from, and every predicate register a fact can be keyed by."""
        func, out, seen = ctx.func, [], set()
        work = [i.guard.reg for i in func.instructions if i.opcode == "bra" and i.guard is not None]
        while work:
            reg = work.pop()
            if reg in seen:
                continue
            seen.add(reg)
            defs = func.definitions(reg)
            if len(defs) != 1:
                continue
            d = defs[0]
            if d.opcode == "setp":
                out.append(d)
            elif d.opcode in ("and", "or", "not", "mov"):
                work.extend(o.name for o in d.operands[1:] if o.kind == "reg")
        return out, seen

    def step(self, facts: frozenset, ins: Instruction) -> frozenset:
        """Facts after `ins` on this path: kill what it redefines, add the per-path values it computes."""
        if not ins.defs or ins.index not in self.def_key and (
                not facts or not (self.fact_regs.intersection(ins.defs) or self.var_regs.intersection(ins.defs))):
            return facts  # nothing on this path is keyed by what `ins` writes
        killed = set()
        for r in ins.defs:
            killed.update((("reg", r), ("val", r), ("pval", r)))
        out = frozenset(f for f in facts if f[0] not in killed) if facts else facts
        dead_vars = {("var", r) for r in ins.defs if r in self.var_regs}
        if dead_vars and out:
            out = frozenset(f for f in out if not (_fact_leaves(f) & dead_vars))
        dk = self.def_key.get(ins.index)
        if dk is not None and dk[1] is not None:
            out = out | {(("val", dk[0]), dk[1])}
        setp = self.setps.get(ins.index)
        if setp is not None:
            vals = {f[0][1]: f[1] for f in out if f[0][0] == "val"}

            def key_of(op, width):
                if op.kind == "reg" and op.name in vals:
                    return vals[op.name]
                return self.num.key(op, width)

            canon = self.num.comparison(setp, key_of)
            if canon is not None:
                out = out | {(("pval", setp.defs[0]), canon)}
        return out

    @staticmethod
    def resolve(facts: frozenset, edge_facts) -> list[tuple]:
        """Edge facts with register-keyed predicates replaced by their per-path value, where this path has one."""
        pvals = {f[0][1]: f[1] for f in facts if f[0][0] == "pval"}
        out = []
        for key, val in edge_facts:
            out.append((key, val))
            if key[0] == "reg" and key[1] in pvals:
                canon, flip = pvals[key[1]]
                out.append((canon, val != flip))
        return out


def _guard_contradicts(ctx: Ctx, ins: Instruction, known: dict) -> bool:
    """Whether the path's facts say the guard of `ins` is false (so `ins` does not execute on this path): an
    opposite fact of the same key, or (z3) no thread satisfies the path's facts and the guard together, e.g. a
    copy guarded by `(tid & 127) < 32` on the path where the warp index broadcast by shfl is not 0."""
    guard = _guard_facts(ctx, ins)
    if any(known.get(k, v) != v for k, v in guard):
        return True
    # only facts about the thread index go to z3 here (fewer constraints: a sound, cheap under-approximation of
    # what contradicts; branch facts about sizes are related on the edges already)
    thread_guard = frozenset(f for f in guard if _is_thread_fact(f[0]))
    if not thread_guard:
        return False
    path = frozenset((k, v) for k, v in known.items() if _is_thread_fact(k))
    if not path:
        return False
    memo = ctx.edge_facts
    mkey = ("guard-sat", thread_guard, path)
    if mkey not in memo:
        memo[mkey] = ctx.facts_oracle.feasible(path | thread_guard, thread_guard) is False
    return memo[mkey]


_THREAD = frozenset((("sreg", "%tid.x"),))


def _is_thread_fact(key: tuple) -> bool:
    """A value comparison that depends on the thread index (%tid.x, %laneid, %warpid, elect.sync leaders)."""
    if key[0] not in ("eq", "ge"):
        return False
    leaves = _leaves_of(key)
    return bool(leaves & _THREAD) or any(k[0] == "elect.leader" for k in leaves)


def may_have_run(ctx: Ctx, ins: Instruction) -> bool:
    """During a replay: whether guarded `ins`, issued earlier on this path, can have executed, given the path's
    facts now (a guard implied false by a fact learned after the issue means it did nothing)."""
    if ins.guard is None or not ctx.current_facts:
        return True
    return not _guard_contradicts(ctx, ins, dict(f for f in ctx.current_facts if f[0][0] in ("eq", "ge", "reg")))


def run_dataflow(ctx: Ctx, init: frozenset, step: Callable, join: Callable[[Iterable], frozenset],
                 on_exit: Optional[Callable] = None, edge: Optional[Callable] = None) -> None:
    """Path-sensitive (on branch predicates) set dataflow; replays the fixpoint once with `emit` enabled.

    The state is a set of bundles (facts, payload): `facts` are predicate values learned from conditional
    branches (killed when the predicate is redefined) and per-path values of loop counters (`PathValues`); an
    edge whose facts contradict a bundle's (equal keys, or z3 finds the conjunction unsatisfiable) drops the
    bundle, which removes infeasible paths such as "MMA issued under !%p2 ... wait skipped under %p2" or "the
    loop body ran although K <= 0". During the replay `ctx.exact` says whether the current bundle's path is
    known feasible; `ctx.add` turns errors on other bundles into warnings.
    """
    func = ctx.func
    if ctx.path_values is None:
        ctx.path_values = PathValues(ctx)
    pv = ctx.path_values
    oracle = ctx.facts_oracle

    def norm(bundles) -> frozenset:
        by_facts: dict = {}
        for facts, payload in bundles:
            by_facts[facts] = join([by_facts[facts], payload]) if facts in by_facts else payload
        if len(by_facts) > _MAX_BUNDLES:  # too many paths: forget the facts, keep the payload
            return frozenset([(frozenset([IMPRECISE]), join(list(by_facts.values())))])
        return frozenset(by_facts.items())

    def replay(block, facts):
        """(per-instruction (skip, facts before it), facts after the block) for a bundle entering with `facts`."""
        key = (block.id, facts)
        hit = ctx.block_replay.get(key)
        if hit is not None:
            return hit
        relevant = pv.relevant
        known = dict(f for f in facts if f[0][0] in ("eq", "ge", "reg")) if facts else {}
        steps = []
        for ins in block.instructions:
            skip = ins.guard is not None and bool(known) and _guard_contradicts(ctx, ins, known)
            steps.append((skip, facts))
            if ins.index in relevant:
                facts = pv.step(facts, ins)
                known = dict(f for f in facts if f[0][0] in ("eq", "ge", "reg")) if facts else {}
        ctx.block_replay[key] = hit = (steps, facts)
        return hit

    def run_block(block, bundles, emit):
        out = []
        for facts, payload in bundles:
            if emit:
                ctx.exact = IMPRECISE not in facts
            steps, after = replay(block, facts)
            for ins, (skip, before) in zip(block.instructions, steps):
                if emit:
                    ctx.current_facts = before
                if not skip:   # skipped: the guard is false on this path
                    payload = step(payload, ins, emit)
            out.append((after, payload))
        ctx.exact = True
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
                new = [f for f in pv.resolve(facts, facts_uv) if f not in facts]
                if any(d.get(r, val) != val for r, val in new):
                    continue  # infeasible for this bundle
                if new:
                    facts = facts | frozenset(new)
                    verdict = oracle.feasible(facts, new) if any(f[0][0] in ("eq", "ge") for f in new) else True
                    if verdict is False:
                        continue  # the facts contradict through arithmetic
                    if verdict is None:
                        facts = facts | {IMPRECISE}
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
            for facts, payload in outs:
                ctx.exact = IMPRECISE not in facts
                ctx.current_facts = facts
                on_exit(payload, b)
            ctx.exact = True
    ctx.current_facts = frozenset()


def union_states(states: Iterable[frozenset]) -> frozenset:
    """Join of set states: the union (a "may" analysis)."""
    out = frozenset()
    for s in states:
        out |= s
    return out
