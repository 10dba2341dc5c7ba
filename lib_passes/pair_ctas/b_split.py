"""Split operand B along N over the CTA pair, for Tritons whose num_ctas=2 layouts broadcast B.

A ``cta_group::2`` MMA reads N/2 columns of B from each CTA's shared memory (tcgen05 reference §2d). Triton 3.6's
make_ttgir splits B on N by itself; from 3.7 on it gives B a broadcast CGA layout (``CGALayout = [[0, 0]]``: each
CTA holds all of B). This module finds every layout alias that carries B's data -- the MMA's B memdesc, and from
it back through transposes, buffer indexing, local_alloc, async/TMA copies (whose tensor descriptor shares the
alias), pointer tensors and their slices -- and rewrites each from broadcast to a split along B's N dim.

Triton's IR means the same whatever the layout, so the only thing the rewrite must fix besides the aliases are
numbers computed from the per-CTA size: the byte counts of ``ttng.barrier_expect`` for the TMA copies that
complete on each mbarrier (B's half is half the bytes).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from bwtriton.mlir.encodings import cga_basis
from bwtriton.mlir.mma import MmaLine
from bwtriton.mlir.ops import Op, all_ops, parse_ops
from bwtriton.mlir.syntax import parse_aliases, strip_loc
from bwtriton.mlir.types import element_bits

# A typed value on an op line: shape, element (a pointer's pointee counts as the element) and layout alias.
_TYPED = re.compile(r"<((?:\d+x)+)(?:!tt\.ptr<(\w+)>|(\w+))(?:,\s*(#[A-Za-z_][\w.$\-]*))?")
_ORDER = re.compile(r"order = array<i32:\s*([\d,\s]+)>")
_TMA_COPY = "ttng.async_tma_copy_global_to_local"


class BSplitError(ValueError):
    """B's layouts cannot be split safely; the message names why."""


@dataclass(frozen=True)
class Typed:
    shape: tuple[int, ...]
    element: str
    alias: str


@dataclass
class BSplit:
    """Result of `split_b`: the rewritten text and what changed."""

    text: str
    aliases: dict[str, int] = field(default_factory=dict)   # alias -> N dim counted from the end (-1 or -2)
    changes: list[str] = field(default_factory=list)


def typed_values(line: str, aliases: dict[str, str]) -> list[Typed]:
    """Every shaped type on an op line whose encoding is a module alias, in order."""
    out = []
    for m in _TYPED.finditer(strip_loc(line)):
        shape = tuple(int(d) for d in m.group(1).rstrip("x").split("x"))
        alias = m.group(4)
        if alias and alias in aliases:
            out.append(Typed(shape, m.group(2) or m.group(3), alias))
    return out


def _links(op: Op, aliases: dict[str, str]) -> list[tuple[str, str, dict[int, int]]]:
    """(alias x, alias y, map of x's dims (from the end) to y's) for the data an op passes between two layouts."""
    types = typed_values(op.head, aliases)
    if op.name in ("ttng.tc_gen5_mma", "ttng.tc_gen5_mma_scaled") or len(types) < 2:
        return []
    if op.name == "ttg.memdesc_trans":
        m = _ORDER.search(op.head)
        order = [int(v) for v in m.group(1).split(",")] if m else [1, 0]
        rank = len(order)
        src, dst = types[0], types[-1]
        # result dim i is source dim order[i]
        return [(dst.alias, src.alias, {i - rank: order[i] - rank for i in range(rank)})]
    links = []
    first = types[0]
    for other in types[1:]:
        if other.element == first.element and other.shape[-2:] == first.shape[-2:] and other.alias != first.alias:
            links.append((first.alias, other.alias, {-1: -1, -2: -2}))
    return links


def operand_aliases(text: str, mma_lines: list[MmaLine], operand: int) -> dict[str, int]:
    """Aliases that carry MMA operand `operand` (0: A, its M dim; 1: B, its N dim) -> that dim from the end."""
    aliases = parse_aliases(text)
    ops = all_ops(parse_ops(text))
    found: dict[str, int] = {}
    for ln in mma_lines:
        desc = ln.operand(operand)
        if desc is not None and desc.encoding in aliases:
            found[desc.encoding] = -2 if operand == 0 else -1
    links = [link for op in ops for link in _links(op, aliases)]
    changed = True
    while changed:
        changed = False
        for x, y, dims in links:
            for a, b, mapping in ((x, y, dims), (y, x, {v: k for k, v in dims.items()})):
                if a in found and b not in found and found[a] in mapping:
                    found[b] = mapping[found[a]]
                    changed = True
                elif a in found and b in found and mapping.get(found[a], found[b]) != found[b]:
                    raise BSplitError(f"layout {b} carries operand B with its N dim in two places")
    return found


