"""Barrier addresses computed from induction variables, bounded by z3 over the iteration number.

Gluon strength-reduces a stage barrier `bar + 8 * (c % S)` to `p - 8 S (c / S) + const` with `p = bar + 8 c`
advanced by 8 every iteration and `c / S` computed through `mul.hi`; `ValueResolver` cannot follow the cycle
and `ptx.stages` only bounds wrapping counters, so such a barrier looked like any barrier at all. Here each
loop's basic induction variables (`r = r + step`, one definition in the loop, run every iteration) become
`entry + step * n` with n the iteration number, the registers computed from them in the iteration become z3
terms, and the offset of the address from its shared-memory base is proven to lie in [lo, hi] with stride s for
every n and every value of the loop-invariant leaves (candidates from samples, then an UNSAT proof). Only what
z3 proves is used; anything else keeps the resolver's unknown value.

The terms are in integer arithmetic (products and shifts by constants only, so linear: `mul.hi` by a magic
constant is a floor division by 2^32), which z3 decides at once where the 64-bit bit-vector product times out.
Assumption (docs/verifier.md): loop-carried counters lie in [0, 2^24), other 32-bit leaves in [-2^30, 2^30),
and a loop runs fewer than 2^20 iterations; within these bounds the 32-bit values of the address arithmetic
do not wrap, so integer and bit-vector semantics agree.
"""
from __future__ import annotations

from math import gcd
from typing import Optional

from bwtriton.ptx.ir import Instruction, Operand
from bwtriton.ptx.smt import z3
from bwtriton.ptx.values import AbsVal

from .async_copy import barrier_operand
from .context import Ctx
from .iterations import iteration_order
from .mbarrier_phase import natural_loops, spin_loop

_BOUND = 1 << 30
_COUNTER = 1 << 24   # a loop-carried counter (iterations or tiles so far) stays below this
_MAX_ITER = 1 << 20
_TIMEOUT_MS = 1000


