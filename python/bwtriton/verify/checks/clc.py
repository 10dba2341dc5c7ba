"""Cluster Launch Control protocol checks (rules C1-C5, docs/clc.md):

* C1 `clc-request-threads`: `clusterlaunchcontrol.try_cancel` is issued by one thread (a guard derived from
  ``%tid.x == 0`` or `elect.sync`); every thread that reaches it issues its own request.
* C2 `clc-read-before-wait` / `clc-wait-phase`: the response buffer is read only after a wait on its mbarrier,
  with the parity of the phase that request completes (0 for the first request after `mbarrier.init`, then
  alternating).
* C3 `clc-second-request`: no request on a response buffer whose previous response has not been read.
* C4 `clc-raw-decode`: the response is opaque: what is loaded from it reaches only
  `clusterlaunchcontrol.query_cancel` (through `mov.b128`), never bit operations.
* C5 `clc-expect-tx`: the mbarrier the request completes on expects exactly the 16 response bytes.

Path-sensitive parts use the shared dataflow; undecidable operands (register parities, unknown addresses,
loop-carried phases) are skipped, never reported.
"""
from __future__ import annotations

from typing import Optional

from bwtriton.ptx.ir import Instruction

from .context import Ctx, exact_operand
from .dataflow import run_dataflow, union_states

RESPONSE_BYTES = 16
_MAX_PHASES = 4  # requests counted per mbarrier since its init before the count becomes "unknown"


def _key(ctx: Ctx, op) -> Optional[tuple]:
    """(base, offset) identity of an address operand, None when not static."""
    if op.kind != "addr":
        return None
    v = ctx.resolver.address(op)
    if v is None or v.offset is None:
        return None
    return (v.base, v.offset)


def _is_wait(ins: Instruction) -> bool:
    return ins.opcode in ("mbarrier.try_wait", "mbarrier.test_wait", "mbarrier.wait")


def _is_smem_read(ins: Instruction) -> bool:
    return ins.opcode == "ld" and not any(m in ("param", "global", "const", "local") for m in ins.modifiers)


# --- C1 -----------------------------------------------------------------------------------------------------
def _single_thread_pred(ctx: Ctx, reg: str, depth: int = 0) -> bool:
    """Whether predicate `reg` holds for at most one thread of the CTA: `setp.eq x, 0` on a value derived from
    %tid.x only (mov / and with a mask), `elect.sync`, or an and.pred with such an operand."""
    defs = ctx.func.definitions(reg)
    if len(defs) != 1 or depth > 4:
        return False
    d = defs[0]
    if d.opcode == "elect":
        return True
    if d.opcode == "and" and d.types == ("pred",):
        return any(o.kind == "reg" and not o.negated and _single_thread_pred(ctx, o.name, depth + 1)
                   for o in d.operands[1:])
    if d.opcode == "setp" and d.has("eq") and len(d.operands) >= 3:
        a, b = d.operands[1], d.operands[2]
        if b.kind == "imm" and b.value == 0 and a.kind == "reg":
            return _from_tid_x(ctx, a.name, depth + 1)
    return False


def _from_tid_x(ctx: Ctx, reg: str, depth: int) -> bool:
    defs = ctx.func.definitions(reg)
    if len(defs) != 1 or depth > 6:
        return False
    d = defs[0]
    src = d.operands[1] if len(d.operands) > 1 else None
    if d.opcode == "mov" and src is not None and src.kind == "sreg":
        return src.name == "%tid.x"
    if d.opcode in ("and", "or") and src is not None and src.kind == "reg":  # masks, | %cluster_ctarank
        return _from_tid_x(ctx, src.name, depth + 1)
    return False


def check_request_threads(ctx: Ctx, requests: list[Instruction]) -> None:
    for ins in requests:
        if ins.guard is None:
            ctx.add("clc-request-threads", "C1", "error", ins,
                    "clusterlaunchcontrol.try_cancel is issued by every thread that reaches it: each thread "
                    "cancels its own cluster and all but one stolen tile are lost; guard it with a one-thread "
                    "predicate (%tid.x == 0 or elect.sync)")
        elif ins.guard.negated or not _single_thread_pred(ctx, ins.guard.reg):
            ctx.add("clc-request-threads", "C1", "warning", ins,
                    f"cannot show that the guard {'!' if ins.guard.negated else ''}{ins.guard.reg} of "
                    "clusterlaunchcontrol.try_cancel holds for one thread only (expected %tid.x == 0 or "
                    "elect.sync)")