def _split_basis(encoding: str, dim_from_end: int) -> str:
    basis = cga_basis(encoding)
    rank = len(basis[0])
    vec = [0] * rank
    vec[rank + dim_from_end] = 1
    new = "[[" + ", ".join(map(str, vec)) + "]]"
    return re.sub(r"CGALayout = \[(?:\[[^\[\]]*\](?:,\s*)?)*\]", f"CGALayout = {new}", encoding, count=1)


def split_b(text: str, mma_lines: list[MmaLine]) -> BSplit:
    """The module with B's broadcast layouts split along N (see the module doc); raises `BSplitError`."""
    aliases = parse_aliases(text)
    b_set = operand_aliases(text, mma_lines, 1)
    shared = sorted(set(b_set) & set(operand_aliases(text, mma_lines, 0)))
    if shared:
        raise BSplitError(f"layout {', '.join(shared)} carries both A and B; splitting B there would split A too")
    out = BSplit(text=text, aliases=b_set)
    new_aliases = dict(aliases)
    for alias, dim in sorted(b_set.items()):
        basis = cga_basis(aliases[alias])
        if basis is None or len(basis) != 1:
            raise BSplitError(f"layout {alias} of operand B has no single-bit CGALayout: {aliases[alias]}")
        if basis[0][len(basis[0]) + dim] == 1 and sum(basis[0]) == 1:
            continue  # already split along N
        if any(basis[0]):
            raise BSplitError(f"layout {alias} of operand B is split along another dim ({basis}); a CTA pair "
                              f"needs B split along N")
        new_aliases[alias] = _split_basis(aliases[alias], dim)
        out.changes.append(f"{alias}: B split along N ({new_aliases[alias][new_aliases[alias].index('CGALayout'):]})")
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        m = re.match(r"^(#[A-Za-z_][\w.$\-]*) = ", line)
        if m and new_aliases.get(m.group(1)) != aliases.get(m.group(1)):
            lines[i] = f"{m.group(1)} = {new_aliases[m.group(1)]}\n"
    out.changes += _fix_expect_bytes(lines, aliases, new_aliases)
    out.text = "".join(lines)
    return out


def _cta_bytes(t: Typed, aliases: dict[str, str]) -> int:
    """Bytes one CTA holds of a value with this shape, element and layout."""
    basis = cga_basis(aliases[t.alias]) or []
    split = 2 ** sum(1 for vec in basis if any(vec))
    n = 1
    for d in t.shape:
        n *= d
    return n * element_bits(t.element) // 8 // split


def _fix_expect_bytes(lines: list[str], old: dict[str, str], new: dict[str, str]) -> list[str]:
    """Rewrite each ``ttng.barrier_expect`` byte count for the per-CTA size of the TMA copies on its mbarrier."""
    ops = all_ops(parse_ops("".join(lines)))
    changes = []
    for op in ops:
        if op.name != "ttng.barrier_expect":
            continue
        bar = op.operands[0]
        siblings = [o for o in (op.parent.regions[0] if op.parent else []) if o.name == _TMA_COPY]
        copies = [o for o in siblings if len(o.operands) > 1 and bar in o.operands[1:]]
        dests = [typed_values(o.head, old)[-1] for o in copies]
        before = sum(_cta_bytes(t, old) for t in dests)
        after = sum(_cta_bytes(t, new) for t in dests)
        m = re.search(r"(ttng\.barrier_expect\s+%[\w.$\-]+,\s*)(\d+)", lines[op.line])
        if m is None or before == after:
            continue
        if int(m.group(2)) != before:
            raise BSplitError(f"line {op.line + 1}: barrier_expect counts {m.group(2)} bytes but its TMA copies "
                              f"bring {before}; cannot rescale it for the split B")
        lines[op.line] = lines[op.line][:m.start(2)] + str(after) + lines[op.line][m.end(2):]
        changes.append(f"line {op.line + 1}: barrier_expect {before} -> {after} bytes (B's half per CTA)")
    return changes