class _Loop:
    def __init__(self, ctx: Ctx, body: frozenset, header: int) -> None:
        self.ctx, self.body = ctx, body
        self.rank = iteration_order(ctx, body, header)
        self.n = z3.Int("iter_n")
        self.leaves: dict[str, object] = {}
        self.bounds: list = [self.n >= 0, self.n < _MAX_ITER]
        self.bases: dict[str, object] = {}
        self.entries: dict[str, object] = {}
        self.header = header

    def before(self, d: Instruction, pos: Instruction) -> bool:
        return (self.rank.get(d.block, -1), d.index) < (self.rank.get(pos.block, -1), pos.index)

    def leaf(self, reg: str, depth: int = 0):
        if reg in self.leaves:
            return self.leaves[reg]
        v = self.ctx.resolver.reg(reg)
        defs = self.ctx.func.definitions(reg)
        t = None
        if v is not None and v.lo == v.hi and (v.base is None or not v.base.startswith("?")):
            t = z3.IntVal(v.lo)
            if v.base is not None:
                t = self.base(v.base) + t
        elif len(defs) == 1 and defs[0].guard is None and defs[0].defs == (reg,) and depth < 12:
            # a loop-invariant value computed from others (`shl c, 3` of the outer counter): keep the relation
            args = [self.leaf(o.name, depth + 1) if o.kind == "reg" and not o.negated
                    else z3.IntVal(o.value) if o.kind == "imm" and isinstance(o.value, int)
                    else None for o in defs[0].operands[1:]]
            t = None if any(a is None for a in args) else _op(defs[0], args)
        if t is None:
            t = z3.Int(f"leaf_{reg}")
            rng = getattr(self.ctx.resolver, "stages", {}).get(reg)
            lo, hi = rng if rng else ((0, _COUNTER) if len(self.ctx.func.definitions(reg)) > 1 else (-_BOUND, _BOUND))
            self.bounds += [t >= lo, t <= hi]
        self.leaves[reg] = t
        return t

    def base(self, name: str):
        if name not in self.bases:
            self.bases[name] = z3.Int(f"base_{name}")
        return self.bases[name]

    def term(self, op: Operand, pos: Instruction, depth: int = 0):
        if op.kind == "imm" and isinstance(op.value, int):
            return z3.IntVal(op.value)
        if op.kind != "reg" or op.negated or depth > 24:
            return None
        inside = [d for d in self.ctx.func.definitions(op.name) if d.block in self.body]
        if not inside:
            return self.leaf(op.name)
        if len(inside) != 1 or inside[0].guard is not None or inside[0].defs != (op.name,):
            return None
        d = inside[0]
        step = _step(d, op.name)
        if step is not None:
            entry = self._entry(op.name)
            if entry is None:
                return None
            return entry + step * (self.n + (1 if self.before(d, pos) else 0))
        if not self.before(d, pos):
            return None
        args = [self.term(o, d, depth + 1) for o in d.operands[1:]]
        return None if any(a is None for a in args) else _op(d, args)

    def _entry(self, reg: str, depth: int = 0):
        """The register's value when the loop is entered: its one definition outside the loop when that runs
        before every entry (else the value a previous run left: a free counter)."""
        if reg in self.entries:
            return self.entries[reg]
        self.entries[reg] = None
        outside = [d for d in self.ctx.func.definitions(reg) if d.block not in self.body]
        t = None
        if len(outside) == 1 and outside[0].guard is None and depth < 8 and self._covers_entry(outside[0]):
            d = outside[0]
            args = [self._entry(o.name, depth + 1) if o.kind == "reg" and any(
                x.block in self.body for x in self.ctx.func.definitions(o.name)) else self.term(o, d) for o in
                d.operands[1:]]
            t = None if any(x is None for x in args) else _op(d, args)
        if t is None:
            t = z3.Int(f"entry_{reg}")
            self.bounds += [t >= 0, t < _COUNTER]
        self.entries[reg] = t
        return t

    def _covers_entry(self, d: Instruction) -> bool:
        """Every way into the loop header from outside (the function entry, or leaving the loop and coming
        back round an enclosing loop) passes the block of `d`."""
        func = self.ctx.func
        start = {0} if d.block != 0 else set()
        start |= {s for b in self.body for s in func.blocks[b].succs if s not in self.body}
        seen, work = set(), [x for x in start if x != d.block]
        while work:
            x = work.pop()
            if x in seen:
                continue
            seen.add(x)
            if x == self.header:
                return False
            work.extend(s for s in func.blocks[x].succs if s != d.block and s not in seen)
        return True


def _step(d: Instruction, reg: str) -> Optional[int]:
    """The constant step of `add r, r, step` (a basic induction variable), else None."""
    if d.opcode != "add" or len(d.operands) != 3:
        return None
    a, b = d.operands[1:]
    if a.kind == "reg" and a.name == reg and b.kind == "imm" and isinstance(b.value, int):
        return b.value
    if b.kind == "reg" and b.name == reg and a.kind == "imm" and isinstance(a.value, int):
        return a.value
    return None


def _const_of(x) -> Optional[int]:
    x = z3.simplify(x)
    return x.as_long() if z3.is_int_value(x) else None


