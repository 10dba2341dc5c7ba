"""Ranges of loop-carried stage and phase registers, and a value resolver that uses them.

Triton and Gluon index pipeline stages with a counter that wraps and a phase bit that flips at each wrap:

    mov.b32 %r429, 2;                        // before the loop
    add.s32 %r21, %r429, 1;                  // in the loop
    setp.eq.b32 %p7, %r21, 3;
    selp.b32 %r429, 0, %r21, %p7;            // stage = (stage + 1 == S) ? 0 : stage + 1   in [0, S-1]
    selp.b32 %r22, 1, 0, %p7;
    xor.b32 %r428, %r428, %r22;              // phase ^= wrapped                           in [0, 1]

`ValueResolver` gives up on such cycles, so every barrier and stage address derived from them was opaque and
no two could be told apart. `stage_ranges` finds the interval of each such register by a small fixpoint over
its definitions (constants, +constant, and/xor/or with small constants, and the wrap `selp 0, x + 1, x + 1 == S`
refined by the comparison); `StageResolver` returns those intervals, so `bar + 8 * stage` is the bounded range
`bar + [0, 8 (S - 1)]` with stride 8, and ranges of different buffers separate.
"""
from __future__ import annotations

from typing import Optional

from .ir import Function, Instruction, Operand
from .values import AbsVal, ValueResolver

_ROUNDS = 80   # an unbounded +1 counter passes _MAX_STAGE (and is dropped) within this many rounds
_MAX_STAGE = 64     # a counter whose bound exceeds this is not a pipeline stage or phase


def stage_ranges(func: Function) -> dict[str, tuple[int, int]]:
    """Register -> (lo, hi) for loop-carried registers whose every definition keeps them in a small range."""
    cands = {r for i in func.instructions for r in i.defs
             if len(func.definitions(r)) > 1 and all(d.guard is None and d.defs == (r,) for d in func.definitions(r))}
    plain = ValueResolver(func)
    ranges: dict[str, Optional[tuple[int, int]]] = {r: None for r in cands}   # None: no value yet (bottom)
    for _ in range(_ROUNDS):
        changed = False
        for r in list(ranges):
            if r not in ranges:
                continue
            vals = [_eval(d, ranges, plain, func) for d in func.definitions(r)]
            if any(v == "top" for v in vals):
                del ranges[r]
                changed = True
                continue
            known = [v for v in vals if v is not None]
            new = (min(v[0] for v in known), max(v[1] for v in known)) if known else None
            if new is not None and (new[0] < 0 or new[1] > _MAX_STAGE):
                del ranges[r]
                changed = True
                continue
            if new != ranges[r]:
                ranges[r] = new
                changed = True
        if not changed:
            return {r: v for r, v in ranges.items() if v is not None}
    return {}   # not stable: no claim


def _interval(op: Operand, ranges: dict, plain: ValueResolver, func: Function):
    """(lo, hi), None (a candidate with no value yet) or "top"."""
    if op.kind == "imm" and isinstance(op.value, int):
        return (op.value, op.value)
    if op.kind != "reg":
        return "top"
    if op.name in ranges:
        return ranges[op.name]
    if len(func.definitions(op.name)) > 1:
        return "top"
    defs = func.definitions(op.name)
    if len(defs) == 1 and defs[0].guard is None and defs[0].opcode in ("add", "selp", "setp", "xor", "and", "or",
                                                                       "mov") and _depends(defs[0], ranges):
        return _eval(defs[0], ranges, plain, func)
    v = plain.operand(op, 32)
    if v is None or v.base is not None:
        return "top"
    return (v.lo, v.hi)


def _depends(ins: Instruction, ranges: dict) -> bool:
    return any(o.kind == "reg" and o.name in ranges for o in ins.operands[1:])


def _eval(d: Instruction, ranges: dict, plain: ValueResolver, func: Function):
    ops = d.operands[1:]
    if d.opcode == "mov" and len(ops) == 1:
        return _interval(ops[0], ranges, plain, func)
    if d.opcode == "selp" and len(ops) == 3:
        a, b = (_interval(o, ranges, plain, func) for o in ops[:2])
        if "top" in (a, b):
            return "top"
        b = _refine_wrap(ops[1], ops[2], b, func) if b is not None else None
        known = [x for x in (a, b) if x is not None]
        return (min(x[0] for x in known), max(x[1] for x in known)) if known else None
    if d.opcode in ("add", "xor", "and", "or") and len(ops) == 2:
        a, b = (_interval(o, ranges, plain, func) for o in ops)
        if "top" in (a, b):
            return "top"
        if a is None or b is None:
            return None
        if d.opcode == "add":
            return (a[0] + b[0], a[1] + b[1])
        if a[0] < 0 or b[0] < 0:
            return "top"
        if d.opcode == "and":
            return (0, min(a[1], b[1]))
        return (0, (1 << max(a[1], b[1]).bit_length()) - 1)
    return "top"


def _refine_wrap(value: Operand, pred: Operand, rng: tuple[int, int], func: Function) -> tuple[int, int]:
    """`selp x, value, p` takes `value` when p is false: with p = (value == S), value != S there."""
    if pred.kind != "reg" or value.kind != "reg":
        return rng
    defs = func.definitions(pred.name)
    if len(defs) != 1 or defs[0].opcode != "setp" or not defs[0].has("eq") or len(defs[0].operands) != 3:
        return rng
    a, b = defs[0].operands[1:]
    bound = b if a.kind == "reg" and a.name == value.name else a if b.kind == "reg" and b.name == value.name else None
    if bound is None or bound.kind != "imm" or not isinstance(bound.value, int):
        return rng
    lo, hi = rng
    if hi == bound.value:
        hi -= 1
    if lo == bound.value:
        lo += 1
    return (lo, hi) if lo <= hi else rng


class StageResolver(ValueResolver):
    """`ValueResolver` that knows the ranges of loop-carried stage/phase registers (`stage_ranges`)."""

    def __init__(self, func: Function, shared_symbols: frozenset[str] = frozenset()):
        super().__init__(func, shared_symbols)
        self.stages = stage_ranges(func)

    def reg(self, name: str) -> Optional[AbsVal]:
        rng = self.stages.get(name)
        if rng is not None:
            return AbsVal(None, rng[0], rng[1])
        return super().reg(name)


__all__ = ["stage_ranges", "StageResolver"]
