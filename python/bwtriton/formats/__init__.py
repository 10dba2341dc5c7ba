"""Block-scaled number formats (NVFP4, MXFP4, MXFP8) and the 128x4 scale layout, in torch (CPU and CUDA).

See `tensor.QuantizedTensor` for the container, `nvfp4` / `mx` for the recipes, `layout` for the scale layout and
`bwtriton.language` for the bit-exact in-kernel twins of the quantizers."""
from __future__ import annotations

from .e2m1 import E2M1_VALUES, e2m1_decode, e2m1_encode, pack_e2m1, unpack_e2m1
from .fp8 import e8m0_decode, e8m0_encode_shared_exponent
from .layout import blocked_shape, from_blocked_scales, to_blocked_scales
from .mx import quantize_mxfp4, quantize_mxfp8
from .nvfp4 import nvfp4_global_encode_scale, quantize_nvfp4, quantize_nvfp4_with_encode_scale
from .tensor import QuantizedTensor

__all__ = ["QuantizedTensor", "quantize_nvfp4", "quantize_mxfp4", "quantize_mxfp8", "nvfp4_global_encode_scale",
           "quantize_nvfp4_with_encode_scale", "to_blocked_scales", "from_blocked_scales", "blocked_shape",
           "e2m1_encode", "e2m1_decode", "pack_e2m1", "unpack_e2m1", "E2M1_VALUES", "e8m0_encode_shared_exponent",
           "e8m0_decode"]
