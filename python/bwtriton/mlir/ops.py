"""Op tree of printed TTIR/TTGIR text: every op with its results, operands, regions and walk-order index
(`parse_ops`), and source locations (`resolve_location`). Types and attributes are read by `types`/`syntax`."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator

from .syntax import split_top_level, strip_loc

_VALUE = r"%[A-Za-z0-9_$.\-]+"
_VALUE_RE = re.compile(_VALUE + r"(?:#\d+)?")
_RESULTS_RE = re.compile(r"^\s*((?:" + _VALUE + r"(?::\d+)?)(?:\s*,\s*" + _VALUE + r"(?::\d+)?)*)\s*=\s*")
_OPNAME_RE = re.compile(r'^"?([A-Za-z_][A-Za-z0-9_]*\.[A-Za-z0-9_.]+)"?')
_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"')
_REGION_LABEL_RE = re.compile(r"^\s*(default|partition\d+\(.*\).*)\s*\{\s*$")
_ALIAS_LINE_RE = re.compile(r"^#[A-Za-z_][A-Za-z0-9_$.\-]*\s*=")   # '#name = ...': not an op
_ITER_ARGS_RE = re.compile(r"iter_args\((.*?)\)\s*->")
_PARTITION_ARGS_RE = re.compile(r"^\s*partition\d+\((.*)\)\s*num_warps")


# ----------------------------------------------------------------------------------------------------------
# Locations
# ----------------------------------------------------------------------------------------------------------

_FILELOC_RE = re.compile(r'loc\("([^"]+)":(\d+):(\d+)\)')
_NAMELOC_RE = re.compile(r'loc\("([^"]*)"\((#[A-Za-z0-9_]+|loc\(.*\))\)\)')


def resolve_location(loc: str, aliases: dict[str, str]) -> str:
    """'loc(#loc64)' -> 'k3.py:14:16' (basename:line:col), following name and alias wrappers; '' if unknown."""
    text = loc.strip()
    for _ in range(32):
        m = re.fullmatch(r"loc\((#[A-Za-z0-9_]+)\)", text)
        if m:
            text = aliases.get(m.group(1), "")
            continue
        if text.startswith("#"):
            text = aliases.get(text, "")
            continue
        m = _FILELOC_RE.search(text)
        if m:
            return f"{m.group(1).rsplit('/', 1)[-1]}:{m.group(2)}:{m.group(3)}"
        m = _NAMELOC_RE.fullmatch(text)
        if m:
            inner = m.group(2)
            text = inner if inner.startswith("loc(") else f"loc({inner})"
            continue
        m = re.search(r"#loc[0-9]*", text)  # fused/callsite locations: take the first alias inside
        if m:
            text = m.group(0)
            continue
        return ""
    return ""


# ----------------------------------------------------------------------------------------------------------
# Op tree of a printed module
# ----------------------------------------------------------------------------------------------------------

@dataclass
class Op:
    """One operation of printed IR. `results` are names like '%acc' (with '#i' unpacking via `result_refs`)."""

    name: str
    results: list[str]
    result_counts: list[int]
    operands: list[str]            # every %value referenced on the op's own line(s), outside its regions
    text: str                      # the op's full text, regions included
    head: str                      # the op's first line
    regions: list[list["Op"]] = field(default_factory=list)
    parent: "Op | None" = None
    index: int = -1                # post-order position (MLIR's walk order)
    line: int = 0

    def result_refs(self) -> list[str]:
        """Every name this op defines as uses spell them: '%r' or '%r#0', '%r#1', ..."""
        refs = []
        for name, count in zip(self.results, self.result_counts):
            refs.extend([name] if count == 1 else [f"{name}#{i}" for i in range(count)])
        return refs

    @property
    def result_types_text(self) -> str:
        """Text after the last top-level ' : ' of the head (the op's type signature, for single-line ops)."""
        head = strip_loc(self.head)
        idx = _last_top_level_colon(head)
        return head[idx + 3:].strip() if idx >= 0 else ""

    def walk(self) -> Iterator["Op"]:
        for region in self.regions:
            for op in region:
                yield from op.walk()
        yield self


def _last_top_level_colon(text: str) -> int:
    depth, last, in_str = 0, -1, False
    for i, ch in enumerate(text):
        if in_str:
            in_str = ch != '"'
            continue
        if ch == '"':
            in_str = True
        elif ch in "<([{":
            depth += 1
        elif ch in ")]}" or (ch == ">" and text[i - 1] != "-"):
            depth -= 1
        elif ch == ":" and depth == 0 and text[i - 1:i + 2] == " : ":
            last = i - 1
    return last


def _brace_delta(line: str) -> int:
    body = _STRING_RE.sub('""', line)
    return body.count("{") - body.count("}")


def _parse_block(lines: list[str], start: int, stop_at_close: bool) -> tuple[list[Op], int]:
    """Parse ops from `lines[start:]` until a line that closes the enclosing region (or the end)."""
    ops: list[Op] = []
    i = start
    while i < len(lines):
        raw = lines[i]
        stripped = raw.strip()
        if not stripped or stripped.startswith("//"):
            i += 1
            continue
        if stop_at_close and stripped.startswith("}"):
            return ops, i
        if stripped.startswith("^"):  # block label inside a region: keep going, args are not tracked
            i += 1
            continue
        op, i = _parse_op(lines, i)
        if op is not None:
            ops.append(op)
    return ops, i


def _parse_op(lines: list[str], i: int) -> tuple[Op | None, int]:
    head = lines[i]
    stripped = head.strip()
    results, counts = [], []
    rest = stripped
    m = _RESULTS_RE.match(stripped)
    if m:
        for piece in m.group(1).split(","):
            name, _, cnt = piece.strip().partition(":")
            results.append(name)
            counts.append(int(cnt) if cnt else 1)
        rest = stripped[m.end():]
    nm = _OPNAME_RE.match(rest)
    name = nm.group(1) if nm else rest.split(" ", 1)[0]
    regions: list[list[Op]] = []
    own = [head]
    j = i + 1
    opens = _brace_delta(head) > 0 and not stripped.endswith("}")
    if not opens and j < len(lines) and _REGION_LABEL_RE.match(lines[j]):
        # ttg.warp_specialize prints its regions on the following lines: 'default {', 'partitionN(...) ... {'
        own.append(lines[j])
        j += 1
        opens = True
    if opens:
        # An op with regions: parse nested blocks until the closing '}' lines.
        while True:
            region_ops, j = _parse_block(lines, j, stop_at_close=True)
            regions.append(region_ops)
            if j >= len(lines):
                break
            close = lines[j]
            own.append(close)
            j += 1
            if close.strip().startswith("}") and close.strip().endswith("{"):
                continue  # '} else {' or '} do {': another region follows
            if j < len(lines) and _REGION_LABEL_RE.match(lines[j]):
                own.append(lines[j])
                j += 1
                continue
            break
    text = "\n".join(lines[i:j])
    operands = []
    for line in own:
        body = strip_loc(line)
        mm = _RESULTS_RE.match(body.strip())
        body = body.strip()[mm.end():] if mm else body
        operands.extend(_VALUE_RE.findall(body))
    op = Op(name=name, results=results, result_counts=counts, operands=operands, text=text, head=head,
            regions=regions, line=i)
    for region in regions:
        for child in region:
            child.parent = op
    return op, j


def parse_ops(text: str) -> list[Op]:
    """Top-level ops of a printed module (normally one `builtin.module` whose region holds the functions),
    numbered in MLIR post-order walk order (`Op.index`)."""
    lines = text.splitlines()
    ops, _ = _parse_block([ln if not _ALIAS_LINE_RE.match(ln) else "" for ln in lines], 0, stop_at_close=False)
    counter = 0
    for top in ops:
        for op in top.walk():
            op.index = counter
            counter += 1
    return ops


def all_ops(tops: list[Op]) -> list[Op]:
    """Every op, in post-order walk order."""
    return [op for top in tops for op in top.walk()]


def ancestor_in(op: Op, container: "Op | None") -> Op:
    """The ancestor of `op` (possibly itself) whose parent is `container`; `op` itself if none is."""
    cur = op
    while cur.parent is not None and cur.parent is not container:
        cur = cur.parent
    return cur


def iter_args(op: Op) -> list[tuple[str, str]]:
    """(region argument, initial value) of each entry of an `scf.for` head's `iter_args(%a = %init, ...)`, in
    order; [] when the loop carries nothing."""
    m = _ITER_ARGS_RE.search(op.head)
    if not m:
        return []
    return [(arg.strip(), init.strip()) for arg, _, init in (p.partition("=") for p in split_top_level(m.group(1)))]


def partition_arguments(op: Op) -> list[list[str]]:
    """The block argument names of each `partitionN(%arg: type, ...)` region of a `ttg.warp_specialize`, in
    order (the values it captures, as each partition names them)."""
    out = []
    for line in op.text.splitlines():
        m = _PARTITION_ARGS_RE.match(line)
        if m:
            out.append([p.split(":", 1)[0].strip() for p in split_top_level(m.group(1))])
    return out