# --- C2 / C3 ------------------------------------------------------------------------------------------------
# payload: frozenset of (resp, bar, requests since init or None, outstanding (requested, not waited),
#                        unread (requested, response not read yet))
def check_protocol(ctx: Ctx, requests: list[Instruction]) -> None:
    pairs = {}
    for ins in requests:
        resp, bar = _key(ctx, ins.operands[0]), _key(ctx, ins.operands[1])
        if resp is not None and bar is not None:
            pairs[ins.index] = (resp, bar)
    if not pairs:
        return
    bars = {b for _, b in pairs.values()}
    resps = {r for r, _ in pairs.values()}

    def step(state, ins, emit):
        if ins.opcode == "mbarrier.init":
            b = _key(ctx, ins.operands[0]) if ins.operands else None
            if b in bars:
                state = frozenset(s for s in state if s[1] != b) | {(r, b, 0, False, False)
                                                                    for r, bb in pairs.values() if bb == b}
            return state
        if ins.index in pairs:
            resp, bar = pairs[ins.index]
            out = set()
            for s in state:
                if (s[0], s[1]) != (resp, bar):
                    out.add(s)
                    continue
                if s[4] and emit:
                    ctx.add("clc-second-request", "C3", "error", ins,
                            "clusterlaunchcontrol.try_cancel while the previous request's response in this buffer "
                            "was not read yet: the new response overwrites it (and a failed request must not be "
                            "followed by another); read and decode the response first")
                n = None if s[2] is None or s[2] + 1 > _MAX_PHASES else s[2] + 1
                out.add((resp, bar, n, True, True))
            if not any((s[0], s[1]) == (resp, bar) for s in state):
                out.add((resp, bar, None, True, True))  # mbarrier initialised where we cannot see
            return frozenset(out)
        if _is_wait(ins) and ins.operands:
            b = _key(ctx, ins.operands[1]) if len(ins.operands) > 1 else None
            if b not in bars:
                return state
            parity = exact_operand(ctx, ins, 2) if ins.has("parity") and len(ins.operands) > 2 else None
            out = set()
            for s in state:
                if s[1] == b and s[3]:
                    if emit and parity is not None and s[2] is not None and parity != (s[2] - 1) % 2:
                        ctx.add("clc-wait-phase", "C2", "error", ins,
                                f"waits for phase parity {parity}, but the try_cancel it follows completes phase "
                                f"{s[2] - 1} of the mbarrier (parity {(s[2] - 1) % 2}, counting from its "
                                "mbarrier.init): the wait returns before the response arrives")
                    s = (s[0], s[1], s[2], False, s[4])
                out.add(s)
            return frozenset(out)
        if _is_smem_read(ins) and ins.operands:
            r = next((k for k in (_key(ctx, o) for o in ins.operands if o.kind == "addr") if k in resps), None)
            if r is None:
                return state
            out = set()
            for s in state:
                if s[0] == r:
                    if s[3] and emit:
                        ctx.add("clc-read-before-wait", "C2", "error", ins,
                                "reads the try_cancel response before waiting on its mbarrier: the asynchronous "
                                "response may not have arrived; mbarrier.try_wait on the request's mbarrier first")
                    s = (s[0], s[1], s[2], s[3], False)
                out.add(s)
            return frozenset(out)
        return state

    run_dataflow(ctx, frozenset(), step, union_states)


# --- C4 -----------------------------------------------------------------------------------------------------
def check_decode(ctx: Ctx, requests: list[Instruction]) -> None:
    resps = {_key(ctx, ins.operands[0]) for ins in requests} - {None}
    loads = [i for i in ctx.func.instructions if _is_smem_read(i)
             and any(_key(ctx, o) in resps for o in i.operands if o.kind == "addr")]
    users: dict[str, list[Instruction]] = {}
    for ins in ctx.func.instructions:
        for r in ins.uses:
            users.setdefault(r, []).append(ins)
    decoded = False
    for ld in loads:
        work, seen = list(ld.defs), set()
        while work:
            reg = work.pop()
            if reg in seen:
                continue
            seen.add(reg)
            for use in users.get(reg, []):
                if use.opcode == "clusterlaunchcontrol.query_cancel":
                    decoded = True
                elif use.opcode == "mov" and use.types == ("b128",):
                    work.extend(use.defs)
                else:
                    ctx.add("clc-raw-decode", "C4", "error", use,
                            f"uses the raw try_cancel response ({reg}, loaded at line {ld.line}): its encoding is "
                            "opaque; decode it with clusterlaunchcontrol.query_cancel.is_canceled / "
                            ".get_first_ctaid", related=ld.line)
    if loads and not decoded:
        ctx.add("clc-raw-decode", "C4", "warning", loads[0],
                "the try_cancel response is loaded but never decoded with clusterlaunchcontrol.query_cancel")


# --- C5 -----------------------------------------------------------------------------------------------------
def check_expect_tx(ctx: Ctx, requests: list[Instruction]) -> None:
    bars = {_key(ctx, ins.operands[1]) for ins in requests} - {None}
    for ins in ctx.func.instructions:
        if ins.opcode not in ("mbarrier.arrive", "mbarrier.expect_tx") or not ins.has("expect_tx"):
            continue
        addr_idx = next((i for i, o in enumerate(ins.operands) if o.kind == "addr"), None)
        if addr_idx is None or _key(ctx, ins.operands[addr_idx]) not in bars or addr_idx + 1 >= len(ins.operands):
            continue
        n = exact_operand(ctx, ins, addr_idx + 1)
        if n is not None and n != RESPONSE_BYTES:
            ctx.add("clc-expect-tx", "C5", "error", ins,
                    f"the try_cancel mbarrier expects {n} transaction bytes but a response is {RESPONSE_BYTES}: "
                    f"the phase {'never completes' if n > RESPONSE_BYTES else 'completes before the response'}; "
                    f"expect_tx {RESPONSE_BYTES}")


def check_clc(ctx: Ctx) -> None:
    """C1-C5 over every clusterlaunchcontrol.try_cancel of the function (nothing when it has none)."""
    requests = [i for i in ctx.func.find("clusterlaunchcontrol.try_cancel") if len(i.operands) == 2]
    if not requests:
        return
    check_request_threads(ctx, requests)
    check_protocol(ctx, requests)
    check_decode(ctx, requests)
    check_expect_tx(ctx, requests)
