"""Guards whose value is a constant: instructions that never run, and guards that always hold.

Triton's pipeliner predicates the stages it peels with a constant when the trip count is a compile-time constant:
`mov.pred %p41, 0; @%p41 cp.async.bulk.tensor ...` is a TMA that never runs (the K loop of the block-scaled
tutorial at K = 512 has fewer iterations than stages), and `mov.pred %p30, -1; @%p30 tcgen05.st` one that always
does. A protocol rule must not see the first kind at all (a refill that never happens cannot race an MMA), so
`without_constant_guards` returns a copy of the function without them, line numbers unchanged.

A guard is constant when its value key (`ValueNumbering`) is a constant, or when z3 proves one value impossible
from launch facts alone (`Facts.constant_truth`: thread index below `.reqntid`, and/or/not of predicates,
comparisons of constants); no size assumption is used, so nothing that can run is dropped.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from .cfg import build_cfg
from .ir import Function, Instruction, Operand
from .smt import Facts
from .thread_values import ThreadValueNumbering
from .values import ValueNumbering


def constant_guards(func: Function, facts: Facts, numbering: Optional[ValueNumbering] = None) -> dict[int, bool]:
    """Instruction index -> True (its guard always holds) / False (it never runs), for guarded instructions whose
    guard predicate is provably constant."""
    num = numbering or ThreadValueNumbering(func)
    by_reg: dict[str, Optional[bool]] = {}
    out: dict[int, bool] = {}
    for ins in func.instructions:
        g = ins.guard
        if g is None:
            continue
        if g.reg not in by_reg:
            key = num.key(Operand("reg", g.reg, name=g.reg))
            by_reg[g.reg] = None if key is None else facts.constant_truth(key)
        truth = by_reg[g.reg]
        if truth is not None:
            out[ins.index] = truth != g.negated
    return out


def without_constant_guards(func: Function, truth: dict[int, bool]) -> Function:
    """A copy of `func` without the instructions that never run and with always-true guards removed (CFG rebuilt,
    lines and the original function untouched). `truth` comes from `constant_guards`."""
    if not truth:
        return func
    statements: list = []
    for st in func.statements:
        if not isinstance(st, Instruction):
            statements.append(st)
            continue
        verdict = truth.get(st.index)
        if verdict is False:
            continue
        statements.append(_copy(st, drop_guard=verdict is True))
    new = dataclasses.replace(func, statements=statements, blocks=[], label_block={}, _defs=None)
    new.instructions = [s for s in statements if isinstance(s, Instruction)]
    for i, ins in enumerate(new.instructions):
        ins.index = i
    build_cfg(new)
    return new


def _copy(ins: Instruction, drop_guard: bool) -> Instruction:
    if not drop_guard:
        return dataclasses.replace(ins)
    uses = list(ins.uses)
    if ins.guard is not None and ins.guard.reg in uses:
        uses.reverse()
        uses.remove(ins.guard.reg)   # the guard is appended last (parser._defs_uses)
        uses.reverse()
    return dataclasses.replace(ins, guard=None, uses=tuple(uses))


__all__ = ["constant_guards", "without_constant_guards"]
