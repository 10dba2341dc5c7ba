"""`@triton.jit` helpers for use inside kernels: block-scaled quantize/dequantize of register tiles, bit-exact
with `bwtriton.formats` (see `quant` for the tile functions and `codecs` for the element codecs)."""
from __future__ import annotations

from .codecs import (e2m1_decode, e2m1_encode, e2m1_round, e4m3_decode, e4m3_encode, e5m2_encode, e8m0_decode,
                     e8m0_from_amax)
from .quant import (dequantize_mxfp4_tile, dequantize_mxfp8_tile, dequantize_nvfp4_tile, pack_e2m1,
                    quant_dequant_nvfp4_tile, quantize_mxfp4_tile, quantize_mxfp8_tile, quantize_nvfp4_tile,
                    unpack_e2m1)

__all__ = ["quantize_nvfp4_tile", "dequantize_nvfp4_tile", "quant_dequant_nvfp4_tile", "quantize_mxfp8_tile",
           "dequantize_mxfp8_tile", "quantize_mxfp4_tile", "dequantize_mxfp4_tile", "pack_e2m1", "unpack_e2m1",
           "e2m1_encode", "e2m1_decode", "e2m1_round", "e4m3_encode", "e4m3_decode", "e5m2_encode", "e8m0_from_amax",
           "e8m0_decode"]
