"""Printed-text round trip of MLIR modules through Triton's bindings: contexts, loading, re-parsing.

Triton 3.6's Python IR API can walk and read ops, set attributes and insert a few ops, but cannot erase or
replace ops. Structural rewrites therefore print the module, edit the text of the ops they change (using the
readers of this package, not ad-hoc regexes) and re-parse with `reparse`, which verifies the result.
"""
from __future__ import annotations

import os
import tempfile
from typing import Any, Iterator


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


def module_attr_int(module, name: str, default: int | None = None) -> int | None:
    """An integer module attribute (e.g. 'ttg.num-warps'), or `default`."""
    try:
        value = module.get_int_attr(name)
    except Exception:
        return default
    return default if value is None else value
