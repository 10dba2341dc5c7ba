"""E2M1 (FP4) element codec, reference §8a.

torch 2.13 has the `float4_e2m1fn_x2` dtype but no CPU conversion kernels for it ("copy_kernel not implemented"),
so the rounding is written out here. It is plain comparisons against the rounding thresholds, so the in-kernel
helpers in `bwtriton.language` can use the very same arithmetic and stay bit-exact on every target (the hardware
`cvt.rn.satfinite.e2m1x2.f32` exists only on sm_100a+).
"""
from __future__ import annotations

import torch

E2M1_MAX = 6.0

# Magnitudes of codes 0..7; codes 8..15 are the negatives (8 is -0).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)

# Rounding thresholds of round-to-nearest-even. Crossing threshold i moves the magnitude code from i to i+1.
# A tie sits exactly on a threshold and goes to the even code (mantissa bit 0): the even code is the lower one
# for thresholds 0.25, 1.25, 2.5, 5.0 (strict `>`), and the upper one for 0.75, 1.75, 3.5 (`>=`).
E2M1_THRESHOLDS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True), (5.0, False))


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """Round float32 `x` to E2M1 with round-to-nearest-even, saturating to +-6, and return uint8 codes 0..15.

    NaN maps to code 0 or 8 (no NaN in E2M1): callers decide about NaN before calling."""
    x = x.float()
    mag = x.abs()
    code = torch.zeros_like(mag, dtype=torch.uint8)
    for threshold, inclusive in E2M1_THRESHOLDS:
        code += (mag >= threshold if inclusive else mag > threshold).to(torch.uint8)
    sign = torch.signbit(x).to(torch.uint8) << 3
    return code | sign


def e2m1_decode(code: torch.Tensor) -> torch.Tensor:
    """uint8 codes 0..15 (high bits ignored) -> float32 values."""
    table = torch.tensor(E2M1_VALUES + tuple(-v for v in E2M1_VALUES), dtype=torch.float32, device=code.device)
    return table[(code & 0xF).long()]


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """Pack uint8 codes [..., K] (K even) into bytes [..., K/2]; element 2i in the low nibble (reference §8a)."""
    pairs = codes.reshape(*codes.shape[:-1], codes.shape[-1] // 2, 2)
    return pairs[..., 0] | (pairs[..., 1] << 4)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of `pack_e2m1`: bytes [..., K/2] -> codes [..., K]."""
    pairs = torch.stack((packed & 0xF, packed >> 4), dim=-1)
    return pairs.reshape(*packed.shape[:-1], packed.shape[-1] * 2)
