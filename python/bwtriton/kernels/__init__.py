"""Torch-facing GPU kernels: GEMMs that emit the tcgen05 paths on sm_100a and run fast on Hopper (sm_90).

Every entry point validates its inputs up front (`bwtriton.errors.InputError` names the problem and the fix)
and autotunes its launch configuration per GPU family on first use of a shape.
"""
from __future__ import annotations

from ._configs import GemmConfig, gemm_configs
from .matmul import matmul, tuned_config

__all__ = ["matmul", "tuned_config", "GemmConfig", "gemm_configs"]

# --- block-scaled kernels (part B) ---
# NVFP4 / MXFP kernels live in .blockscaled (and its helpers); exported here once that module exists.
try:
    from .blockscaled import *  # noqa: F401,F403,E402
    from . import blockscaled as _blockscaled  # noqa: E402
    __all__ += list(getattr(_blockscaled, "__all__", []))
except ImportError as _exc:  # module not written yet, or its optional dependencies are missing
    if getattr(_exc, "name", None) != f"{__name__}.blockscaled":
        # The module exists but failed to import: keep matmul usable, but say why the rest is missing.
        import warnings
        warnings.warn(f"bwtriton.kernels: block-scaled kernels unavailable: {_exc}", ImportWarning, stacklevel=2)
