"""Number formats as numpy bit-level conversions: bf16, f16, fp8 (e4m3/e5m2), fp6, fp4 (e2m1), ue8m0, ue4m3.

Decoding goes through 256-entry (or 16/64-entry) float32 lookup tables; encoding rounds to nearest even.
"""
from __future__ import annotations

import functools

import numpy as np


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits (uint16), round to nearest even, NaN kept quiet."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32)
    rounded = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    out = rounded.astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    if nan.any():
        out = np.where(nan, np.uint16(0x7FC0) | ((b >> np.uint32(16)).astype(np.uint16) & np.uint16(0x8000)), out)
    return out


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    return (np.asarray(b).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_f16_bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).astype(np.float16).view(np.uint16)


def f16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    return np.asarray(b).astype(np.uint16).view(np.float16).astype(np.float32)


def _minifloat_table(ebits: int, mbits: int, bias: int, *, ieee_special: bool, fn_nan: bool,
                     signed: bool = True) -> np.ndarray:
    """Float32 value of every code of a small float format (sign|exp|mantissa)."""
    n = 1 << (ebits + mbits + (1 if signed else 0))
    out = np.zeros(n, dtype=np.float32)
    emax = (1 << ebits) - 1
    for code in range(n):
        s = (code >> (ebits + mbits)) & 1 if signed else 0
        e = (code >> mbits) & emax
        m = code & ((1 << mbits) - 1)
        if ieee_special and e == emax:
            v = np.inf if m == 0 else np.nan
        elif fn_nan and e == emax and m == (1 << mbits) - 1:
            v = np.nan
        elif e == 0:
            v = m / (1 << mbits) * 2.0 ** (1 - bias)
        else:
            v = (1 + m / (1 << mbits)) * 2.0 ** (e - bias)
        out[code] = -v if s else v
    return out


@functools.cache
def table(fmt: str) -> np.ndarray:
    """Lookup table code -> float32 for an element or scale format."""
    if fmt == "e4m3":
        return _minifloat_table(4, 3, 7, ieee_special=False, fn_nan=True)
    if fmt == "e5m2":
        return _minifloat_table(5, 2, 15, ieee_special=True, fn_nan=False)
    if fmt == "e2m3":
        return _minifloat_table(2, 3, 1, ieee_special=False, fn_nan=False)
    if fmt == "e3m2":
        return _minifloat_table(3, 2, 3, ieee_special=False, fn_nan=False)
    if fmt == "e2m1":
        return _minifloat_table(2, 1, 1, ieee_special=False, fn_nan=False)
    if fmt == "ue4m3":  # 7-bit unsigned e4m3 in a byte; 0x7F is NaN; the MSB must be 0 (kept: decoded as if 0)
        t = _minifloat_table(4, 3, 7, ieee_special=False, fn_nan=True, signed=False)
        return np.concatenate([t, t])
    if fmt == "ue8m0":
        t = np.array([2.0 ** (b - 127) for b in range(255)] + [np.nan], dtype=np.float64).astype(np.float32)
        t[0] = np.float32(2.0 ** -127)
        t[255] = np.nan
        return t
    raise ValueError(f"unknown number format {fmt!r}")


def decode(codes: np.ndarray, fmt: str) -> np.ndarray:
    return table(fmt)[np.asarray(codes).astype(np.int64)]


@functools.cache
def _finite_grid(fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """(sorted non-negative finite values, their codes) of a signed format."""
    t = table(fmt)
    half = len(t) // 2
    vals = t[:half]
    codes = np.arange(half)
    ok = np.isfinite(vals)
    order = np.argsort(vals[ok], kind="stable")
    return vals[ok][order], codes[ok][order]


def encode(x: np.ndarray, fmt: str, *, satfinite: bool = True) -> np.ndarray:
    """float32 -> codes of a signed small format, round to nearest, ties to even code (= even mantissa);
    satfinite clamps to the largest finite value; NaN -> the format's NaN (or max for formats without NaN)."""
    x = np.asarray(x, dtype=np.float32)
    vals, codes = _finite_grid(fmt)
    nbits = int(np.log2(len(table(fmt))))
    sign = np.signbit(x)
    a = np.abs(x).astype(np.float64)
    hi_idx = np.clip(np.searchsorted(vals, a, side="left"), 0, len(vals) - 1)
    lo_idx = np.clip(hi_idx - 1, 0, len(vals) - 1)
    lo_v, hi_v = vals[lo_idx].astype(np.float64), vals[hi_idx].astype(np.float64)
    d_lo, d_hi = a - lo_v, hi_v - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (codes[hi_idx] % 2 == 0))
    idx = np.where(a <= vals[0], 0, np.where(a >= vals[-1], len(vals) - 1, np.where(pick_hi, hi_idx, lo_idx)))
    out = codes[idx].astype(np.uint32)
    if not satfinite:
        t = table(fmt)
        over = a > vals[-1]
        if np.isinf(t).any():
            out = np.where(over, np.uint32(np.where(np.isinf(t[:len(t) // 2]))[0][0]), out)
    out = out | (sign.astype(np.uint32) << np.uint32(nbits - 1))
    nan = np.isnan(x)
    if nan.any():
        t = table(fmt)
        nan_codes = np.where(np.isnan(t))[0]
        out = np.where(nan, np.uint32(nan_codes[-1] if len(nan_codes) else (1 << (nbits - 1)) - 1), out)
    return out


def tf32_truncate(x: np.ndarray) -> np.ndarray:
    """The tensor core reads fp32 operands of kind::tf32 as tf32: the low 13 mantissa bits are ignored."""
    return (np.asarray(x, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
