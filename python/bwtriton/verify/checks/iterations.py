"""Per-iteration values of a loop's index arithmetic: what a register holds in iteration k of one run of a loop.

Pipelined kernels index their stage barriers and TMEM buffers with values derived from the iteration number:
Triton with a wrap counter (`stage = stage + 1 == S ? 0 : stage + 1`, `phase ^= wrapped`), Gluon with
`i % S` and `(i / S) & 1` computed through `mul.hi.u32` by a magic constant, `shr` and `bfe`, and barrier
addresses strength-reduced to `base + 8 i - 8 S (i / S)`. `LoopSimulation` executes the slice of the loop body
that computes an operand, iteration by iteration, from the values the loop-carried registers have on the first
entry (`cross_warp.first_pass_value`, every enclosing loop in its first pass). Values are affine forms over the
loop-invariant registers, `((register, coefficient), ...), constant`; the operations Triton/Gluon use on the
indices themselves (`mul.hi`, `shr`, `and`, `bfe`, `xor`, `setp`, `selp`) are evaluated exactly on constants.
So two iterations' barrier addresses are equal exactly when their affine forms are, and the parity of each
wait is a number: what the phase rules need, without a closed form of the recurrence.

A register the slice needs is simulated only when its definition inside the loop is unique, unguarded and runs
on every iteration (its block on every header -> latch path, outside any inner loop but spin loops); anything
else makes the operand unknown (None) and the caller decides nothing.
"""
from __future__ import annotations

from typing import Optional

from bwtriton.ptx.cfg import back_edges
from bwtriton.ptx.ir import Instruction, Operand

from .context import Ctx
from .first_pass import first_pass_value

Affine = tuple   # (((register, coefficient), ...) sorted, constant)
_MASK = 0xFFFFFFFF
_DEPTH = 48


def _const(c: int) -> Affine:
    return ((), c)


def _add(a: Affine, b: Affine, sign: int = 1) -> Affine:
    terms = dict(a[0])
    for r, c in b[0]:
        terms[r] = terms.get(r, 0) + sign * c
    return tuple(sorted((r, c) for r, c in terms.items() if c)), a[1] + sign * b[1]


def _scale(a: Affine, k: int) -> Affine:
    return tuple((r, c * k) for r, c in a[0] if c * k), a[1] * k


def _bits(ins: Instruction) -> int:
    t = ins.types[0] if ins.types else "b32"
    digits = t.lstrip("bsuf")
    return int(digits) if digits.isdigit() else 32


def _signed(v: int, w: int) -> int:
    v &= (1 << w) - 1
    return v - (1 << w) if v >> (w - 1) else v


class LoopSimulation:
    """Values of registers in iteration k (k = 0, 1, ...) of the loop `body` (blocks) with header `header` and
    back-edge source `latch`."""

    def __init__(self, ctx: Ctx, body: frozenset, header: int, latch: int, every_iteration: frozenset) -> None:
        self.ctx, self.body, self.header, self.latch = ctx, body, header, latch
        self.every = every_iteration   # blocks that run once in every iteration
        self.first = ctx.func.blocks[header].instructions[0] if ctx.func.blocks[header].instructions else None
        self.rank = iteration_order(ctx, body, header)
        self._memo: dict = {}

    def _before(self, d: Instruction, pos: Instruction) -> bool:
        """`d` runs before `pos` within one iteration (blocks in forward order from the header)."""
        return (self.rank.get(d.block, -1), d.index) < (self.rank.get(pos.block, -1), pos.index)

    def operand(self, ins: Instruction, op: Operand, k: int) -> Optional[Affine]:
        """The value of `op` when `ins` (in the loop) runs in iteration k."""
        if op.kind == "imm" and isinstance(op.value, int):
            return _const(op.value)
        if op.kind == "addr":
            base = self.operand(ins, op.base, k) if op.base is not None else _const(0)
            return None if base is None else _add(base, _const(op.offset or 0))
        if op.kind != "reg" or op.negated:
            return None
        return self._reg(op.name, k, ins, 0)

    def _reg(self, reg: str, k: int, pos: Instruction, depth: int) -> Optional[Affine]:
        if depth > _DEPTH or k < 0:
            return None
        inside = [d for d in self.ctx.func.definitions(reg) if d.block in self.body]
        if not inside:
            return self._invariant(reg)
        if len(inside) != 1:
            return None
        d = inside[0]
        if d.guard is not None or d.defs != (reg,) or d.block not in self.every:
            return None
        if self._before(d, pos):
            return self._eval(d, k, depth + 1)
        return self._entry(reg) if k == 0 else self._eval(d, k - 1, depth + 1)

    def _invariant(self, reg: str) -> Optional[Affine]:
        if self.first is None:
            return None
        c = first_pass_value(self.ctx, self.first, Operand("reg", reg, name=reg))
        return _const(c) if c is not None else (((reg, 1),), 0)

    def _entry(self, reg: str) -> Optional[Affine]:
        """The value on entry to the loop's first iteration (every enclosing loop in its first pass)."""
        if self.first is None:
            return None
        c = first_pass_value(self.ctx, self.first, Operand("reg", reg, name=reg))
        if c is not None:
            return _const(c)
        outside = [d for d in self.ctx.func.definitions(reg) if d.block not in self.body]
        if len(outside) != 1 or outside[0].guard is not None or outside[0].defs != (reg,):
            return None
        d = outside[0]
        vals = []
        for o in d.operands[1:]:
            c = first_pass_value(self.ctx, d, o)
            if c is not None:
                vals.append(_const(c))
            elif o.kind == "reg" and not o.negated and not any(x.block in self.body
                                                               for x in self.ctx.func.definitions(o.name)):
                vals.append(self._invariant(o.name))   # not written in the loop: one value for the whole run
            else:
                return None
        return _apply(d, vals)

    def _eval(self, d: Instruction, k: int, depth: int) -> Optional[Affine]:
        key = (d.index, k)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = None   # a cycle inside one iteration stays unknown
        vals = [self._reg(o.name, k, d, depth) if o.kind == "reg" and not o.negated
                else _const(o.value) if o.kind == "imm" and isinstance(o.value, int) else None
                for o in d.operands[1:]]
        self._memo[key] = None if None in vals and d.opcode != "selp" else _apply(d, vals)
        return self._memo[key]


