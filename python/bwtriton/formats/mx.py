"""OCP MX formats: MXFP4 (E2M1) and MXFP8 (E4M3 / E5M2), one UE8M0 scale per 32 elements along K.

Scale choice (OCP MX v1.0 §6.3): X = 2^(floor(log2(amax_block)) - emax_elem), emax_elem = 2 (E2M1), 8 (E4M3),
15 (E5M2), with the exponent clamped to the UE8M0 range; elements = RNE(x / X), saturating to the element
format's max finite value (the top of a block can round past it: amax/X < 2^(emax_elem+1)).
A zero block gets the minimum scale 2^-127 (code 0) and zero data.
NaN/Inf: a block holding NaN or Inf gets the UE8M0 NaN scale 0xFF (so it dequantizes to all-NaN, as the spec
says for a NaN scale) and zero data bytes; other blocks are unaffected.

Scales are returned as torch.float8_e8m0fnu; `QuantizedTensor.scales_u8` is the uint8 view kernels take.
"""
from __future__ import annotations

import torch

from ..errors import InputError
from ._checks import check_quantizer_input
from .e2m1 import E2M1_MAX, e2m1_encode, pack_e2m1
from .fp8 import EMAX_ELEM, E8M0_NAN, FP8_MAX, e8m0_encode_shared_exponent, e8m0_inverse_scale
from .tensor import QuantizedTensor

MX_BLOCK = 32
_FP8_FORMAT = {torch.float8_e4m3fn: "mxfp8_e4m3", torch.float8_e5m2: "mxfp8_e5m2"}


def _mx_scales(x: torch.Tensor, emax_elem: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(blocks [..., n, 32], uint8 codes [..., n], inverse scale 2^-shared_exp [..., n, 1])."""
    blocks = x.reshape(*x.shape[:-1], x.shape[-1] // MX_BLOCK, MX_BLOCK)
    # amax of a block with NaN must be NaN; torch.amax propagates NaN.
    codes = e8m0_encode_shared_exponent(blocks.abs().amax(dim=-1), emax_elem)
    return blocks, codes, e8m0_inverse_scale(codes).unsqueeze(-1)


def quantize_mxfp4(x: torch.Tensor, *, blocked: bool = False) -> QuantizedTensor:
    """Quantize `x` [..., K] (K a multiple of 32) to MXFP4 along K. See the module doc for NaN/Inf handling."""
    xf = check_quantizer_input(x, MX_BLOCK, "quantize_mxfp4")
    blocks, codes, inv = _mx_scales(xf, EMAX_ELEM["e2m1"])
    scaled = (blocks * inv).clamp(-E2M1_MAX, E2M1_MAX)
    elem = e2m1_encode(scaled)
    elem = torch.where((codes == E8M0_NAN).unsqueeze(-1), torch.zeros_like(elem), elem)
    qt = QuantizedTensor(data=pack_e2m1(elem.reshape(xf.shape)), scales=codes.view(torch.float8_e8m0fnu),
                         scale_layout="plain", global_scale=None, format="mxfp4", shape=tuple(xf.shape))
    return qt.to_blocked() if blocked else qt


def quantize_mxfp8(x: torch.Tensor, fp8_dtype: torch.dtype = torch.float8_e4m3fn, *,
                   blocked: bool = False) -> QuantizedTensor:
    """Quantize `x` [..., K] (K a multiple of 32) to MXFP8 (E4M3 or E5M2 elements) along K."""
    if fp8_dtype not in _FP8_FORMAT:
        raise InputError(f"quantize_mxfp8: fp8_dtype must be torch.float8_e4m3fn or torch.float8_e5m2, "
                         f"got {fp8_dtype}")
    xf = check_quantizer_input(x, MX_BLOCK, "quantize_mxfp8")
    blocks, codes, inv = _mx_scales(xf, EMAX_ELEM[fp8_dtype])
    limit = FP8_MAX[fp8_dtype]
    scaled = (blocks * inv).clamp(-limit, limit)
    scaled = torch.where((codes == E8M0_NAN).unsqueeze(-1), torch.zeros_like(scaled), scaled)
    data = scaled.to(fp8_dtype).reshape(xf.shape)
    qt = QuantizedTensor(data=data, scales=codes.view(torch.float8_e8m0fnu), scale_layout="plain",
                         global_scale=None, format=_FP8_FORMAT[fp8_dtype], shape=tuple(xf.shape))
    return qt.to_blocked() if blocked else qt
