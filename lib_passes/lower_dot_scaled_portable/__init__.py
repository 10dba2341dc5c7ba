"""`lower-dot-scaled-portable` (TTIR): the `tt.dot_scaled` forms Triton 3.6 cannot lower on a target (NVFP4,
fp4 packed along M/N) as exact dequantize-then-`tt.dot`; `emit` writes the ops."""
from __future__ import annotations

from .lower_dot_scaled_portable import LowerDotScaledPortable, compute_dtype, lower_dot_scaled, triton_lowers

__all__ = ["LowerDotScaledPortable", "compute_dtype", "lower_dot_scaled", "triton_lowers"]
