"""Printed MLIR types: `!ttg.memdesc<...>`, ranked `tensor<...>` and element bit widths. The one type reader."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from .syntax import matching_close, resolve_alias, split_top_level


@dataclass(frozen=True)
class MemDesc:
    """A parsed `!ttg.memdesc<shape x elem, encoding, memory space[, mutable][, alloc shape]>`.

    `encoding` and `memory_space` are resolved through the aliases given to `parse_memdesc`; without aliases they
    are as printed (e.g. '#shared1'), which is what a rewrite of the alias definition needs."""

    shape: tuple[int, ...]
    element: str
    encoding: str          # e.g. '#ttng.tensor_memory_encoding<blockM = 128, ...>' (or the alias name)
    memory_space: str      # e.g. '#ttng.tensor_memory', '#smem'
    mutable: bool

    @property
    def in_tmem(self) -> bool:
        return "tensor_memory" in self.memory_space and "encoding" not in self.memory_space

    @property
    def encoding_name(self) -> str:
        return self.encoding.split("<", 1)[0]


def element_bits(element: str) -> int:
    """Bit width of an MLIR element type name: f32 -> 32, bf16 -> 16, f8E4M3FN -> 8, i8 -> 8, f4E2M1FN -> 4."""
    m = re.fullmatch(r"[iu]?i?(\d+)", element)
    if element.startswith(("i", "ui", "si")) and m:
        return int(re.sub(r"\D", "", element))
    m = re.fullmatch(r"(?:f|bf|tf)(\d+)", element)
    if m:
        return 19 if element == "tf32" else int(m.group(1))
    m = re.fullmatch(r"f(\d+)E\d+M\d+\w*", element)
    if m:
        return int(m.group(1))
    raise ValueError(f"unknown element type {element!r}")


_MEMDESC_DIMS_RE = re.compile(r"^(?P<dims>(?:\d+x)+)(?P<elem>[\w.]+)$")


def parse_memdesc(type_text: str, aliases: dict[str, str] | None = None) -> MemDesc | None:
    """Parse a memdesc type, resolving encoding and memory space through `aliases`; None when it is not one."""
    t = type_text.strip()
    if not t.startswith("!ttg.memdesc<"):
        return None
    lt = t.index("<")
    parts = split_top_level(t[lt + 1:matching_close(t, lt)])
    dims = _MEMDESC_DIMS_RE.match(parts[0]) if parts else None
    if not dims:
        return None
    aliases = aliases or {}
    encoding = resolve_alias(parts[1], aliases) if len(parts) > 1 else ""
    space = resolve_alias(parts[2], aliases) if len(parts) > 2 else ""
    return MemDesc(shape=tuple(int(d) for d in dims["dims"].rstrip("x").split("x")), element=dims["elem"],
                   encoding=encoding, memory_space=space, mutable="mutable" in parts[3:])


_TENSOR = re.compile(r"^tensor<(?P<dims>(?:\d+x)*)(?P<elem>[\w]+)>$")


@dataclass(frozen=True)
class TensorType:
    """A ranked TTIR tensor type without encoding, e.g. tensor<128x64xi8>."""

    shape: tuple[int, ...]
    elem: str

    @classmethod
    def parse(cls, text: str) -> "TensorType":
        m = _TENSOR.match(text.strip())
        if not m:
            raise ValueError(f"not an encoding-free ranked tensor type: {text!r}")
        dims = tuple(int(d) for d in m["dims"].split("x") if d)
        return cls(dims, m["elem"])

    def with_(self, shape: Optional[tuple[int, ...]] = None, elem: Optional[str] = None) -> "TensorType":
        return TensorType(tuple(self.shape if shape is None else shape), elem or self.elem)

    def __str__(self) -> str:
        return f"tensor<{''.join(f'{d}x' for d in self.shape)}{self.elem}>"


def parse_type(type_text: str, aliases: dict[str, str] | None = None) -> "MemDesc | TensorType | None":
    """A memdesc or an encoding-free ranked tensor type; None for any other type."""
    text = type_text.strip()
    if text.startswith("!ttg.memdesc<"):
        return parse_memdesc(text, aliases)
    try:
        return TensorType.parse(text)
    except ValueError:
        return None
