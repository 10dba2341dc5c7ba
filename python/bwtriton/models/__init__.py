"""Quantized models: the MoE expert module and (in `quantize`) in-place conversion of a model's layers."""
from __future__ import annotations

from .moe import MoEExperts, quantize_moe_weights

__all__ = ["MoEExperts", "quantize_moe_weights"]
