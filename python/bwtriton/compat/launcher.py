"""Triton launcher conventions that changed between releases, as the emulated driver needs them.

Each answer is found from Triton's API (a field, a function that exists), not from the version number:
* from 3.7 a host `TensorDescriptor` carries `round_f32_to_tf32`, and a descriptor that was not lowered to TMA is
  passed with one more i1 parameter (that flag) after the padding flag;
* from 3.9 a kernel with profile scratch but no profile allocator gets its scratch from the driver
  (`allocate_default_profile_scratch`) instead of failing in the null allocator.
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache


@lru_cache(maxsize=None)
def descriptor_passes_tf32_flag() -> bool:
    """Whether a non-TMA tensor descriptor argument is followed by a `round_f32_to_tf32` i1 parameter."""
    from triton.tools.tensor_descriptor import TensorDescriptor  # heavy: Triton's runtime, needed only at launch
    return any(f.name == "round_f32_to_tf32" for f in dataclasses.fields(TensorDescriptor))


def profile_allocator_is_set() -> bool:
    """Whether the user installed a profile-scratch allocator (`triton.set_profile_allocator`). Releases
    without `has_profile_allocator` always go through the (possibly null) allocator: True."""
    from triton.runtime import _allocation  # heavy: Triton's runtime, needed only at launch
    has = getattr(_allocation, "has_profile_allocator", None)
    return True if has is None else bool(has())
