"""`lower-nvfp4-portable` (TTIR): NVFP4 `tt.dot_scaled` as exact dequantize-then-`tt.dot`; `emit` writes the ops."""
from __future__ import annotations

from .lower_nvfp4_portable import LowerNvfp4Portable, lower_dot_scaled, natively_supported

__all__ = ["LowerNvfp4Portable", "lower_dot_scaled", "natively_supported"]
