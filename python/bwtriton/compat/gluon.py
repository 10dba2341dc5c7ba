"""Gluon's API across Triton releases, spelled the newest way for bwtriton's Gluon kernels.

- ``shared_memory_descriptor.reinterpret`` is the 3.9 name; 3.6 - 3.8 call it ``_reinterpret``. `backfill()`
  gives older releases the new name (the same builtin, so Gluon's code generator treats it as one), so kernels
  write ``buf.reinterpret(dtype, shape, layout)`` on every release.
- ``gl.barrier()`` (a CTA barrier; ``cluster=True`` for the cluster) is the 3.8 name of 3.6 - 3.7's
  ``gl.thread_barrier()``, which 3.9 removed: `backfill()` gives 3.6 - 3.7 a ``gl.barrier`` (CTA scope only).
- `TensorMemoryLayout` describes a CTA split as ``cta_split_num=(2, 1)`` up to 3.7 and as a CGA layout
  (``cga_layout=[[1, 0]]``, one basis vector per CTA-id bit) from 3.8: `tensor_memory_layout` takes the split.
"""
from __future__ import annotations

import functools
import math
from typing import Any


@functools.lru_cache(maxsize=1)
def backfill() -> None:
    """Give releases that lack them Gluon's newest spellings of `reinterpret` and `barrier` (idempotent)."""
    from triton.experimental.gluon import language as gl  # heavy: Gluon's front end
    from triton.experimental.gluon.language import _core  # heavy: Gluon's front end
    descriptor = _core.shared_memory_descriptor
    if not hasattr(descriptor, "reinterpret") and hasattr(descriptor, "_reinterpret"):
        descriptor.reinterpret = descriptor._reinterpret
    if not hasattr(gl, "barrier") and hasattr(gl, "thread_barrier"):
        gl.barrier = _core.builtin(_cta_barrier)


def _cta_barrier(*, cluster: bool = False, _semantic: Any = None) -> Any:
    """`gl.barrier` for releases that only have `gl.thread_barrier` (a CTA barrier)."""
    if getattr(cluster, "value", cluster):
        raise ValueError("gl.barrier(cluster=True) needs Triton 3.8 or newer; use a CTA barrier or upgrade")
    return _semantic.debug_barrier()


def _split_to_cga(split: tuple[int, int]) -> list[list[int]]:
    """(2, 1) -> [[1, 0]]: a basis vector per CTA-id bit, dim 0's bits first (Triton's CGA layout order)."""
    bases = []
    for dim, count in enumerate(split):
        for _ in range(int(math.log2(count))):
            bases.append([1 if d == dim else 0 for d in range(len(split))])
    return bases


def tensor_memory_layout(block: tuple[int, int], col_stride: int = 1, cta_split: tuple[int, int] = (1, 1),
                         two_ctas: bool = False) -> Any:
    """A Gluon `TensorMemoryLayout` for `block` split over CTAs as `cta_split` (CTAs along M, N)."""
    from triton.experimental.gluon.language.nvidia.blackwell import TensorMemoryLayout  # heavy: Gluon
    fields = TensorMemoryLayout.__dataclass_fields__
    if "cga_layout" in fields:
        return TensorMemoryLayout(block, col_stride=col_stride, cga_layout=_split_to_cga(cta_split),
                                  two_ctas=two_ctas)
    split = None if cta_split == (1, 1) else cta_split
    return TensorMemoryLayout(block, col_stride=col_stride, cta_split_num=split, two_ctas=two_ctas)


def _tmem_reg_layout(element_ty: Any, shape: Any, layout: Any, num_warps: Any, instr_variant: str = "32x32b",
                     cga_layout: Any = ()) -> Any:
    """Gluon's `get_tmem_reg_layout` for Triton 3.9, which keeps the computation only behind a TMEM descriptor
    type's `get_reg_layout` (the CGA layout is inside `layout` there)."""
    unwrap = [getattr(v, "value", v) for v in (element_ty, shape, layout, num_warps, instr_variant)]
    from triton.experimental.gluon.language._semantic import _compute_tmem_reg_layout  # heavy: Gluon (3.9)
    element_ty, shape, layout, num_warps, variant = unwrap
    return _compute_tmem_reg_layout(element_ty, list(shape), list(shape), layout, num_warps, variant)


@functools.lru_cache(maxsize=1)
def tmem_reg_layout_fn() -> Any:
    """`get_tmem_reg_layout(element_ty, shape, layout, num_warps, ...)` callable inside `@gluon.jit` code on every
    release: Gluon's own up to 3.8, `_tmem_reg_layout` as a constexpr function on 3.9."""
    from triton.experimental.gluon.language.nvidia import blackwell  # heavy: Gluon
    if hasattr(blackwell, "get_tmem_reg_layout"):
        return blackwell.get_tmem_reg_layout
    from triton.runtime.jit import constexpr_function  # heavy: Triton's JIT
    return constexpr_function(_tmem_reg_layout)
