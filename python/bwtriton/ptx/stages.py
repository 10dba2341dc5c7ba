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
refined by the comparison, `==` or Triton's `>`/`<` forms); `StageResolver` returns those intervals, so `bar + 8 * stage` is the bounded range
`bar + [0, 8 (S - 1)]` with stride 8, and ranges of different buffers separate.
"""
from __future__ import annotations

from typing import Optional

from .ir import Function, Instruction, Operand
from .values import AbsVal, ValueResolver

_ROUNDS = 80   # an unbounded +1 counter passes _MAX_STAGE (and is dropped) within this many rounds
_MAX_STAGE = 64     # a counter whose bound exceeds this is not a pipeline stage or phase


def stage_ranges(func: Function) -> dict[str, tuple[int, int]]:
    """Register -> (lo, hi) for loop-carried registers whose every definition keeps them in a small range.

    Each definition has its own interval, and a use reads the union over the definitions that reach it: PTX
    reuses registers, so a stage counter's entry value can come through a register that an unrelated region
    after the loop redefines (Triton's persistent epilogue: `mov %r861, 0` before the loop, `shl %r861, ...`
    after it); that later definition does not reach the loop and must not widen it."""
    cands = {r for i in func.instructions for r in i.defs
             if len(func.definitions(r)) > 1 and all(d.guard is None and d.defs == (r,) for d in func.definitions(r))}
    env = _Env(func, cands)
    plain = ValueResolver(func)
    for _ in range(_ROUNDS):
        changed = False
        for r in cands:
            for d in func.definitions(r):
                old = env.vals[d.index]
                if old == "top":
                    continue
                v = _eval(d, env, plain, func)
                if v != "top" and v is not None and (v[0] < 0 or v[1] > _MAX_STAGE):
                    v = "top"   # not a pipeline stage or phase (an unbounded counter ends here)
                if v != old:
                    env.vals[d.index] = v
                    changed = True
        if not changed:
            out = {}
            for r in cands:
                vals = [env.vals[d.index] for d in func.definitions(r)]
                known = [v for v in vals if v is not None]
                if known and "top" not in vals:
                    out[r] = (min(v[0] for v in known), max(v[1] for v in known))
            return out
    return {}   # not stable: no claim


class _Env:
    """Per-definition intervals of the candidate registers, and which of their definitions reach a use."""

    def __init__(self, func: Function, cands: set[str]) -> None:
        self.func, self.cands = func, cands
        self.vals: dict[int, object] = {d.index: None for r in cands for d in func.definitions(r)}
        self._reach_in = self._reaching_definitions() if cands else {}
        self._memo: dict[tuple[int, str], list[int]] = {}

    def __contains__(self, reg: str) -> bool:
        return reg in self.cands

    def _reaching_definitions(self) -> dict[int, int]:
        """Block -> bitset (over instruction indices) of the candidate definitions live at its entry."""
        func = self.func
        bit_of_reg = {r: sum(1 << d.index for d in func.definitions(r)) for r in self.cands}
        gen, keep = {}, {}
        for b in func.blocks:
            g, k = 0, -1
            for ins in b.instructions:
                for r in ins.defs:
                    if r in bit_of_reg:
                        g = (g & ~bit_of_reg[r]) | (1 << ins.index)
                        k &= ~bit_of_reg[r]
            gen[b.id], keep[b.id] = g, k
        reach_in = {b.id: 0 for b in func.blocks}
        changed = True
        while changed:
            changed = False
            for b in func.blocks:
                out = (reach_in[b.id] & keep[b.id]) | gen[b.id]
                for t in b.succs:
                    if reach_in[t] | out != reach_in[t]:
                        reach_in[t] |= out
                        changed = True
        return reach_in

    def value(self, reg: str, at: Instruction):
        """Union of the intervals of `reg`'s definitions reaching `at` (None: none known yet; "top")."""
        key = (at.index, reg)
        if key not in self._memo:
            defs = self.func.definitions(reg)
            mask = self._reach_in.get(at.block, 0) if at.block is not None else -1
            for ins in self.func.blocks[at.block].instructions if at.block is not None else ():
                if ins.index >= at.index:
                    break
                if reg in ins.defs:
                    mask = (mask & ~sum(1 << d.index for d in defs)) | (1 << ins.index)
            self._memo[key] = [d.index for d in defs if mask >> d.index & 1]
        vals = [self.vals[i] for i in self._memo[key]]
        if "top" in vals:
            return "top"
        known = [v for v in vals if v is not None]
        return (min(v[0] for v in known), max(v[1] for v in known)) if known else None


