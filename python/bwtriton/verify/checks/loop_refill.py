"""P16 across iterations: a refill in iteration k + d of the stage an MMA of iteration k read, with no wait on the
barrier of that MMA's commit on the way (single-partition pipelines, cp.async / st.shared / TMA refills).

The exact-address rule (`async_copy`) decides refills whose addresses are constants. In a pipelined loop both the
MMA's operand descriptor and the refill's destination are computed from loop-carried stage counters, so they
meet only in particular pairs of iterations. Here a dataflow carries each MMA not known complete with the
number d of back edges of its loop crossed since it was issued (d <= 2), dropped by any wait that may be on the
barrier its commit arrives on. At a refill (any asynchronous copy into shared memory) the pair is decided by
`iterations.LoopSimulation`: the MMA's first smem address (its descriptor's start field: `bfe.u32 addr, 4, 14`,
plus the k-slice offsets `add.s64`) in iteration k, the refill's destination in iteration k + d. Their difference
is an affine form; when it is a constant, the refill's 16 bytes must contain the MMA's start; when it holds
thread-dependent registers (the cp.async thread offset), z3 must find a thread of the CTA whose write does.
That in one simulated iteration k is an error: the copy overwrites bytes the MMA may still be reading (PTX ISA
#tcgen05-memory-consistency-model: the MMA's smem reads complete with its commit's mbarrier arrive).
"""
from __future__ import annotations

from typing import Optional

from bwtriton.ptx.ir import Instruction, Operand
from bwtriton.ptx.smt import z3

from .async_copy import _WAITS, barrier_operand, same_address
from .completion import writes_shared
from .context import Ctx
from .dataflow import may_have_run, run_dataflow, union_states
from .iterations import Affine, LoopSimulation, _add, _const, _scale
from .lanes import _LaneNumbering, _modelled, _uses_thread
from .mbarrier_phase import natural_loops, spin_loop
from .phase_iterations import _on_every_iteration

_MAX_D = 2
_K = 8


def _desc_start(ctx: Ctx, op: Operand, depth: int = 0) -> Optional[tuple[Operand, Instruction, int]]:
    """(address register, its bfe, byte offset) of a 64-bit smem descriptor built as Triton does:
    `bfe.u32 s, addr, 4, 14; cvt.u64.u32; or.b64 (high fields); add.s64 (k-slice: start + n)`."""
    if op.kind != "reg" or depth > 8:
        return None
    defs = ctx.func.definitions(op.name)
    if len(defs) != 1 or defs[0].guard is not None:
        return None
    d = defs[0]
    srcs = d.operands[1:]
    if d.opcode == "cvt" and len(srcs) == 1:
        return _desc_start(ctx, srcs[0], depth + 1)
    if d.opcode in ("or", "add") and len(srcs) == 2 and srcs[1].kind == "imm" and isinstance(srcs[1].value, int):
        low = srcs[1].value & 0x3FFF
        if d.opcode == "or" and low:
            return None
        inner = _desc_start(ctx, srcs[0], depth + 1)
        return None if inner is None else (inner[0], inner[1], inner[2] + 16 * low)
    if d.opcode == "bfe" and len(srcs) == 3 and [o.value for o in srcs[1:]] == [4, 14] and srcs[0].kind == "reg":
        return srcs[0], d, 0
    return None


def _does_work(ctx: Ctx, body: frozenset) -> bool:
    """A loop issuing MMAs, commits or copies (not a wait's spin loop, even one whose try_wait was edited out)."""
    return any(i.opcode in ("tcgen05.mma", "tcgen05.commit") or writes_shared(i)
               for b in body for i in ctx.func.blocks[b].instructions)


def _loop_of(loops: list, ins: Instruction, other: Instruction):
    """The innermost non-spin loop containing both instructions."""
    best = None
    for (latch, header), body in loops:
        if ins.block in body and other.block in body and (best is None or len(body) < len(best[1])):
            best = ((latch, header), body)
    return best


