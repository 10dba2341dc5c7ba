"""tcgen05 MMA ops of a printed TTGIR module (`ttng.tc_gen5_mma[_scaled]`): where each is and its operand types.

Triton prints each MMA on one line; the op tree (`bwtriton.mlir.ops`) finds them, this module splits the line
into head, attribute dict, operand types and location.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .ops import all_ops, parse_ops
from .syntax import split_top_level
from .types import MemDesc, parse_memdesc

#: The tcgen05 MMA ops of TTGIR (plain and block-scaled).
MMA_OPS = ("ttng.tc_gen5_mma", "ttng.tc_gen5_mma_scaled")


@dataclass
class MmaLine:
    """One tcgen05 MMA op as printed: where it is and what its operands are."""

    index: int                      # line index in the module text
    op: str                         # ttng.tc_gen5_mma or ttng.tc_gen5_mma_scaled
    types: list[str]                # operand types in order (a, b, acc, [a_scale, b_scale], barriers...)
    attrs: set[str] = field(default_factory=set)
    formats: tuple[str, str] | None = None   # (lhs, rhs) element formats of a scaled MMA

    @property
    def scaled(self) -> bool:
        return self.op.endswith("_scaled")

    def operand(self, i: int) -> MemDesc | None:
        return parse_memdesc(self.types[i]) if i < len(self.types) else None

    @property
    def a(self) -> MemDesc | None:
        return self.operand(0)

    @property
    def b(self) -> MemDesc | None:
        return self.operand(1)

    @property
    def acc(self) -> MemDesc | None:
        return self.operand(2)

    @property
    def two_ctas(self) -> bool:
        return "two_ctas" in self.attrs


def split_op_line(line: str) -> tuple[str, str, str, str] | None:
    """(head up to and including the attr dict, attr-dict text or '', type list, trailing loc) of an MMA line."""
    sep = line.find(" : !")
    if sep < 0:
        return None
    head, rest = line[:sep], line[sep + 3:]
    loc = ""
    li = rest.rfind(" loc(")
    if li >= 0:
        rest, loc = rest[:li], rest[li:]
    attr = ""
    if head.rstrip().endswith("}"):
        start = head.rfind("{")
        attr = head[start:]
    return head, attr, rest, loc


def find_mma_lines(text: str) -> list[MmaLine]:
    """Every tcgen05 MMA op of the printed module, in text order."""
    out = []
    for op in sorted((o for o in all_ops(parse_ops(text)) if o.name in MMA_OPS), key=lambda o: o.line):
        parts = split_op_line(op.head)
        if parts is None:
            continue
        head, attr, types, _ = parts
        attrs = {a.strip().split("=")[0].strip() for a in split_top_level(attr.strip("{}"))} if attr else set()
        fm = re.search(r"lhs = (\w+) rhs = (\w+)", head)
        out.append(MmaLine(op.line, op.name, split_top_level(types), attrs, (fm.group(1), fm.group(2)) if fm else None))
    return out