def _interval(op: Operand, ranges: "_Env", plain: ValueResolver, func: Function, at: Instruction):
    """(lo, hi), None (a candidate with no value yet) or "top", of `op` read by instruction `at`."""
    if op.kind == "imm" and isinstance(op.value, int):
        return (op.value, op.value)
    if op.kind != "reg":
        return "top"
    if op.name in ranges:
        return ranges.value(op.name, at)
    if len(func.definitions(op.name)) > 1:
        return "top"
    defs = func.definitions(op.name)
    if len(defs) == 1 and defs[0].guard is None and defs[0].opcode in ("add", "selp", "setp", "xor", "and", "or",
                                                                       "mov") and _depends(defs[0], ranges, func):
        return _eval(defs[0], ranges, plain, func)
    v = plain.operand(op, 32)
    if v is None or v.base is not None:
        return "top"
    return (v.lo, v.hi)


def _depends(ins: Instruction, ranges: "_Env", func: Optional[Function] = None, depth: int = 0) -> bool:
    """Whether `ins` reads a candidate register, directly or (given `func`) through up to 4 single definitions
    (Triton's `add %r108, %r852, 1; setp.gt %p, %r108, 1; selp %r109, 0, %r108, %p`)."""
    for o in ins.operands[1:]:
        if o.kind != "reg":
            continue
        if o.name in ranges:
            return True
        defs = func.definitions(o.name) if func is not None and depth < 4 else ()
        if len(defs) == 1 and defs[0].guard is None and _depends(defs[0], ranges, func, depth + 1):
            return True
    return False


def _eval(d: Instruction, ranges: "_Env", plain: ValueResolver, func: Function):
    ops = d.operands[1:]
    if d.opcode == "mov" and len(ops) == 1:
        return _interval(ops[0], ranges, plain, func, d)
    if d.opcode == "selp" and len(ops) == 3:
        a, b = (_interval(o, ranges, plain, func, d) for o in ops[:2])
        if "top" in (a, b):
            return "top"
        b = _refine_wrap(ops[1], ops[2], b, func) if b is not None else None
        known = [x for x in (a, b) if x is not None]
        return (min(x[0] for x in known), max(x[1] for x in known)) if known else None
    if d.opcode in ("add", "xor", "and", "or") and len(ops) == 2:
        a, b = (_interval(o, ranges, plain, func, d) for o in ops)
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


def _refine_wrap(value: Operand, pred: Operand, rng: tuple[int, int], func: Function) -> Optional[tuple[int, int]]:
    """`selp x, c, value, p` takes `value` when p is false: with p = (value == S), value != S there; with
    p = (value > S) (Triton's `setp.gt.s32 %p, %r, S - 1` wrap), value <= S there; likewise lt/le/ge."""
    if pred.kind != "reg" or value.kind != "reg":
        return rng
    defs = func.definitions(pred.name)
    if len(defs) != 1 or defs[0].opcode != "setp" or len(defs[0].operands) != 3 or defs[0].guard is not None:
        return rng
    cmp = next((m for m in ("eq", "gt", "ge", "lt", "le") if defs[0].has(m)), None)
    a, b = defs[0].operands[1:]
    if a.kind == "reg" and a.name == value.name:
        bound = b
    elif b.kind == "reg" and b.name == value.name:
        bound, cmp = a, {"gt": "lt", "ge": "le", "lt": "gt", "le": "ge"}.get(cmp, cmp)   # S op value
    else:
        return rng
    if cmp is None or bound.kind != "imm" or not isinstance(bound.value, int):
        return rng
    lo, hi = rng
    if cmp != "eq" and not (any(defs[0].has(t) for t in ("s16", "s32", "s64")) or (lo >= 0 and bound.value >= 0)):
        return rng   # an unsigned compare of a possibly negative value: the interval is not its order
    s = bound.value
    if cmp == "eq":
        hi, lo = (hi - 1 if hi == s else hi), (lo + 1 if lo == s else lo)
    elif cmp == "gt":        # false: value <= S
        hi = min(hi, s)
    elif cmp == "ge":        # false: value < S
        hi = min(hi, s - 1)
    elif cmp == "lt":        # false: value >= S
        lo = max(lo, s)
    else:                    # le, false: value > S
        lo = max(lo, s + 1)
    return (lo, hi) if lo <= hi else None   # never taken for these values (bottom)


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
