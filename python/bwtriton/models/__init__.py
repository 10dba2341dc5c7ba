"""Quantized models: `quantize_(model)` converts a model's Linear layers (`NVFP4Linear`) and MoE expert modules
(`MoEExperts`, NVFP4 or MXFP4) in place; `MoEExperts` also loads gpt-oss MXFP4 checkpoints
(`bwtriton.checkpoints`)."""
from __future__ import annotations

from .moe import MoEExperts, quantize_moe_weights
from .quantize import QuantizeReport, experts_layout, quantize_

__all__ = ["MoEExperts", "quantize_moe_weights", "quantize_", "QuantizeReport", "experts_layout"]
