"""Quantized checkpoints as people get them, read exactly into bwtriton's tensors and modules.

* `read_compressed_tensors_nvfp4` / `read_modelopt_nvfp4` / `read_nvfp4`: one linear layer's NVFP4 weight
  (compressed-tensors `nvfp4-pack-quantized` or ModelOpt NVFP4) as a `QuantizedTensor` plus its static
  activation scale; `nvfp4_linear_from_checkpoint` builds the `NVFP4Linear`; `read_nvfp4_experts` an MoE
  layer's per-expert NVFP4 linears (`bwtriton.models.MoEExperts.from_nvfp4_checkpoint`).
* `read_mxfp4_experts`: gpt-oss-style MXFP4 MoE experts (`*_blocks` / `*_scales`);
  `bwtriton.models.MoEExperts.from_mxfp4_checkpoint` builds the MoE module.
* `read_safetensors`: the tensors of a (sharded) safetensors checkpoint.

Scale conventions and their sources: docs/models.md."""
from __future__ import annotations

from .io import read_safetensors
from .mxfp4_experts import MXFP4Experts, read_mxfp4_experts, read_mxfp4_projection
from .nvfp4 import (NVFP4Experts, NVFP4Weight, detect_nvfp4_layout, nvfp4_linear_from_checkpoint,
                    read_compressed_tensors_nvfp4, read_modelopt_nvfp4, read_nvfp4, read_nvfp4_experts)

__all__ = ["read_safetensors", "read_compressed_tensors_nvfp4", "read_modelopt_nvfp4", "read_nvfp4",
           "detect_nvfp4_layout", "nvfp4_linear_from_checkpoint", "NVFP4Weight", "MXFP4Experts",
           "read_mxfp4_experts", "read_mxfp4_projection", "NVFP4Experts", "read_nvfp4_experts"]