def _op(d: Instruction, a: list):
    """The instruction's value in integer arithmetic; None unless linear (products and shifts by constants)."""
    op, signed = d.opcode, bool(d.types) and d.types[0].startswith("s")
    c = [_const_of(x) for x in a]
    u32 = [x % (1 << 32) for x in a]   # the unsigned reading of a 32-bit value
    if op in ("mov", "cvt") and len(a) == 1:
        return a[0]
    if op == "add" and len(a) == 2:
        return a[0] + a[1]
    if op == "sub" and len(a) == 2:
        return a[0] - a[1]
    if op in ("mul", "mad") and ("lo" in d.modifiers or "hi" in d.modifiers) and len(a) >= 2:
        if c[0] is None and c[1] is None:
            return None
        x, m = (a[1], c[0]) if c[0] is not None else (a[0], c[1])
        if "hi" in d.modifiers:
            if op != "mul":
                return None
            if signed:
                m = m - (1 << 32) if m >= 1 << 31 else m
                return (x * m) / (1 << 32)
            return ((x % (1 << 32)) * (m % (1 << 32))) / (1 << 32)
        prod = x * m
        return prod + a[2] if op == "mad" and len(a) == 3 else prod if op == "mul" else None
    if op == "shl" and len(a) == 2 and c[1] is not None:
        return a[0] * (1 << c[1])
    if op == "shr" and len(a) == 2 and c[1] is not None:
        return (a[0] if signed else u32[0]) / (1 << c[1])   # floor division: the arithmetic shift
    if op == "and" and len(a) == 2 and any(k is not None and k > 0 and k & (k + 1) == 0 for k in c):
        k, x = (c[1], u32[0]) if c[1] is not None and c[1] & (c[1] + 1) == 0 else (c[0], u32[1])
        return x % (k + 1)
    if op == "bfe" and len(a) == 3 and not signed and c[1] is not None and c[2] is not None:
        return (u32[0] / (1 << c[1])) % (1 << c[2])
    return None


def _bound(loop: _Loop, t) -> Optional[tuple[str, int, int, int]]:
    """(base, lo, hi, stride) with t - base in [lo, hi], lo + stride * j, proven for every iteration."""
    if len(loop.bases) != 1:
        return None
    name, b = next(iter(loop.bases.items()))
    off = t - b
    samples = []
    zero = [(v, z3.IntVal(0)) for v in z3.z3util.get_vars(off) if not v.eq(loop.n) and not v.eq(b)]
    for k in range(24):
        s = z3.simplify(z3.substitute(off, (loop.n, z3.IntVal(k)), (b, z3.IntVal(0)), *zero))
        if not z3.is_int_value(s):
            return None   # the base does not cancel: not base + bounded offset
        samples.append(s.as_long())
    lo, hi = min(samples), max(samples)
    stride = 0
    for x in samples:
        stride = gcd(stride, x - lo)
    stride = stride or 1
    solver = z3.Solver()
    solver.set("timeout", _TIMEOUT_MS)
    solver.add(*loop.bounds)
    solver.add(z3.Or(off < lo, off > hi, (off - lo) % stride != 0))
    return (name, lo, hi, stride) if solver.check() == z3.unsat else None


def refine_loop_barriers(ctx: Ctx) -> None:
    """Give the resolver proven ranges for barrier operands computed from induction variables."""
    if z3 is None:
        return
    loops = [(lh, body) for lh, body in natural_loops(ctx.func) if not spin_loop(ctx.func, lh[0], body)]
    users = [i for i in ctx.func.instructions if i.opcode.startswith(("mbarrier.", "tcgen05.commit"))]
    for ins in users:
        op = barrier_operand(ins)
        reg = op.base if op is not None and op.kind == "addr" else op
        if reg is None or reg.kind != "reg":
            continue
        v = ctx.resolver.reg(reg.name)
        if v is not None and not (v.base or "").startswith("?"):
            continue
        # the innermost loop defining it
        defs = ctx.func.definitions(reg.name)
        inner = [(lh, body) for lh, body in loops if defs and all(d.block in body for d in defs)]
        if not inner:
            continue
        (_, header), body = min(inner, key=lambda x: len(x[1]))
        loop = _Loop(ctx, body, header)
        t = loop.term(reg, ins)
        got = _bound(loop, t) if t is not None else None
        if got is not None:
            name, lo, hi, stride = got
            base_max = next((x.base_max for x in (ctx.resolver.reg(r) for r in loop.leaves)
                             if x is not None and x.base == name), None)
            ctx.resolver._cache[reg.name] = AbsVal(name, lo, hi, base_max, stride)


__all__ = ["refine_loop_barriers"]
