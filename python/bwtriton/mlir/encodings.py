"""Printed layout encodings: CGA (CTA-cluster) splits and `#ttng.tensor_memory(_scales)_encoding` fields.

CGA layout: with ``num_ctas = 2^k`` an encoding carries ``CGALayout = [[b0, b1], ...]``, one basis vector per bit of
the CTA id; a vector ``[1, 0]`` means "CTA-id bit i selects the next block along dim 0" (the tensor is split along
dim 0), ``[0, 0]`` means the CTAs hold copies (broadcast). Older printers use ``CTASplitNum = [2, 1]``, and TMEM
encodings ``CTASplitM = 2`` / ``CTASplitN = 2`` (Triton 3.6, 3.7) where later ones print ``CGALayout``.
"""
from __future__ import annotations

import re

from .syntax import parse_attr_params

_CGA_RE = re.compile(r"CGALayout = \[((?:\[[^\[\]]*\](?:,\s*)?)*)\]")


def cga_basis(encoding: str) -> list[list[int]] | None:
    """The ``CGALayout`` basis vectors of an encoding (``[[1, 0]]``), or None when it prints no ``CGALayout``."""
    m = _CGA_RE.search(encoding)
    if not m:
        return None
    return [[int(v) for v in vec.split(",") if v.strip()] for vec in re.findall(r"\[([^\[\]]*)\]", m.group(1))]


def cga_split(encoding: str, rank: int = 2) -> tuple[int, ...] | None:
    """How many CTAs split each dim of a tensor with this encoding, e.g. (2, 1) = split along dim 0.

    Returns None when the encoding carries no CGA information (one CTA, or an encoding without CTA fields).
    Broadcast basis vectors ([0, 0]) split nothing.
    """
    basis = cga_basis(encoding)
    if basis is not None:
        split = [1] * rank
        for vec in basis:
            for dim, v in enumerate(vec[:rank]):
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
    """Fields of a ``#ttng.tensor_memory_encoding<...>`` / ``..._scales_encoding<...>`` (booleans as 0/1).

    A printed ``CGALayout`` comes back as the ``CTASplitM`` / ``CTASplitN`` counts that older Tritons print, so
    callers read one spelling; fields that are neither numbers nor booleans (``ctaMode = ...``) are left out."""
    if not re.search(r"tensor_memory(?:_scales)?_encoding<.*>\s*$", encoding.strip()):
        return {}
    out: dict[str, int] = {}
    for key, value in parse_attr_params(encoding).items():
        if key == "CGALayout":
            split = cga_split(encoding)
            if split and split[0] > 1:
                out["CTASplitM"] = split[0]
            if split and len(split) > 1 and split[1] > 1:
                out["CTASplitN"] = split[1]
        elif value in ("true", "false"):
            out[key] = int(value == "true")
        elif re.fullmatch(r"-?\d+", value):
            out[key] = int(value)
    return out
