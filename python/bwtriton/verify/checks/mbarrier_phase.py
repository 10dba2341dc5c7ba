"""mbarrier phases: the parity a loop waits on must alternate (T6), and a barrier must be able to receive the
arrivals its `mbarrier.init` count expects (T7).

An mbarrier counts phases. `mbarrier.try_wait.parity [bar], P` returns true once the phase with parity P has
completed (PTX ISA #parallel-synchronization-and-communication-instructions-mbarrier-test-wait-try-wait). A loop
that waits on the same barrier every iteration with the same parity therefore waits only the first time: from
the second iteration on the completed phase of that parity is still the last one seen and the wait falls through
before the producer's next completion (a race, typically reading a stage the TMA is still writing). A phase
completes when the pending arrival count, set to the init count (#parallel-synchronization-and-communication-instructions-mbarrier-init), reaches zero: a barrier
whose init count exceeds every arrival the kernel can make never completes (deadlock).
"""
from __future__ import annotations

from typing import Optional

from bwtriton.ptx.cfg import back_edges, cyclic_blocks
from bwtriton.ptx.ir import Function, Instruction

from .async_copy import _WAITS, _arrives, barrier_operand, same_address
from .context import Ctx, exact_operand

_SPIN = ("mbarrier.try_wait", "mbarrier.test_wait", "bra")


def loop_body(func: Function, u: int, h: int) -> set[int]:
    """The blocks of the natural loop of back edge u -> h: h and every block reaching u without passing h."""
    body, work = {h, u}, [u]
    while work:
        b = work.pop()
        if b == h:
            continue
        for p in func.blocks[b].preds:
            if p not in body:
                body.add(p)
                work.append(p)
    return body


def spin_loop(func: Function, latch: int, body: frozenset) -> bool:
    """The loop's back edge is taken on a failed try_wait/test_wait of the body: a wait's spin, not an
    iteration (however much else the spin block recomputes)."""
    last = func.blocks[latch].instructions[-1] if func.blocks[latch].instructions else None
    if last is None or last.opcode != "bra" or last.guard is None:
        return False
    return any(i.opcode in _WAITS and last.guard.reg in i.defs for b in body for i in func.blocks[b].instructions)


def natural_loops(func: Function) -> list[tuple[tuple[int, int], frozenset]]:
    """(back edge, body blocks) of each natural loop; spin loops (only waits and branches) are left out."""
    out = []
    for u, h in back_edges(func):
        body = loop_body(func, u, h)
        kinds = {i.opcode for b in body for i in func.blocks[b].instructions}
        # brx (.idx): Triton's warp-specialization dispatch loop, which a warp goes round once per partition
        if kinds - set(_SPIN) and "brx" not in kinds and not spin_loop(func, u, frozenset(body)):
            out.append(((u, h), frozenset(body)))
    return out


def _parity_key(ctx: Ctx, ins: Instruction, body: frozenset):
    """The parity operand's value if it is the same on every iteration of the loop `body`, else None."""
    if len(ins.operands) < 3 or not ins.has("parity"):
        return None
    op = ins.operands[2]
    if op.kind == "imm":
        return ("const", op.value) if isinstance(op.value, int) else None
    if op.kind != "reg":
        return None
    defs = ctx.func.definitions(op.text)
    val = ctx.resolver.operand(op, 32)
    if val is not None and val.exact is not None:
        return ("const", val.exact)   # `mov %r, 0` inside the loop is as constant as an immediate 0
    if not defs or any(d.block in body for d in defs):
        return None   # (re)computed inside the loop: may alternate
    return ("reg", op.text)


def _exact_barrier(ctx: Ctx, ins: Instruction) -> Optional[tuple]:
    op = barrier_operand(ins)
    v = ctx.resolver.address(op) if op is not None else None
    if v is None or v.base is None or v.base.startswith("?") or v.lo != v.hi:
        return None
    return v.base, v.lo


def check_parity_alternates(ctx: Ctx) -> None:
    """T6: inside a loop, waits on one loop-invariant mbarrier must not all use one loop-invariant parity."""
    waits = [i for i in ctx.func.instructions if i.opcode in _WAITS and i.has("parity")]
    if not waits:
        return
    inits = [i for i in ctx.func.instructions if i.opcode in ("mbarrier.init", "mbarrier.inval")]
    for _, body in natural_loops(ctx.func):
        groups: dict = {}
        for w in waits:
            bar = _exact_barrier(ctx, w) if w.block in body else None
            if bar is not None:
                groups.setdefault(bar, []).append(w)
        for bar, ws in groups.items():
            keys = {_parity_key(ctx, w, body) for w in ws}
            if len(keys) != 1 or None in keys:
                continue
            if any(i.block in body and _exact_barrier(ctx, i) == bar for i in inits):
                continue  # re-initialised every iteration: phase 0 again
            what = f"the constant parity {keys.pop()[1]}" if next(iter(keys), ("reg",))[0] == "const" \
                else "a parity that does not change in the loop"
            ctx.add("mbarrier-parity-stuck", "T6", "error", ws[0],
                    f"this wait in a loop uses {what} on the same mbarrier every iteration: after the first "
                    "completion the wait falls through without waiting for the next phase; flip the parity each "
                    "time the barrier completes (phase = (iteration // stages) & 1, or phase ^= 1)")
        _check_stage_rotation(ctx, waits, inits, body)


