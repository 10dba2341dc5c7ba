"""Def-chain value resolution: what a register holds, as far as PTX text determines it.

`AbsVal(base, lo, hi, base_max)` means  value = B + [lo, hi]  where B is the run-time value of the opaque
symbol `base` (None: no symbol, i.e. the value lies in [lo, hi]); B lies in [0, base_max] when base_max is
known. Exact constants have base=None and lo == hi. This is enough for what Triton builds:

* idesc: `mov.b32 %r104, 136380432` (exact);
* smem descriptors: `bfe.u32 -> cvt.u64.u32 -> or.b64 with 0x40004040...` (high bits exact, start address
  a bounded range), K-steps by `add.s64 ..., 0x4000404000010042`; 64-bit values from `mov.b64 %rd, {lo, hi}`;
* TMEM addresses: `ld.shared` of the slot `tcgen05.alloc` wrote, plus constant column/lane offsets.

Registers with several definitions (loops) merge their definitions; cycles resolve to unknown. Everything not
understood becomes an opaque symbol, so callers can still ask "same base?".
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from .ir import Function, Instruction, Operand

SMEM_MAX = 232448           # bytes of shared memory per CTA on sm_100 (227 KiB): bounds smem addresses
_SREG_RANGES = {"%tid.x": 1023, "%tid.y": 1023, "%tid.z": 63, "%laneid": 31, "%warpid": 63,
                "%cluster_ctarank": 15, "%ntid.x": 1024}


@dataclass(frozen=True)
class AbsVal:
    base: Optional[str]
    lo: int
    hi: int
    base_max: Optional[int] = None
    stride: int = 1          # every value is lo + i*stride (relative to base); lets lane/column fields separate

    @property
    def exact(self) -> Optional[int]:
        return self.lo if self.base is None and self.lo == self.hi else None

    @property
    def offset(self) -> Optional[int]:
        """The constant offset from `base` when it is exact (base + const)."""
        return self.lo if self.lo == self.hi else None

    def full_range(self) -> Optional[tuple[int, int]]:
        if self.base is None:
            return (self.lo, self.hi)
        if self.base_max is None:
            return None
        return (self.lo, self.hi + self.base_max)

    def known_bits(self, width: int) -> tuple[int, int]:
        """(value, mask): bits common to every value in the range (its binary common prefix)."""
        r = self.full_range()
        if r is None or r[0] < 0 or r[1] >= 1 << width:
            return 0, 0
        lo, hi = r
        varying = (lo ^ hi).bit_length()
        mask = ((1 << width) - 1) & ~((1 << varying) - 1)
        return lo & mask, mask


def _const(v: int) -> AbsVal:
    return AbsVal(None, v, v)


def _width(ins: Instruction) -> int:
    for t in ins.types:
        if t.endswith("64"):
            return 64
        if t.endswith("32"):
            return 32
        if t.endswith("16"):
            return 16
        if t.endswith("8"):
            return 8
    return 64


class ValueResolver:
    """Resolve registers of one function to `AbsVal`s. `tmem_slots` maps an exact smem address
    (base symbol, offset) to the symbol name given to the TMEM base address loaded from it."""

    def __init__(self, func: Function, shared_symbols: frozenset[str] = frozenset()):
        self.func = func
        self.shared_symbols = shared_symbols
        self.tmem_slots: dict[tuple[Optional[str], int], str] = {}
        self._cache: dict[str, Optional[AbsVal]] = {}
        self._active: set[str] = set()

    def reset(self) -> None:
        self._cache.clear()

    # -- public -------------------------------------------------------------------------------------
    def operand(self, op: Operand, width: int = 64) -> Optional[AbsVal]:
        """Value of an operand (register, immediate, symbol, special register)."""
        if op.kind == "imm" and isinstance(op.value, int):
            return _const(op.value & ((1 << width) - 1) if op.value < 0 else op.value)
        if op.kind == "reg":
            return self.reg(op.name)  # type: ignore[arg-type]
        if op.kind == "sym":
            return AbsVal(op.name, 0, 0, SMEM_MAX if op.name in self.shared_symbols else None)
        if op.kind == "sreg":
            mx = _SREG_RANGES.get(op.name or "")
            return AbsVal(None, 0, mx) if mx is not None else AbsVal(op.name, 0, 0, None)
        return None

    def address(self, op: Operand) -> Optional[AbsVal]:
        """Value of an address operand `[base + off]`."""
        if op.kind != "addr" or op.items:
            return None
        if op.base is None:
            return _const(op.offset)
        b = self.operand(op.base)
        if b is None:
            return None
        return AbsVal(b.base, b.lo + op.offset, b.hi + op.offset, b.base_max, b.stride)

    def reg(self, name: str) -> Optional[AbsVal]:
        if name in self._cache:
            return self._cache[name]
        if name in self._active:
            return None  # cycle through a loop-carried register
        self._active.add(name)
        try:
            defs = self.func.definitions(name)
            vals = [self._eval(d, name) for d in defs]
            result = _merge(vals) if vals else AbsVal(f"?{name}", 0, 0, None)
            if result is None:
                result = AbsVal(f"?{name}", 0, 0, None)
        finally:
            self._active.discard(name)
        self._cache[name] = result
        return result

    # -- evaluation ---------------------------------------------------------------------------------
    def _opaque(self, ins: Instruction, reg: str) -> AbsVal:
        return AbsVal(f"?{reg}@{ins.line}", 0, 0, None)

    def _eval(self, ins: Instruction, reg: str) -> Optional[AbsVal]:
        op = ins.opcode
        ops = ins.operands
        w = _width(ins)
        wmask = (1 << w) - 1
        try:
            if op == "mov" and len(ops) == 2:
                src = ops[1]
                if src.kind == "vec":
                    return self._pack(src.items, w)
                v = self.operand(src, w)
                return v if v is not None else self._opaque(ins, reg)
            if op == "cvt" or op == "cvta":
                v = self.operand(ops[1], w)
                if v is None:
                    return self._opaque(ins, reg)
                r = v.full_range()
                if r is not None and r[0] >= 0 and r[1] <= wmask:
                    return v
                if v.exact is not None:
                    return _const(v.exact & wmask)
                return self._opaque(ins, reg)
            if op in ("add", "sub") and len(ops) == 3:
                a, b = self.operand(ops[1], w), self.operand(ops[2], w)
                if a is None or b is None:
                    return self._opaque(ins, reg)
                if op == "sub":
                    if b.exact is None:
                        return self._opaque(ins, reg)
                    b = _const(-b.exact)
                if a.exact is not None and b.exact is not None:
                    return _const((a.exact + b.exact) & wmask)
                if b.base is None and b.lo == b.hi:
                    return AbsVal(a.base, a.lo + b.lo, a.hi + b.lo, a.base_max, a.stride)
                if a.base is None and a.lo == a.hi:
                    return AbsVal(b.base, b.lo + a.lo, b.hi + a.lo, b.base_max, b.stride)
                ra, rb = a.full_range(), b.full_range()
                st = math.gcd(a.stride if a.lo != a.hi else 0, b.stride if b.lo != b.hi else 0) or 1
                if a.base is not None and b.base is None:
                    return AbsVal(a.base, a.lo + b.lo, a.hi + b.hi, a.base_max, st)
                if b.base is not None and a.base is None:
                    return AbsVal(b.base, b.lo + a.lo, b.hi + a.hi, b.base_max, st)
                if ra and rb:
                    return AbsVal(None, ra[0] + rb[0], ra[1] + rb[1])
                return self._opaque(ins, reg)
            if op == "shl" and len(ops) == 3:
                a, k = self.operand(ops[1], w), self.operand(ops[2], 32)
                if a is None or k is None or k.exact is None:
                    return self._opaque(ins, reg)
                if a.exact is not None:
                    return _const((a.exact << k.exact) & wmask)
                r = a.full_range()
                if r and r[0] >= 0 and (r[1] << k.exact) <= wmask:
                    return AbsVal(None, r[0] << k.exact, r[1] << k.exact, None,
                                  (a.stride if a.base is None else 1) << k.exact)
                return self._opaque(ins, reg)
            if op == "shr" and len(ops) == 3:
                a, k = self.operand(ops[1], w), self.operand(ops[2], 32)
                if a is None or k is None or k.exact is None:
                    return self._opaque(ins, reg)
                r = a.full_range()
                if r and r[0] >= 0:
                    return AbsVal(None, r[0] >> k.exact, r[1] >> k.exact)
                return self._opaque(ins, reg)
            if op == "bfe" and len(ops) == 4:
                a, p, ln = (self.operand(o, 32) for o in ops[1:4])
                if a is None or p is None or ln is None or p.exact is None or ln.exact is None:
                    return self._opaque(ins, reg)
                if a.exact is not None and "u" in "".join(ins.types)[:1]:
                    return _const((a.exact >> p.exact) & ((1 << ln.exact) - 1))
                hi = (1 << ln.exact) - 1
                r = a.full_range()
                if r and r[0] >= 0:
                    hi = min(hi, r[1] >> p.exact)
                return AbsVal(None, 0, hi)
            if op in ("and", "or", "xor") and len(ops) == 3:
                a, b = self.operand(ops[1], w), self.operand(ops[2], w)
                if a is None or b is None:
                    return self._opaque(ins, reg)
                if a.exact is not None and b.exact is not None:
                    f = {"and": int.__and__, "or": int.__or__, "xor": int.__xor__}[op]
                    return _const(f(a.exact, b.exact) & wmask)
                if b.exact is None and a.exact is not None:
                    a, b = b, a
                c = b.exact
                r = a.full_range()
                if c is None:  # two variable operands: bounds and power-of-two stride only
                    rb = b.full_range()
                    if op == "and" or not r or not rb or r[0] < 0 or rb[0] < 0:
                        return self._opaque(ins, reg)
                    st = min(_lowbit(a.stride if a.base is None else 1), _lowbit(b.stride if b.base is None else 1))
                    return AbsVal(None, 0, (1 << max(r[1], rb[1]).bit_length()) - 1, None, st)
                if op == "and":
                    if c < 0:
                        c &= wmask
                    if r and r[0] >= 0 and r[1] <= c and (c + 1) & c == 0:
                        return a  # mask keeps every possible bit
                    hi = min(c, r[1]) if r and r[0] >= 0 else c
                    return AbsVal(None, 0, hi, None, _lowbit(c) if c else 1)
                if op == "or":
                    # or == add when the constant has no bit inside the variable part's range
                    if r and r[0] >= 0 and c >= 0 and (c & ((1 << r[1].bit_length()) - 1)) == 0:
                        if a.base is None:
                            return AbsVal(None, a.lo + c, a.hi + c, None, a.stride)
                        return AbsVal(a.base, a.lo + c, a.hi + c, a.base_max, a.stride)
                    if c == 0:
                        return a
                if a.base is None and r and r[0] >= 0 and c >= 0:  # bounds of x | c, x ^ c
                    st = math.gcd(_lowbit(a.stride), _lowbit(c) if c else 0) or 1
                    return AbsVal(None, max(r[0], c) if op == "or" else 0,
                                  (1 << max(r[1], c).bit_length()) - 1, None, st)
                return self._opaque(ins, reg)
            if op == "shfl" and len(ops) >= 2:
                # any lane's copy of the source: same bounds (the source's def chain is per-thread uniform
                # in shape, which is all the bounds rely on)
                src = self.operand(ops[1], w)
                if src is not None and src.base is None:
                    return AbsVal(None, src.lo, src.hi, None, src.stride)
                return self._opaque(ins, reg)
            if op == "mul" and len(ops) == 3 and ("lo" in ins.modifiers or "wide" in ins.modifiers):
                a, b = self.operand(ops[1], w), self.operand(ops[2], w)
                if a and b and a.exact is not None and b.exact is not None:
                    return _const((a.exact * b.exact) & wmask)
                if a and b and b.exact is not None:
                    r = a.full_range()
                    if r and r[0] >= 0 and b.exact >= 0:
                        return AbsVal(None, r[0] * b.exact, r[1] * b.exact, None,
                                      max(1, (a.stride if a.base is None else 1) * b.exact))
                return self._opaque(ins, reg)
            if op == "selp" and len(ops) == 4:
                a, b = self.operand(ops[1], w), self.operand(ops[2], w)
                m = _merge([a, b])
                return m if m is not None else self._opaque(ins, reg)
            if op == "ld" and "shared" in " ".join(ins.modifiers) and len(ops) == 2:
                addr = self.address(ops[1])
                if addr is not None and addr.offset is not None:
                    sym = self.tmem_slots.get((addr.base, addr.offset))
                    if sym is not None:
                        return AbsVal(sym, 0, 0, None)
                return self._opaque(ins, reg)
        except (TypeError, ValueError):
            return self._opaque(ins, reg)
        return self._opaque(ins, reg)

    def _pack(self, items: tuple[Operand, ...], w: int) -> Optional[AbsVal]:
        """mov.bN %r, {lo, ..., hi}: little-endian concatenation of equal-width pieces."""
        if not items:
            return None
        piece = w // len(items)
        vals = [self.operand(o, piece) for o in items]
        if any(v is None for v in vals):
            return None
        total = 0
        var: Optional[AbsVal] = None
        for i, v in enumerate(vals):
            if v.exact is not None:  # type: ignore[union-attr]
                total |= (v.exact & ((1 << piece) - 1)) << (piece * i)  # type: ignore[union-attr]
            elif var is None and i == 0:
                var = v
            else:
                return None
        if var is None:
            return _const(total)
        r = var.full_range()
        if r is None or r[0] < 0 or r[1] >= 1 << piece:
            return AbsVal(var.base, var.lo + total, var.hi + total, var.base_max) if var.base else None
        return AbsVal(var.base, var.lo + total, var.hi + total, var.base_max)


def _lowbit(x: int) -> int:
    """Largest power of two dividing x (x itself 0 -> 0)."""
    return x & -x if x else 0


def _merge(vals: list[Optional[AbsVal]]) -> Optional[AbsVal]:
    if not vals or any(v is None for v in vals):
        return None
    first = vals[0]
    assert first is not None
    if all(v == first for v in vals):
        return first
    bases = {v.base for v in vals}  # type: ignore[union-attr]
    if len(bases) == 1:
        st = 0
        for v in vals:
            st = math.gcd(st, v.stride if v.lo != v.hi else 0)  # type: ignore[union-attr]
            st = math.gcd(st, v.lo - first.lo)  # type: ignore[union-attr]
        return AbsVal(first.base, min(v.lo for v in vals), max(v.hi for v in vals), first.base_max,  # type: ignore
                      st or 1)
    ranges = [v.full_range() for v in vals]  # type: ignore[union-attr]
    if all(r is not None for r in ranges):
        return AbsVal(None, min(r[0] for r in ranges), max(r[1] for r in ranges))  # type: ignore[index]
    return None


def resolve_value(func: Function, operand: Operand, resolver: Optional[ValueResolver] = None) -> Optional[AbsVal]:
    """Convenience: resolve one operand of `func` (a fresh resolver when none is given)."""
    r = resolver or ValueResolver(func)
    return r.address(operand) if operand.kind == "addr" else r.operand(operand)


# ---------------------------------------------------------------------------------------------------------
# Value numbering: structural keys of kernel-invariant values
#
# Two registers whose def chains are structurally equal hold equal values, provided every leaf of the chain
# is the same at every point of the kernel (kernel parameters, constants, symbol addresses, thread/CTA ids)
# and every step is a pure, unguarded, single definition. Such a key names a *value*, not a register, so a
# fact learned about it (e.g. "K > 0" from a branch) holds wherever the same value is recomputed.

# Special registers that never change during a thread's life (%warpid, %clock... may change: not listed).
_INVARIANT_SREGS = frozenset(("%tid.x", "%tid.y", "%tid.z", "%ntid.x", "%ntid.y", "%ntid.z", "%ctaid.x",
                              "%ctaid.y", "%ctaid.z", "%nctaid.x", "%nctaid.y", "%nctaid.z", "%laneid",
                              "%cluster_ctarank", "%cluster_nctarank", "%clusterid.x", "%clusterid.y",
                              "%clusterid.z", "%cluster_ctaid.x", "%cluster_ctaid.y", "%cluster_ctaid.z"))
# Pure operations: the result depends only on the operands.
_PURE_OPS = frozenset(("mov", "add", "sub", "mul", "mad", "mul24", "mad24", "shl", "shr", "and", "or", "xor",
                       "not", "neg", "abs", "min", "max", "selp", "cvt", "cvta", "bfe", "bfi", "prmt", "setp",
                       "div", "rem", "popc", "clz", "brev"))
_COMMUTATIVE = frozenset(("add", "mul", "and", "or", "xor", "min", "max"))
# Operations whose result bits do not depend on the signedness of the type (s32/u32/b32 are one key).
_SIGN_BLIND = frozenset(("add", "sub", "and", "or", "xor", "not", "shl", "mov"))
_MAX_DEPTH = 48
# setp comparison -> (relation, unsigned?) ; lo/ls/hi/hs are PTX's unsigned spellings
_CMP = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
        "lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}
_MIRROR = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}

ValueKey = tuple


def _type_width(t: str) -> Optional[int]:
    digits = t.lstrip("bsuf")
    return int(digits) if digits.isdigit() and t[:1] in "bsu" else None


class ValueNumbering:
    """Structural keys (`ValueKey`, hashable tuples) for the kernel-invariant values of one function.

    `key(op)` is None when the value is not provably invariant (loop-carried, loaded from memory, guarded...).
    `predicate(reg)` canonicalises an integer comparison so that e.g. `setp.gt.s32 %p3, %r25, 0` and
    `setp.lt.s32 %p17, %r25, 1` map to the same key with opposite polarity."""

    def __init__(self, func: Function):
        self.func = func
        self._cache: dict[str, Optional[ValueKey]] = {}
        self._active: set[str] = set()

    # -- keys of values ------------------------------------------------------------------------------
    def key(self, op: Operand, width: Optional[int] = None, depth: int = 0) -> Optional[ValueKey]:
        """Key of an operand's value, or None when it is not a kernel-invariant value."""
        if op.kind == "imm" and isinstance(op.value, int):
            return ("imm", op.value & ((1 << width) - 1) if width else op.value)
        if op.kind == "sreg":
            return ("sreg", op.name) if op.name in _INVARIANT_SREGS else None
        if op.kind == "sym":
            return ("sym", op.name)
        if op.kind == "reg" and not op.negated:
            return self._reg(op.name, depth)  # type: ignore[arg-type]
        return None

    def _reg(self, name: str, depth: int) -> Optional[ValueKey]:
        if name in self._cache:
            return self._cache[name]
        if name in self._active or depth > _MAX_DEPTH:
            return None
        defs = self.func.definitions(name)
        if len(defs) > 1 and self._one_group(name, defs):
            # Triton's masked load `mov %r, 0; @%p ld.global {%r}, [...]`: the writes run together, and no read
            # sits between them, so the register holds one value between runs of that block
            self._cache[name] = ("var", name)
            return self._cache[name]
        if len(defs) != 1 or defs[0].guard is not None or defs[0].defs != (name,):
            self._cache[name] = None  # several (loop) definitions, a conditional one, or a multi-result op
            return None
        self._active.add(name)
        try:
            result = self._expr(defs[0], depth + 1)
        finally:
            self._active.discard(name)
        if result is None:
            # Not computable from invariants (e.g. a load), but written by one instruction: until that
            # instruction runs again, every read sees the same value, so the register names it. Path facts about
            # such a value die when its definition executes (bwtriton.verify.checks.dataflow.PathValues).
            result = ("var", name)
        self._cache[name] = result
        return result

    def _one_group(self, name: str, defs: list[Instruction]) -> bool:
        """All writes of `name` in one basic block, each writing only it, with no read between the first and the
        last write."""
        block = defs[0].block
        if any(d.block != block or d.defs != (name,) for d in defs):
            return False
        first, last = defs[0].index, defs[-1].index
        return not any(name in i.uses for i in self.func.instructions[first + 1:last + 1] if i not in defs) \
            and not any(name in d.uses for d in defs)

    def _expr(self, ins: Instruction, depth: int) -> Optional[ValueKey]:
        ops = ins.operands[1:]
        width = next((w for w in map(_type_width, ins.types) if w), None)
        if ins.opcode == "ld" and ins.has("param") and len(ops) == 1 and ops[0].kind == "addr" \
                and ops[0].base is not None and ops[0].base.kind == "sym":
            # kernel parameters are read-only for the whole launch
            return ("ld.param", ins.types, ops[0].base.name, ops[0].offset)
        if ins.opcode == "shfl" and ins.has("idx") and len(ops) == 4 and ins.defs == (ins.operands[0].name,):
            # shfl.sync.idx x, 0, 31, -1: every lane gets lane 0's x (Triton's warp-uniform warp index)
            lane, clamp, mask = (self.key(o, 32, depth) for o in ops[1:])
            if lane == ("imm", 0) and clamp == ("imm", 31) and mask == ("imm", 0xFFFFFFFF):
                src = self.key(ops[0], 32, depth)
                return None if src is None else ("shfl.lane0", src)
            return None
        if ins.opcode not in _PURE_OPS or any(o.kind not in ("reg", "imm", "sreg", "sym") for o in ops):
            return None
        if ins.opcode == "mov" and len(ops) == 1:
            return self.key(ops[0], width, depth)  # a copy has its source's value
        keys = [self.key(o, width, depth) for o in ops]
        if any(k is None for k in keys):
            return None
        if ins.opcode in _COMMUTATIVE:
            keys = sorted(keys, key=repr)
        types = tuple(f"b{_type_width(t)}" if ins.opcode in _SIGN_BLIND and _type_width(t) else t
                      for t in ins.types)
        return (ins.opcode, ins.modifiers, types, *keys)

    # -- canonical predicates ------------------------------------------------------------------------
    def predicate(self, reg: str) -> Optional[tuple[ValueKey, bool]]:
        """(key, flip) with  reg == (key holds) XOR flip,  for an invariant integer comparison (through
        not.pred / mov.pred); None otherwise. Orderings are normalised to `x >= c` / `a >= b`, so each
        relation and its complement share one key."""
        flip = False
        for _ in range(8):
            defs = self.func.definitions(reg)
            if len(defs) != 1 or defs[0].guard is not None or defs[0].defs != (reg,):
                return None
            d = defs[0]
            srcs = d.operands[1:]
            if d.opcode in ("not", "mov") and len(srcs) == 1 and srcs[0].kind == "reg":
                flip ^= (d.opcode == "not") != srcs[0].negated
                reg = srcs[0].name  # type: ignore[assignment]
                continue
            canon = self._comparison(d)
            return None if canon is None else (canon[0], canon[1] ^ flip)
        return None

    def comparison(self, d: Instruction, key_of=None) -> Optional[tuple[ValueKey, bool]]:
        """Canonical (key, flip) of the integer comparison `setp` instruction `d`. `key_of(operand, width)`
        overrides how operands are keyed (the path analysis passes the values it knows on one path)."""
        return self._comparison(d, key_of)

    def _comparison(self, d: Instruction, key_of=None) -> Optional[tuple[ValueKey, bool]]:
        if d.opcode != "setp" or len(d.operands) != 3 or len(d.types) != 1:
            return None
        rel = next((_CMP[m] for m in d.modifiers if m in _CMP), None)
        ty = d.types[0]
        w = _type_width(ty)
        if rel is None or w is None or len(d.modifiers) != 1:
            return None  # float compares (NaN) and setp.*.and/or combinations are left alone
        unsigned = ty[0] != "s" or d.modifiers[0] in ("lo", "ls", "hi", "hs")
        a, b = ((key_of or self.key)(o, w) for o in d.operands[1:])
        if a is None or b is None:
            return None
        if rel in ("eq", "ne"):
            return ("eq", w, *sorted((a, b), key=repr)), rel == "ne"
        if a[0] == "imm" and b[0] != "imm":
            a, b, rel = b, a, _MIRROR[rel]
        sign = "u" if unsigned else "s"
        if b[0] == "imm":  # x REL c over integers: x > c == x >= c+1, x < c == !(x >= c) ...
            c = b[1]
            if not unsigned and c >= 1 << (w - 1):
                c -= 1 << w
            top = (1 << w) - 1 if unsigned else (1 << (w - 1)) - 1
            if rel in ("gt", "le"):
                if c >= top:
                    return None  # x > MAX is constant false: keep it out of the canonical form
                c += 1
            return ("ge", sign, w, a, ("imm", c)), rel in ("lt", "le")
        if rel in ("ge", "lt"):
            return ("ge", sign, w, a, b), rel == "lt"
        return ("ge", sign, w, b, a), rel == "gt"   # a <= b == b >= a ; a > b == !(b >= a)