class _Pairs:
    """Whether refill `w`, d iterations after MMA `m`, writes the MMA's first operand bytes (cached)."""

    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.loops = [lp for lp in natural_loops(ctx.func) if not spin_loop(ctx.func, lp[0][0], lp[1])]
        self.memo: dict = {}
        self.ntid = (ctx.func.directives.get("reqntid") or ctx.func.directives.get("maxntid") or (1024,))[0]

    def overlaps(self, m: Instruction, w: Instruction, d: int, write_later: bool = True) -> bool:
        """`write_later`: the write runs d iterations after the MMA (a refill), else d iterations before it (a
        fill the MMA reads)."""
        key = (m.index, w.index, d, write_later)
        if key not in self.memo:
            self.memo[key] = self._decide(m, w, d, write_later)
        return self.memo[key]

    def _decide(self, m: Instruction, w: Instruction, d: int, write_later: bool = True) -> bool:
        lp = _loop_of(self.loops, m, w)
        if lp is None:
            return write_later and self._decide_entry(m, w, d)
        (latch, header), body = lp
        every = _on_every_iteration(self.ctx.func, body, header, latch, self.loops) | {m.block, w.block}
        sim = LoopSimulation(self.ctx, body, header, latch, every)
        starts = [s for s in (_desc_start(self.ctx, o) for o in m.operands[1:3] if o.kind == "reg") if s is not None]
        for k in range(_K):
            dst = sim.operand(w, w.operands[0], k + d if write_later else k)
            if dst is None:
                return False
            for reg, bfe, off in starts:
                a = sim.operand(bfe, reg, k if write_later else k + d)
                if a is None:
                    return False
                if self._meets(_add(dst, _add(a, _const(off)), -1)):
                    return True
        return False

    def _decide_entry(self, m: Instruction, w: Instruction, d: int) -> bool:
        """An MMA before the refill's loop (Triton's peeled first k-step) against the refill in iteration d of
        that loop's first run: the MMA's start register is defined once, outside the loop, so the simulation's
        loop-invariant leaf is its value at the MMA."""
        lp = next(((e, b) for e, b in sorted(self.loops, key=lambda x: len(x[1]))
                   if w.block in b and m.block not in b), None)
        if lp is None:
            return False
        (latch, header), body = lp
        every = _on_every_iteration(self.ctx.func, body, header, latch, self.loops) | {w.block}
        sim = LoopSimulation(self.ctx, body, header, latch, every)
        dst = sim.operand(w, w.operands[0], d)
        if dst is None:
            return False
        for o in m.operands[1:3]:
            start = _desc_start(self.ctx, o) if o.kind == "reg" else None
            if start is None or len(self.ctx.func.definitions(start[0].name)) != 1 or \
                    self.ctx.func.definitions(start[0].name)[0].block in body:
                continue
            a = sim.operand(w, start[0], d)
            if a is not None and self._meets(_add(dst, _add(a, _const(start[2])), -1), _write_bytes(w)):
                return True
        return False

    def _meets(self, diff: Affine, size: int = 16) -> bool:
        """Some thread's `size`-byte write at start + diff covers the start: -diff in [0, size)."""
        diff = _expand(self.ctx, diff)
        key = ("meets", diff, size)
        if key not in self.memo:
            self.memo[key] = self._meets_uncached(diff, size)
        return self.memo[key]

    def _meets_uncached(self, diff: Affine, size: int = 16) -> bool:
        terms, c = diff
        if not terms:
            return -size < c <= 0
        if z3 is None or self.ctx.facts_oracle.translator is None:
            return False
        num, tr = _LaneNumbering(self.ctx), self.ctx.facts_oracle.translator
        total = z3.BitVecVal(c & 0xFFFFFFFF, 32)
        for reg, coef in terms:
            k = num.key(Operand("reg", reg, name=reg), 32)
            if k is None or not _uses_thread(k) or not _modelled(k):
                return False   # a loop invariant other than the thread's offset: not decided
            total = total + tr.term(k, 32) * z3.BitVecVal(coef & 0xFFFFFFFF, 32)
        return self.ctx.facts_oracle.solve([], [z3.ULT(tr.tid(), self.ntid), z3.ULT(-total, size)]) is not None


