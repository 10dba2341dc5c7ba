"""Helpers shared by the MLIR (TTIR/TTGIR) passes: loading, walking, counting, the text round trip, and the one
parser of printed attribute/type syntax.

Triton 3.6's Python IR API can walk and read ops, set attributes and insert a few ops, but cannot erase or
replace ops. Structural rewrites therefore print the module, edit the text of the ops they change, and re-parse
(`reparse`), verifying the result. Keep such edits on parsed pieces (`split_top_level`, `matching_close`,
`parse_attr_params`, `parse_memdesc`, `strip_loc` below), not ad-hoc regexes.
"""
from __future__ import annotations

import collections
import os
import re
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Iterator


def new_context():
    """An MLIR context with Triton's and the NVIDIA backend's dialects loaded."""
    from triton._C.libtriton import ir, nvidia
    ctx = ir.context()
    ir.load_dialects(ctx)
    nvidia.load_dialects(ctx)
    return ctx


def load_module(path: "str | os.PathLike", context=None):
    """Parse a .ttir/.ttgir/.mlir file into a module (new context unless one is given)."""
    from triton._C.libtriton import ir
    ctx = context or new_context()
    mod = ir.parse_mlir_module(str(path), ctx)
    mod.context = ctx
    return mod


def reparse(text: str, context) -> Any:
    """Parse module text in `context` (Triton's parser takes a path, so go through a temp file) and verify it."""
    from triton._C.libtriton import ir
    fd, path = tempfile.mkstemp(suffix=".mlir")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        mod = ir.parse_mlir_module(path, context)
    finally:
        os.remove(path)
    mod.context = context
    if not mod.verify():
        raise RuntimeError("module failed to verify after a text rewrite")
    return mod


def walk_ops(module) -> Iterator[Any]:
    """All operations of `module` in walk order (post-order, as MLIR walks)."""
    ops: list[Any] = []
    module.walk(lambda op: ops.append(op))
    return iter(ops)


def op_histogram(module) -> collections.Counter:
    """Count of operations by name, e.g. {'ttng.tc_gen5_mma': 2, ...}."""
    return collections.Counter(op.get_name() for op in walk_ops(module))


def find_ops(module, name: str) -> list[Any]:
    """Operations named `name`."""
    return [op for op in walk_ops(module) if op.get_name() == name]


def module_attr_int(module, name: str, default: int | None = None) -> int | None:
    """An integer module attribute (e.g. 'ttg.num-warps'), or `default`."""
    try:
        value = module.get_int_attr(name)
    except Exception:
        return default
    return default if value is None else value


def rewrite_lines(text: str, edit: Callable[[str], str]) -> tuple[str, int]:
    """Apply `edit` to each line; returns the new text and how many lines changed."""
    out, changed = [], 0
    for line in text.splitlines(keepends=True):
        new = edit(line)
        changed += new != line
        out.append(new)
    return "".join(out), changed


# ----------------------------------------------------------------------------------------------------------
# Printed attribute and type syntax (pure text: no MLIR context needed)
# ----------------------------------------------------------------------------------------------------------

def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split `text` at `sep` outside <>, (), [], {} and strings; pieces are stripped."""
    out, depth, cur, in_str = [], 0, [], False
    i = 0
    while i < len(text):
        ch = text[i]
        if in_str:
            cur.append(ch)
            if ch == "\\":
                cur.append(text[i + 1])
                i += 1
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
            cur.append(ch)
        elif ch in "<([{":
            depth += 1
            cur.append(ch)
        elif ch in ">)]}":
            # '->' is an arrow, not a closing bracket
            if not (ch == ">" and i > 0 and text[i - 1] == "-"):
                depth -= 1
            cur.append(ch)
        elif ch == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        i += 1
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def matching_close(text: str, start: int) -> int:
    """Index of the bracket closing the one at `text[start]` (one of < ( [ {), skipping strings and '->'."""
    opener = text[start]
    closer = {"<": ">", "(": ")", "[": "]", "{": "}"}[opener]
    depth, i, in_str = 0, start, False
    while i < len(text):
        ch = text[i]
        if in_str:
            if ch == "\\":
                i += 1
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch == opener:
            depth += 1
        elif ch == closer and not (ch == ">" and text[i - 1] == "-"):
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError(f"unbalanced {opener!r} in {text[start:start + 80]!r}")


def parse_attr_params(text: str) -> dict[str, str]:
    """`#dialect.name<a = 1, b = true, c>` or its `<...>` body -> {'a': '1', 'b': 'true', 'c': 'true'}."""
    body = text.strip()
    if "<" in body:
        lt = body.index("<")
        body = body[lt + 1:matching_close(body, lt)]
    params: dict[str, str] = {}
    for piece in split_top_level(body):
        key, sep, value = piece.partition("=")
        params[key.strip()] = value.strip() if sep else "true"
    return params


# ----------------------------------------------------------------------------------------------------------
# Aliases (#name = ...)
# ----------------------------------------------------------------------------------------------------------

_ALIAS_RE = re.compile(r"^(#[A-Za-z_][A-Za-z0-9_$.\-]*)\s*=\s*(.*)$")


def parse_aliases(text: str) -> dict[str, str]:
    """Top-level attribute aliases of a printed module: {'#tmem': '#ttng.tensor_memory_encoding<...>'}."""
    out = {}
    for line in text.splitlines():
        m = _ALIAS_RE.match(line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def resolve_alias(value: str, aliases: dict[str, str]) -> str:
    """The attribute text behind `value`, following alias chains ('#tmem' -> '#ttng.tensor_memory_encoding<...>');
    inline attributes and unknown names come back unchanged."""
    seen = 0
    while value.startswith("#") and value in aliases and seen < 32:
        value = aliases[value]
        seen += 1
    return value


# ----------------------------------------------------------------------------------------------------------
# Types and op lines
# ----------------------------------------------------------------------------------------------------------

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


def strip_loc(line: str) -> str:
    """Drop a trailing ` loc(...)` from an op line."""
    s = line.rstrip()
    if s.endswith(")"):
        idx = s.rfind(" loc(")
        if idx >= 0:
            try:
                if matching_close(s, idx + 4) == len(s) - 1:
                    return s[:idx]
            except ValueError:
                pass
    return s
