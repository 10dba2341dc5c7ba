"""Triton's stage-inspection hook (``knobs.runtime.add_stages_inspection_hook``) across releases.

Triton 3.6 calls the hook once per compile as ``hook(backend, stages, options, language, capability)`` to edit
the ordered dict of stages. From 3.7 on it is also called with no arguments, before the cache lookup, and must
return ``(key, hash)``: the compile appends ``key`` to its cache key and the JIT adds ``hash`` to a launch's
specialization, so kernels compiled through different hooks never share a cache entry.
"""
from __future__ import annotations

from typing import Any, Callable

EditStages = Callable[[Any, dict, Any, Any, Any], None]


class StagesHook:
    """A hook object every supported Triton can call: with the five stage arguments it edits the stages, with
    none it answers the cache key (`key`: a string that changes whenever what the hook does changes)."""

    def __init__(self, edit: EditStages, key: str):
        self.edit = edit
        self.key = key

    def __call__(self, *args: Any) -> Any:
        if not args:
            return f"bwtriton-{self.key}", self.key
        return self.edit(*args)

    def __repr__(self) -> str:
        return f"StagesHook({self.key})"