def _expand(ctx: Ctx, v: Affine, depth: int = 0) -> Affine:
    """`v` with each loop-invariant leaf register written once (unguarded) by affine arithmetic of registers also
    written once (add, sub, mov, shl / mul.lo / mad.lo by a constant) replaced by that arithmetic, so that a
    refill address `base + tid * 16` kept as one leaf by the simulation and the MMA's `base` cancel."""
    if depth > 8:
        return v
    out: Affine = _const(v[1])
    for reg, coef in v[0]:
        sub = _leaf_def(ctx, reg)
        out = _add(out, _scale(_expand(ctx, sub, depth + 1) if sub is not None else (((reg, 1),), 0), coef))
    return out


def _leaf_def(ctx: Ctx, reg: str) -> Optional[Affine]:
    defs = ctx.func.definitions(reg)
    if len(defs) != 1 or defs[0].guard is not None or defs[0].defs != (reg,):
        return None
    d = defs[0]
    vals = []
    for o in d.operands[1:]:
        if o.kind == "imm" and isinstance(o.value, int):
            vals.append(_const(o.value))
        elif o.kind == "reg" and not o.negated and len(ctx.func.definitions(o.name)) == 1:
            vals.append((((o.name, 1),), 0))
        else:
            return None
    if d.opcode in ("add", "sub") and len(vals) == 2 and d.types[:1] in (("s32",), ("u32",), ("b32",)):
        return _add(vals[0], vals[1], 1 if d.opcode == "add" else -1)
    if d.opcode == "mov" and len(vals) == 1:
        return vals[0]
    if d.opcode == "shl" and len(vals) == 2 and not vals[1][0] and d.types[:1] == ("b32",):
        return _scale(vals[0], 1 << vals[1][1])
    if d.opcode in ("mul", "mad") and "lo" in d.modifiers and len(vals) >= 2 and d.types[:1] in (("s32",), ("u32",)):
        prod = _scale(vals[0], vals[1][1]) if not vals[1][0] else _scale(vals[1], vals[0][1]) if not vals[0][0] \
            else None
        if prod is None:
            return None
        return _add(prod, vals[2]) if d.opcode == "mad" and len(vals) == 3 else prod
    return None


def _write_bytes(w: Instruction) -> int:
    """Bytes one thread's copy writes from its destination address: a cp.async's size operand (4, 8 or 16),
    else 16 (the 16-byte cp.async / vector stores of Triton's pipelines; a TMA writes a whole tile)."""
    if w.opcode.startswith("cp.async") and not w.opcode.startswith("cp.async.bulk") and len(w.operands) >= 3:
        op = w.operands[2]
        if op.kind == "imm" and isinstance(op.value, int) and op.value in (4, 8, 16):
            return op.value
    return 16


def iteration_counter(ctx: Ctx, pairs: "_Pairs", max_d: int):
    """(working loop bodies, dataflow edge function) for facts whose last field counts the iterations of an inner
    working loop crossed: an inner back edge adds one (facts past `max_d` are dropped), a back edge of an outer
    loop (one containing a working loop) starts a new round and drops every fact. A spin loop, even one whose
    try_wait was edited out, does not make its loop an outer one."""
    bodies = [b for _, b in pairs.loops if _does_work(ctx, b)]
    inner_back = {(u, h) for (u, h), b in pairs.loops if not any(o < b for o in bodies)}
    outer_back = {(u, h) for (u, h), _ in pairs.loops} - inner_back

    def edge(u, v, st):
        if (u, v) in outer_back:
            return frozenset()
        if (u, v) not in inner_back:
            return st
        return frozenset(f[:-1] + (f[-1] + 1,) for f in st if f[-1] < max_d)

    return bodies, edge


