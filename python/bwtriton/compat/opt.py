"""Triton-version differences seen by the `bwtriton opt` front end (python/bwtriton/optcompat/)."""
from __future__ import annotations

from .versions import installed


def translate_to_asm_extra_args() -> tuple[bool, ...]:
    """Positional arguments `llvm.translate_to_asm` takes after `is_object` on the installed Triton.

    Triton 3.8 added a required `canonicalize_gep` flag; plain llc does no GEP canonicalisation, so pass False.
    """
    return (False,) if installed()[:2] >= (3, 8) else ()
