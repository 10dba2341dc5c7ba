"""Printed MLIR attribute syntax: balanced splitting, attribute parameters, aliases, trailing locations.

Pure text (no MLIR context), shared by every reader in `bwtriton.mlir` and by the passes' rewrites.
"""
from __future__ import annotations

import re


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