def _stage_register(ctx: Ctx, op, body: frozenset, depth: int = 8) -> Optional[str]:
    """A loop-carried stage register (bounded by `ptx.stages`, redefined in `body`) an address is computed from."""
    stages = getattr(ctx.resolver, "stages", {})
    if op is None or op.kind not in ("reg", "addr") or depth <= 0:
        return None
    if op.kind == "addr":
        return _stage_register(ctx, op.base, body, depth)
    if op.name in stages and any(d.block in body for d in ctx.func.definitions(op.name)):
        hi = stages[op.name][1]
        return op.name if hi >= 1 else None
    defs = ctx.func.definitions(op.name)
    if len(defs) != 1 or defs[0].opcode not in ("add", "shl", "mul", "or", "cvt", "mov", "mad"):
        return None
    return next((r for r in (_stage_register(ctx, o, body, depth - 1) for o in defs[0].operands[1:]) if r), None)


def _check_stage_rotation(ctx: Ctx, waits: list, inits: list, body: frozenset) -> None:
    """T6 for stage-indexed barriers (`bar + 8 * stage`): the stage wraps, so each barrier of the ring is waited
    on again every S iterations; a parity that never changes in the loop then falls through on the second round."""
    for w in waits:
        if w.block not in body:
            continue
        stage = _stage_register(ctx, barrier_operand(w), body)
        key = _parity_key(ctx, w, body) if stage is not None else None
        if key is None:
            continue
        if any(i.block in body and same_address(ctx, barrier_operand(i), barrier_operand(w)) is not False
               for i in inits):
            continue  # the ring is re-initialised in the loop
        what = f"the constant parity {key[1]}" if key[0] == "const" else "a parity that does not change in the loop"
        ctx.add("mbarrier-parity-stuck", "T6", "error", w,
                f"this wait's mbarrier rotates with the stage index {stage}, but it uses {what}: when the stage "
                "wraps, the wait on a barrier that already completed that phase falls through; flip the phase "
                "each time the stage index wraps (phase ^= (stage == 0))")


def _arrival_weight(ctx: Ctx, ins: Instruction) -> Optional[int]:
    """Arrivals one executing thread contributes (None: unknown); TMA complete_tx and expect_tx add none."""
    op = ins.opcode
    if op in ("mbarrier.expect_tx", "mbarrier.complete_tx") or op.startswith(("cp.async.bulk", "cp.reduce")):
        return 0
    if op == "tcgen05.commit":
        return 1
    if op in ("mbarrier.arrive", "mbarrier.arrive_drop"):
        addrs = [k for k, o in enumerate(ins.operands) if o.kind == "addr"]
        rest = ins.operands[addrs[0] + 1:] if addrs else ()
        count = [o for o in rest if o.kind in ("imm", "reg")]
        if ins.has("expect_tx"):
            count = count[1:]   # the first is the tx byte count
        if not count:
            return 1
        return exact_operand(ctx, ins, ins.operands.index(count[0]))
    return None   # cp.async.mbarrier.arrive and anything else: not modelled


def _threads(ctx: Ctx, ins: Instruction, cta: int) -> int:
    """Upper bound on the threads executing `ins`: one per warp under an elect.sync-derived guard."""
    if ins.guard is None or ins.guard.negated:
        return cta
    seen, work = set(), [ins.guard.reg]
    while work:
        r = work.pop()
        if r in seen:
            continue
        seen.add(r)
        defs = ctx.func.definitions(r)
        if len(defs) == 1 and defs[0].opcode in ("elect", "elect.sync"):
            return -(-cta // 32)
        if len(defs) == 1 and defs[0].opcode == "and" and "pred" in defs[0].types:
            work.extend(o.text for o in defs[0].operands[1:] if o.kind == "reg")
    return cta


def check_arrival_count(ctx: Ctx) -> None:
    """T7: an mbarrier.init count larger than all arrivals the CTA's threads can make before the wait."""
    ntid = ctx.func.directives.get("reqntid") or ctx.func.directives.get("maxntid")
    waits = [i for i in ctx.func.instructions if i.opcode in _WAITS]
    if not ntid or not waits:
        return
    cta = 1
    for n in ntid:
        cta *= n
    cyclic = cyclic_blocks(ctx.func)
    arrivals = [i for i in ctx.func.instructions if _arrives(i)]
    if any(".shared::cluster" in a.full_opcode or a.has("multicast::cluster") for a in arrivals):
        return   # peer CTAs arrive too
    for init in (i for i in ctx.func.instructions if i.opcode == "mbarrier.init"):
        expected = exact_operand(ctx, init, 1)
        if expected is None:
            continue
        mine = [a for a in arrivals if same_address(ctx, barrier_operand(init), barrier_operand(a)) is not False]
        weights = [_arrival_weight(ctx, a) for a in mine]
        if None in weights or any(a.block in cyclic for a, w in zip(mine, weights) if w):
            continue   # unknown counts, or arrivals that can repeat
        bound = sum(w * _threads(ctx, a, cta) for a, w in zip(mine, weights))
        if bound == 0 or bound >= expected:
            continue   # bound 0: T5's case (never arrived)
        for w in waits:
            if same_address(ctx, barrier_operand(init), barrier_operand(w)) is True:
                ctx.add("mbarrier-arrivals-short", "T7", "error", w,
                        f"this waits on an mbarrier initialised (line {init.line}) to expect {expected} arrivals, "
                        f"but the kernel's arrivals on it give at most {bound} ({cta} threads): the phase never "
                        "completes (deadlock); lower the init count or add the missing arrivals",
                        related=init.line)
