"""Printed layout encodings: CGA (CTA-cluster) splits and `#ttng.tensor_memory(_scales)_encoding` fields.

CGA layout: with ``num_ctas = 2^k`` an encoding carries ``CGALayout = [[b0, b1], ...]``, one basis vector per bit of
the CTA id; a vector ``[1, 0]`` means "CTA-id bit i selects the next block along dim 0" (the tensor is split along
dim 0), ``[0, 0]`` means the CTAs hold copies (broadcast). Older printers use ``CTASplitNum = [2, 1]``.
"""
from __future__ import annotations

import re

from .syntax import parse_attr_params


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
