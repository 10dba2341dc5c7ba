"""Reader of one printed `tt.dot_scaled` op (its custom assembly format is fixed by TritonOps.td)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from .syntax import split_top_level
from .types import TensorType

# `%d = tt.dot_scaled %a (scale %as)?, %b (scale %bs)?, %c lhs = F rhs = F {attrs}? : types -> type loc(...)?`
_DOT_SCALED = re.compile(
    r"^(?P<indent>\s*)(?P<result>%[\w.$\-#]+) = tt\.dot_scaled (?P<a>%[\w.$\-#]+)(?: scale (?P<a_scale>%[\w.$\-#]+))?"
    r", (?P<b>%[\w.$\-#]+)(?: scale (?P<b_scale>%[\w.$\-#]+))?, (?P<acc>%[\w.$\-#]+)"
    r" lhs = (?P<a_fmt>\w+) rhs = (?P<b_fmt>\w+)(?: (?P<attrs>\{[^{}]*\}))?"
    r" : (?P<types>.*?) -> (?P<out>tensor<[^>]*>)(?P<loc>\s+loc\(.*\))?\s*$")
_BOOL_ATTR = re.compile(r"(?P<key>\w+)\s*=\s*(?P<value>true|false)")


@dataclass
class DotScaledOp:
    """One parsed `tt.dot_scaled` line. Scales are None for unscaled (bf16/fp16) operands."""

    indent: str
    result: str
    a: str
    a_scale: Optional[str]
    b: str
    b_scale: Optional[str]
    acc: str
    a_format: str
    b_format: str
    attrs: dict[str, bool]
    a_type: TensorType
    a_scale_type: Optional[TensorType]
    b_type: TensorType
    b_scale_type: Optional[TensorType]
    out_type: TensorType
    loc: str = ""

    @property
    def lhs_k_pack(self) -> bool:
        return self.attrs.get("lhs_k_pack", True)

    @property
    def rhs_k_pack(self) -> bool:
        return self.attrs.get("rhs_k_pack", True)

    @property
    def scale_elems(self) -> tuple[Optional[str], Optional[str]]:
        return (self.a_scale_type.elem if self.a_scale_type else None,
                self.b_scale_type.elem if self.b_scale_type else None)

    @property
    def is_nvfp4(self) -> bool:
        """Any operand carries UE4M3 (fp8e4nv) scales: Triton's group-16 NVFP4 flavour."""
        return "f8E4M3FN" in self.scale_elems


def parse_dot_scaled(line: str) -> Optional[DotScaledOp]:
    """Parse a `tt.dot_scaled` line; None when the line is another op."""
    m = _DOT_SCALED.match(line.rstrip("\n"))
    if not m:
        return None
    lhs_types, _, rhs_types = m["types"].partition(" * ")
    a_types = [TensorType.parse(t) for t in split_top_level(lhs_types)]
    b_types = [TensorType.parse(t) for t in split_top_level(rhs_types)]
    if len(a_types) != 1 + bool(m["a_scale"]) or len(b_types) != 1 + bool(m["b_scale"]):
        raise ValueError(f"tt.dot_scaled operand/type mismatch in: {line.strip()}")
    attrs = {am["key"]: am["value"] == "true" for am in _BOOL_ATTR.finditer(m["attrs"] or "")}
    return DotScaledOp(indent=m["indent"], result=m["result"], a=m["a"], a_scale=m["a_scale"], b=m["b"],
                       b_scale=m["b_scale"], acc=m["acc"], a_format=m["a_fmt"], b_format=m["b_fmt"], attrs=attrs,
                       a_type=a_types[0], a_scale_type=a_types[1] if len(a_types) > 1 else None,
                       b_type=b_types[0], b_scale_type=b_types[1] if len(b_types) > 1 else None,
                       out_type=TensorType.parse(m["out"]), loc=(m["loc"] or "").strip())
