"""Parsing and rewriting of CGA (CTA-cluster) layout attributes and tcgen05 MMA ops in TTGIR text.

Used by `pair_ctas`. Triton 3.6 prints layouts as module-level aliases (``#tmem = #ttng.tensor_memory_encoding<...>``,
``#shared1 = #ttg.nvmma_shared<{..., CGALayout = [[0, 1]]}>``) and tcgen05 MMAs as one line each, so the helpers work
on that printed form: op lines are split into their operand types, which `mlir_util` parses (aliases, memdescs,
attribute parameters). Everything here is pure text processing (no MLIR context), which keeps it unit-testable.

CGA layout: with ``num_ctas = 2^k`` an encoding carries ``CGALayout = [[b0, b1], ...]``, one basis vector per bit of
the CTA id; a vector ``[1, 0]`` means "CTA-id bit i selects the next block along dim 0" (the tensor is split along
dim 0), ``[0, 0]`` means the CTAs hold copies (broadcast). Older printers use ``CTASplitNum = [2, 1]``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .mlir_util import MemDesc, parse_attr_params, parse_memdesc, split_top_level

MMA_OPS = ("ttng.tc_gen5_mma", "ttng.tc_gen5_mma_scaled")
TWO_CTAS_MODULE_ATTR = "ttng.two-ctas"

def cga_split(encoding: str, rank: int = 2) -> tuple[int, ...] | None:
    """How many CTAs split each dim of a tensor with this encoding, e.g. (2, 1) = split along dim 0.

    Returns None when the encoding carries no CGA information (one CTA, or an encoding without CTA fields).
    Broadcast basis vectors ([0, 0]) split nothing.
    """
    m = re.search(r"CGALayout = \[(.*?)\]\]", encoding)
    if m:
        split = [1] * rank
        for vec in re.findall(r"\[([^\[\]]*)\]", m.group(1) + "]"):
            vals = [int(v) for v in vec.split(",") if v.strip()]
            for dim, v in enumerate(vals[:rank]):
                if v:
                    split[dim] *= 2
        return tuple(split)
    m = re.search(r"CTASplitNum = \[([\d,\s]+)\]", encoding)
    if m:
        return tuple(int(v) for v in m.group(1).split(","))
    fields = tmem_fields(encoding) if "tensor_memory" in encoding else {}
    if fields:
        return (fields.get("CTASplitM", 1), fields.get("CTASplitN", 1))
    return None


def tmem_fields(encoding: str) -> dict[str, int]:
    """Fields of a ``#ttng.tensor_memory_encoding<...>`` / ``..._scales_encoding<...>`` (booleans as 0/1)."""
    if not re.search(r"tensor_memory(?:_scales)?_encoding<.*>\s*$", encoding.strip()):
        return {}
    return {key: 1 if value == "true" else 0 if value == "false" else int(value)
            for key, value in parse_attr_params(encoding).items()}


def with_two_ctas(encoding: str) -> str:
    """A tensor_memory_encoding with ``twoCTAs = true`` (unchanged if it already has it)."""
    if "twoCTAs = true" in encoding:
        return encoding
    if not encoding.rstrip().endswith(">") or "tensor_memory_encoding<" not in encoding:
        raise ValueError(f"not a tensor_memory_encoding: {encoding!r}")
    body = encoding.rstrip()[:-1]
    return body + ", twoCTAs = true>"


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


def _split_op_line(line: str) -> tuple[str, str, str, str] | None:
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
    """Every tcgen05 MMA op line of the printed module."""
    out = []
    for i, line in enumerate(text.splitlines()):
        s = line.lstrip()
        op = next((o for o in sorted(MMA_OPS, key=len, reverse=True) if s.startswith(o + " ")), None)
        if op is None:
            continue
        parts = _split_op_line(line)
        if parts is None:
            continue
        head, attr, types, _ = parts
        attrs = {a.strip().split("=")[0].strip() for a in split_top_level(attr.strip("{}"))} if attr else set()
        fm = re.search(r"lhs = (\w+) rhs = (\w+)", head)
        out.append(MmaLine(i, op, split_top_level(types), attrs, (fm.group(1), fm.group(2)) if fm else None))
    return out


def add_unit_attr(line: str, name: str) -> str:
    """The op line with unit attribute `name` added to its attr dict (created if missing)."""
    parts = _split_op_line(line)
    if parts is None:
        raise ValueError(f"cannot find the type list of op line: {line.strip()[:120]}")
    head, attr, types, loc = parts
    if attr:
        names = {a.strip().split("=")[0].strip() for a in split_top_level(attr.strip("{}"))}
        if name in names:
            return line
        new_head = head[:len(head) - len(attr)] + attr[:-1].rstrip() + f", {name}}}"
    else:
        new_head = head.rstrip() + f" {{{name}}}"
    return f"{new_head} : {types}{loc}"


def replace_alias(text: str, alias: str, new_value: str) -> str:
    """Replace the definition of module alias `alias` (``#tmem = ...``)."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith(alias + " = "):
            end = "\n" if line.endswith("\n") else ""
            lines[i] = f"{alias} = {new_value}{end}"
            return "".join(lines)
    raise KeyError(f"no alias {alias} in module")
