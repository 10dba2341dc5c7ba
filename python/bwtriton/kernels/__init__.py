"""Torch-facing GPU kernels: GEMMs that emit the tcgen05 paths on sm_100a and run fast on Hopper (sm_90).

Every entry point validates its inputs up front (`bwtriton.errors.InputError` names the problem and the fix)
and autotunes its launch configuration per GPU family on first use of a shape.

Modules: `matmul` (bf16/fp16/fp8 dense GEMM), `blockscaled` (NVFP4/MX GEMMs), `decode` (weight-only NVFP4 for
small M), `nvfp4_linear` (quantize-on-the-fly NVFP4 linear). Their shared pieces: `_common` (in-kernel helpers),
`_launcher` (pipeline launch and cached launchers), `_validate` (input checks), `_device`, `_configs`, `_tiles`.
"""
from __future__ import annotations

from ._configs import GemmConfig, gemm_configs
from .blockscaled import mxfp4_matmul, mxfp8_matmul, nvfp4_matmul
from .decode import nvfp4_decode_matmul
from .matmul import matmul, tuned_config
from .nvfp4_linear import nvfp4_linear, nvfp4_linear_two_kernel, quantize_nvfp4_pdl

__all__ = ["matmul", "tuned_config", "GemmConfig", "gemm_configs", "nvfp4_matmul", "mxfp4_matmul", "mxfp8_matmul",
           "nvfp4_decode_matmul", "nvfp4_linear", "nvfp4_linear_two_kernel", "quantize_nvfp4_pdl"]
