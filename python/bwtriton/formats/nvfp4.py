"""NVFP4: E2M1 data, one UE4M3 scale per 16 elements along K, and a float32 per-tensor scale (ref. §8d).

The two-level recipe (TransformerEngine's reference quantizer, `pow_2_scales=False`), all in float32:

    S_enc        = 2688 / amax(x)                      (448 * 6; FLT_MAX if that overflows, 1.0 if amax == 0)
    S_dec        = 1 / S_enc                           -> QuantizedTensor.global_scale
    block_scale  = e4m3_RNE(min(amax_block * (S_enc / 6), 448))   -> scales (UE4M3)
    encode       = min(1 / (float(block_scale) * S_dec), FLT_MAX)
    data         = E2M1_RNE(clamp(x * encode, -6, 6))
    x           ~= e2m1(data) * float(block_scale) * S_dec

S_enc maps the tensor's largest block onto the top of the UE4M3 range (448) times the top of E2M1 (6); the block
scale keeps the local dynamic range. A zero block gets block_scale 0, encode FLT_MAX, and data 0 (never NaN).
NaN or Inf anywhere in x raises InputError: E2M1 and UE4M3 scales have no way to carry them through a GEMM.
"""
from __future__ import annotations

from typing import Optional, Union

import torch

from ..errors import InputError
from ._checks import check_quantizer_input
from .e2m1 import E2M1_MAX, e2m1_encode, pack_e2m1
from .fp8 import FP8_MAX
from .tensor import QuantizedTensor

NVFP4_BLOCK = 16
FP32_MAX = torch.finfo(torch.float32).max
E4M3_MAX = FP8_MAX[torch.float8_e4m3fn]


def nvfp4_global_encode_scale(x: torch.Tensor) -> torch.Tensor:
    """S_enc = min(2688 / amax(x), FLT_MAX) as a float32 0-d tensor (1.0 for an all-zero tensor)."""
    amax = x.detach().abs().amax().float() if x.numel() else torch.zeros((), device=x.device)
    s_enc = (torch.tensor(E4M3_MAX * E2M1_MAX, dtype=torch.float32, device=x.device) / amax).clamp(max=FP32_MAX)
    return torch.where(amax == 0, torch.ones_like(s_enc), s_enc)


def quantize_nvfp4_with_encode_scale(x: torch.Tensor, global_encode_scale: torch.Tensor) -> QuantizedTensor:
    """NVFP4-quantize float32 x (already validated) with a given S_enc; the bit-exact twin of
    `bwtriton.language.quantize_nvfp4_tile`."""
    s_enc = global_encode_scale.to(device=x.device, dtype=torch.float32).reshape(())
    s_dec = 1.0 / s_enc
    blocks = x.reshape(*x.shape[:-1], x.shape[-1] // NVFP4_BLOCK, NVFP4_BLOCK)
    amax_block = blocks.abs().amax(dim=-1)
    # A tensor divisor, not the Python scalar: torch on CUDA turns `t / scalar` into `t * (1 / scalar)`, two
    # roundings, which differs from the IEEE quotient (the kernels' div_rn, torch on CPU) and moves products of
    # bf16 block maxima that land on E4M3 rounding ties (~2% of blocks) to the next scale code.
    scale_fp32 = (amax_block * torch.div(s_enc, torch.full_like(s_enc, E2M1_MAX))).clamp(max=E4M3_MAX)
    scales = scale_fp32.to(torch.float8_e4m3fn)
    encode = (1.0 / (scales.float() * s_dec)).clamp(max=FP32_MAX)  # 1/0 = inf -> FLT_MAX for a zero scale
    scaled = (blocks * encode.unsqueeze(-1)).clamp(-E2M1_MAX, E2M1_MAX)
    data = pack_e2m1(e2m1_encode(scaled).reshape(x.shape))
    return QuantizedTensor(data=data, scales=scales, scale_layout="plain", global_scale=s_dec, format="nvfp4",
                           shape=tuple(x.shape), global_encode_scale=s_enc)


def quantize_nvfp4(x: torch.Tensor, *, global_scale: Optional[Union[float, torch.Tensor]] = None,
                   blocked: bool = False) -> QuantizedTensor:
    """Quantize `x` [..., K] (K a multiple of 16) to NVFP4 along K.

    global_scale: the global DECODE scale S_dec to use (e.g. shared by several tensors or from a calibrated amax,
        `amax / 2688`). None computes it from amax(x). The encode scale is S_enc = float32(1 / global_scale), and the
        stored `global_scale` is float32(1 / S_enc), which can differ from the argument in the last bit. Values
        with |x| / global_scale beyond 2688 saturate to +-6 * 448 * global_scale.
    blocked: return the scales already in the 128x4 layout (same as `.to_blocked()`).
    Raises InputError for NaN/Inf input, a bad global_scale, K % 16 != 0, or non-float input."""
    xf = check_quantizer_input(x, NVFP4_BLOCK, "quantize_nvfp4")
    if not torch.isfinite(xf).all():
        raise InputError("quantize_nvfp4: x contains NaN or Inf, which NVFP4 cannot represent (E2M1 and UE4M3 "
                         "scales have no Inf and the scale's NaN would poison a whole GEMM tile); clean x first, "
                         "e.g. torch.nan_to_num(x)")
    if global_scale is None:
        s_enc = nvfp4_global_encode_scale(xf)
    else:
        g = torch.as_tensor(global_scale, dtype=torch.float32, device=xf.device).reshape(())
        if not (torch.isfinite(g) and g > 0):
            raise InputError(f"quantize_nvfp4: global_scale must be a positive finite decode scale "
                             f"(amax / 2688), got {g.item()}")
        s_enc = (1.0 / g).clamp(max=FP32_MAX)
    qt = quantize_nvfp4_with_encode_scale(xf, s_enc)
    return qt.to_blocked() if blocked else qt
