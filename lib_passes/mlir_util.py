"""Helpers shared by the MLIR (TTIR/TTGIR) passes: loading, walking, counting, and the text round trip.

Triton 3.6's Python IR API can walk and read ops, set attributes and insert a few ops, but cannot erase or
replace ops. Structural rewrites therefore print the module, edit the text of the ops they change, and re-parse
(`reparse`), verifying the result. Keep such edits on parsed pieces (see `split_op_line`), not ad-hoc regexes.
"""
from __future__ import annotations

import collections
import os
import tempfile
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
