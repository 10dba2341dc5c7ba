"""Value keys that also name thread-index values: `%warpid` and `elect.sync` predicates.

`ValueNumbering` keys kernel-invariant values. Two more values are invariant for a thread, and the verifier's
guard model (docs/verifier.md, "Guards and dead code") relates them through z3 (`bwtriton.ptx.smt`):

* `%warpid` is keyed ("warp.of.tid",): modelled as %tid.x / 32 (1-D CTAs; docs/verifier.md, Assumptions);
* the predicate of an unguarded `elect.sync %r|%p, mask` is ("elect.pred", mask key): true in exactly the lane
  the mask elects. PTX: "the same leader thread is chosen for the same membermask", so every elect of one mask
  has this one key, and as a branch fact it is the comparison  %laneid == leader(mask).
"""
from __future__ import annotations

from typing import Optional

from .ir import Instruction, Operand
from .values import ValueKey, ValueNumbering


def elect_predicate(defs: list[Instruction], reg: str, key_of) -> Optional[ValueKey]:
    """("elect.pred", mask key) when `reg` is the predicate of one unguarded `elect.sync %r|%p, mask`."""
    if len(defs) != 1 or defs[0].opcode != "elect" or defs[0].guard is not None:
        return None
    d = defs[0]
    if not d.operands or d.operands[0].kind != "pair" or len(d.operands) < 2 or d.defs[-1:] != (reg,):
        return None
    mask = key_of(d.operands[1])
    return None if mask is None else ("elect.pred", mask)


class ThreadValueNumbering(ValueNumbering):
    """`ValueNumbering` with %warpid and elect.sync predicates keyed (see the module docstring)."""

    def key(self, op: Operand, width: Optional[int] = None, depth: int = 0) -> Optional[ValueKey]:
        if op.kind == "sreg" and op.name == "%warpid":
            return ("warp.of.tid",)
        return super().key(op, width, depth)

    def _reg(self, name: str, depth: int) -> Optional[ValueKey]:
        if name not in self._cache:
            elect = elect_predicate(self.func.definitions(name), name, lambda o: self.key(o, 32, depth + 1))
            if elect is not None:
                self._cache[name] = elect
        return super()._reg(name, depth)

    def predicate(self, reg: str) -> Optional[tuple[ValueKey, bool]]:
        """As `ValueNumbering.predicate`, and an elect.sync predicate (through not/mov) is the fact
        %laneid == leader(mask)."""
        flip, cur = False, reg
        for _ in range(8):
            defs = self.func.definitions(cur)
            elect = elect_predicate(defs, cur, lambda o: self.key(o, 32))
            if elect is not None:
                pair = sorted((("sreg", "%laneid"), ("elect.leader", elect[1])), key=repr)
                return ("eq", 32, *pair), flip
            if len(defs) != 1 or defs[0].guard is not None or defs[0].defs != (cur,):
                break
            d, srcs = defs[0], defs[0].operands[1:]
            if d.opcode in ("not", "mov") and len(srcs) == 1 and srcs[0].kind == "reg":
                flip ^= (d.opcode == "not") != srcs[0].negated
                cur = srcs[0].name  # type: ignore[assignment]
                continue
            break
        return super().predicate(reg)


__all__ = ["ThreadValueNumbering", "elect_predicate"]