def iteration_order(ctx: Ctx, body: frozenset, header: int) -> dict[int, int]:
    """Block -> rank in a topological order of the loop body from its header (edges back to the header and
    edges of inner loops left out), so that "earlier in the iteration" does not depend on block layout."""
    back = {(u, v) for u, v in back_edges(ctx.func) if v in body}
    indeg = {b: 0 for b in body}
    for b in body:
        for s in ctx.func.blocks[b].succs:
            if s in body and (b, s) not in back:
                indeg[s] += 1
    order, ready = {}, [header]
    while ready:
        b = ready.pop()
        order[b] = len(order)
        for s in ctx.func.blocks[b].succs:
            if s in body and (b, s) not in back:
                indeg[s] -= 1
                if indeg[s] == 0:
                    ready.append(s)
    return order


def _apply(d: Instruction, vals: list) -> Optional[Affine]:
    op, w = d.opcode, _bits(d)
    consts = [v[1] if v is not None and not v[0] else None for v in vals]
    if op == "mov" and len(vals) == 1:
        return vals[0]
    if op == "cvt" and len(vals) == 1:
        return vals[0] if not vals[0][0] or d.types[-1][1:] in ("32", "64") else None
    if op in ("add", "sub") and len(vals) == 2:
        return _fold(_add(vals[0], vals[1], 1 if op == "add" else -1), w)
    if op in ("mul", "mad") and "lo" in d.modifiers or op == "mul" and "wide" not in d.modifiers \
            and "hi" not in d.modifiers:
        if len(vals) < 2:
            return None
        a, b = vals[:2]
        prod = _scale(a, consts[1]) if consts[1] is not None else _scale(b, consts[0]) if consts[0] is not None \
            else None
        if prod is None:
            return None
        return _fold(_add(prod, vals[2]) if op == "mad" and len(vals) == 3 else prod, w)
    if op == "shl" and len(vals) == 2 and consts[1] is not None:
        return _fold(_scale(vals[0], 1 << consts[1]), w)
    if op == "selp" and len(vals) == 3:
        if consts[2] is None:
            return None
        return vals[0] if consts[2] else vals[1]
    if None in consts:
        return None
    return _concrete(d, consts, w)


def _fold(v: Affine, w: int) -> Affine:
    return v if v[0] else _const(v[1] & ((1 << w) - 1))


def _concrete(d: Instruction, c: list, w: int) -> Optional[Affine]:
    op, mask = d.opcode, (1 << w) - 1
    signed = bool(d.types) and d.types[0].startswith("s")
    if op == "setp" and len(c) == 2:
        a, b = (_signed(x, w) if signed else x & mask for x in c)
        rel = next((m for m in d.modifiers if m in ("eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs")),
                   None)
        table = {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b,
                 "lo": a < b, "ls": a <= b, "hi": a > b, "hs": a >= b}
        return None if rel is None else _const(int(table[rel]))
    if op == "mul" and "hi" in d.modifiers and len(c) == 2:
        a, b = (_signed(x, w) if signed else x & mask for x in c)
        return _const(((a * b) >> w) & mask)
    if op == "shr" and len(c) == 2:
        return _const(((_signed(c[0], w) if signed else c[0] & mask) >> c[1]) & mask)
    if op == "bfe" and len(c) == 3 and not signed:
        return _const(((c[0] & mask) >> c[1]) & ((1 << c[2]) - 1))
    fns = {"and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b}
    if op in fns and len(c) == 2:
        return _const(fns[op](c[0], c[1]) & mask)
    if op == "not" and len(c) == 1:
        return _const(int(not c[0]) if d.types == ("pred",) else ~c[0] & mask)
    if op == "rem" and len(c) == 2 and c[1] and not signed:
        return _const((c[0] & mask) % (c[1] & mask))
    if op == "div" and len(c) == 2 and c[1] and not signed:
        return _const((c[0] & mask) // (c[1] & mask))
    return None


__all__ = ["LoopSimulation", "Affine"]
