"""`.shared` variable declarations, as written at module scope (`.extern .shared .align 16 .b8 global_smem[];`) or
inside a function (inline-asm scopes: `.shared .align 16 .b128 clc_resp;`): one parser for the verifier's
resource check, its shared-symbol set and the emulator's static shared-memory layout."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

#: bytes per element of the types a `.shared` variable is declared with
ELEM_BYTES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "b32": 4, "u32": 4, "s32": 4,
              "f32": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8, "b128": 16}
_QUALIFIERS = frozenset((".shared", ".extern", ".visible", ".weak"))
_NAME_DIMS_RE = re.compile(r"([A-Za-z_$%][\w$]*)\s*((?:\[\s*\d*\s*\]\s*)*)(?:=.*)?;?\s*$")
_DIM_RE = re.compile(r"\[\s*(\d*)\s*\]")


@dataclass(frozen=True)
class SharedDecl:
    """One declaration: `dims` are the array extents (None for an unsized `[]`), `type` None when not written."""

    name: str
    type: Optional[str]
    align: int
    dims: tuple
    extern: bool

    @property
    def count(self) -> int:
        """Elements (1 for a scalar; 0 for an unsized array)."""
        n = 1
        for d in self.dims:
            n *= d or 0
        return n

    @property
    def nbytes(self) -> int:
        """Size in bytes (the element type defaults to bytes when the declaration names none we know)."""
        return self.count * ELEM_BYTES.get(self.type or "", 1)


def parse_shared_decl(text: str) -> Optional[SharedDecl]:
    """The declaration in `text` (with or without its `.shared`), or None when it does not read as one."""
    m = _NAME_DIMS_RE.search(text)
    if not m:
        return None
    name, dims_text = m.group(1), m.group(2)
    head = text[:m.start()].split()
    align, ty, extern = 1, None, False
    i = 0
    while i < len(head):
        tok = head[i]
        if tok == ".align" and i + 1 < len(head) and head[i + 1].isdigit():
            align = int(head[i + 1])
            i += 2
            continue
        if tok in _QUALIFIERS:
            extern |= tok == ".extern"
        elif tok.startswith(".") and ty is None:
            ty = tok[1:]
        else:
            return None
        i += 1
    dims = tuple(int(d) if d else None for d in _DIM_RE.findall(dims_text))
    return SharedDecl(name, ty, align, dims, extern)
