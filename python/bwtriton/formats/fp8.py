"""FP8 element and scale codecs: saturating E4M3/E5M2 casts, UE4M3 (NVFP4 scale) and UE8M0 (MX scale).

Reference §8b/§8c. The E4M3/E5M2 casts use torch's native round-to-nearest-even conversion; torch does not
saturate (out-of-range values become NaN), so values are clamped to the finite range first.
"""
from __future__ import annotations

import torch

FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}
# Largest unbiased exponent of a finite element value (OCP MX `emax_elem`): 6 = 1.5*2^2, 448 = 1.75*2^8,
# 57344 = 1.75*2^15.
EMAX_ELEM = {"e2m1": 2, torch.float8_e4m3fn: 8, torch.float8_e5m2: 15}

E8M0_NAN = 0xFF


def to_fp8_saturating(x: torch.Tensor, fp8_dtype: torch.dtype) -> torch.Tensor:
    """float32 -> fp8 with RNE, clamping to +-max finite first (NaN stays NaN)."""
    limit = FP8_MAX[fp8_dtype]
    return x.float().clamp(-limit, limit).to(fp8_dtype)


def e8m0_encode_shared_exponent(amax: torch.Tensor, emax_elem: int) -> torch.Tensor:
    """OCP MX scale choice: code = clamp(floor(log2(amax)) - emax_elem + 127, 0, 254); non-finite amax -> 0xFF.

    floor(log2(amax)) is read straight from the float32 exponent field, which is exact (no log2 rounding).
    A zero or subnormal amax gives field 0, i.e. "-127", which clamps to code 0 (scale 2^-127, the minimum;
    a zero block then quantizes to zeros). Returns uint8 codes."""
    amax = amax.float()
    biased = (amax.view(torch.int32) >> 23) & 0xFF  # amax >= 0, so the sign bit is 0
    code = (biased - emax_elem).clamp(0, 254)
    code = torch.where(torch.isfinite(amax), code, torch.full_like(code, E8M0_NAN))
    return code.to(torch.uint8)


def e8m0_inverse_scale(code: torch.Tensor) -> torch.Tensor:
    """2^(127 - code) as float32, built from its exponent bits. Always a normal number for codes 0..252
    (the only codes `e8m0_encode_shared_exponent` produces for finite input), so multiplying by it is exact
    even with flush-to-zero arithmetic; dividing by the (possibly subnormal) scale would not be."""
    return ((254 - code.to(torch.int32)).clamp(1, 254) << 23).view(torch.float32)


def e8m0_decode(code: torch.Tensor) -> torch.Tensor:
    """uint8 / float8_e8m0fnu codes -> float32 2^(code-127); 0xFF -> NaN. Uses torch's native e8m0 dtype."""
    if code.dtype == torch.uint8:
        code = code.view(torch.float8_e8m0fnu)
    return code.float()