def passes_on_fresh_phase(ctx: Ctx, wait: Instruction) -> bool:
    """A wait with parity 1 on a barrier whose last event, on every path to the wait, is its `mbarrier.init`
    (then a CTA barrier, or the init unguarded): the barrier is in phase 0, and a wait for parity 1 returns at
    once (the phase before the first counts as complete, PTX ISA #parallel-synchronization-and-communication-
    instructions-mbarrier-test-wait-try-wait), or never, once phase 0 completes. Either way it does not wait for
    the commit of phase 0 (Triton's loops that re-initialise the MMA barrier every K step)."""
    if not wait.has("parity") or len(wait.operands) < 3:
        return False
    par = ctx.resolver.operand(wait.operands[2], 32)
    if par is None or par.exact != 1:
        return False
    bar = barrier_operand(wait)
    blk = ctx.func.blocks[wait.block]
    work, seen = [(wait.block, blk.instructions.index(wait), False)], set()
    while work:
        b, limit, synced = work.pop()
        for ins in reversed(ctx.func.blocks[b].instructions[:limit]):
            if ins is wait:
                continue   # its own spin loop
            if ins.opcode in ("bar", "barrier") and ins.has("sync") and ins.guard is None:
                synced = True
            elif ins.opcode == "mbarrier.init" and ins.operands:
                same = same_address(ctx, ins.operands[0], bar)
                if same is True and (synced or ins.guard is None):
                    break   # this path's last event on the barrier: its init
                if same is not False:
                    return False
            elif (ins.opcode in _WAITS or ins.opcode == "mbarrier.inval") and ins.operands and \
                    same_address(ctx, barrier_operand(ins), bar) is not False:
                return False
        else:
            preds = ctx.func.blocks[b].preds
            if not preds:
                return False   # the function's entry: no init on this path
            for q in preds:
                if (q, synced) not in seen:
                    seen.add((q, synced))
                    work.append((q, len(ctx.func.blocks[q].instructions), synced))
    return True


def check_loop_refill(ctx: Ctx) -> None:
    """P16: no refill, in a later iteration, of the stage an MMA whose commit was not waited on still reads."""
    ins_at = ctx.func.instructions
    mmas = [i for i in ins_at if i.opcode == "tcgen05.mma"]
    refills = [i for i in ins_at if writes_shared(i)]
    if not mmas or not refills:
        return
    pairs = _Pairs(ctx)
    if not pairs.loops:
        return
    _, edge = iteration_counter(ctx, pairs, _MAX_D)
    # MMAs inside no loop (a peeled first k-step): the refill in the first iteration (d = 0) counts too
    looped = {i.index for i in mmas if any(i.block in b for _, b in pairs.loops)}
    same: dict = {}

    fresh: dict[int, bool] = {}

    def covers(wait: Instruction, commit: int) -> bool:
        if wait.index not in fresh:
            fresh[wait.index] = passes_on_fresh_phase(ctx, wait)
        if (wait.index, commit) not in same:
            same[(wait.index, commit)] = not fresh[wait.index] and same_address(
                ctx, barrier_operand(wait), barrier_operand(ins_at[commit])) is not False
        return same[(wait.index, commit)]

    def step(st, ins, emit):
        if ins.opcode == "tcgen05.mma":
            return st | {(ins.index, -1, 0)}
        if ins.opcode == "tcgen05.commit":
            return frozenset((m, ins.index, d) if c == -1 else (m, c, d) for m, c, d in st)
        if ins.opcode in _WAITS:
            return frozenset(x for x in st if not (x[1] >= 0 and covers(ins, x[1])))
        if emit and writes_shared(ins):
            for m, c, d in sorted(st):
                if (d >= 1 or m not in looped) and may_have_run(ctx, ins_at[m]) and pairs.overlaps(ins_at[m], ins, d):
                    mma = ins_at[m]
                    when = f"{d} iteration(s) later" if m in looped else \
                        f"in iteration {d} of the loop after it"
                    ctx.add("stage-reuse", "P16", "error", ins,
                            f"this {ins.opcode} refills, {when}, the shared memory the MMA at line "
                            f"{mma.line} reads, with no wait on the mbarrier its tcgen05.commit arrives on in "
                            "between: wait on that barrier (with the phase's parity) before refilling the stage",
                            related=mma.line)
                    break
        return st

    run_dataflow(ctx, frozenset(), step, union_states, edge=edge)


__all__ = ["check_loop_refill"]
