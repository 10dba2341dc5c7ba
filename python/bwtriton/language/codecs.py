"""In-kernel element codecs written as plain integer/float arithmetic.

Why not `.to(tl.float8e4nv)` or the `cvt.*.e2m1x2` PTX: the E2M1 `cvt` exists only on sm_100a+, and Triton's
interpreter emulates fp8 casts with round-half-up and no exponent carry, so neither would be bit-exact everywhere.
Every function here is exact integer work or a multiply by a power of two, so it gives identical bits on sm_90,
sm_100a and under TRITON_INTERPRET=1. They assume finite input within the clamped range the callers enforce.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def e2m1_encode(x):
    """float32 -> E2M1 code (int32, 0..15): round-to-nearest-even, saturating at +-6. Mirrors
    `bwtriton.formats.e2m1.E2M1_THRESHOLDS`: ties at 0.25/1.25/2.5/5 go down, at 0.75/1.75/3.5 go up (even code)."""
    a = tl.abs(x)
    code = (a > 0.25).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a > 1.25).to(tl.int32) \
        + (a >= 1.75).to(tl.int32) + (a > 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32) + (a > 5.0).to(tl.int32)
    sign = (x.to(tl.int32, bitcast=True) >> 31) & 1
    return code | (sign << 3)


@triton.jit
def e2m1_round(x):
    """float32 -> the E2M1 value of `e2m1_encode(x)` as float32 (= e2m1_decode(e2m1_encode(x)) bit for bit, -0 and
    NaN -> +-0 included) in about half the instructions: below 4, round-to-nearest-even of |x| to the grid
    spacing (0.5 below 2, 1 below 4) by adding and subtracting 2^23 times it (whose float32 ulp is that spacing);
    from 4, 4 up to 5 and 6 beyond. So 0.25, 1.25, 2.5 and 5 round down, 0.75, 1.75 and 3.5 up, as the encoder's
    thresholds."""
    a = tl.abs(x)
    magic = tl.where(a < 2.0, 4194304.0, 8388608.0)
    q = tl.where(a >= 4.0, tl.where(a > 5.0, 6.0, 4.0), (a + magic) - magic)
    q = tl.where(a == a, q, 0.0)  # NaN: code 0
    sign = x.to(tl.int32, bitcast=True) & -2147483648
    return (q.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.jit
def e2m1_decode(code):
    """E2M1 code (any int type, low 4 bits used) -> float32."""
    c = code.to(tl.int32) & 0xF
    e = (c >> 1) & 3
    m = c & 1
    # normal: 2^(e-1) * (1 + m/2) -> float32 bits with exponent e-1+127 and mantissa MSB m; subnormal (e == 0): m/2
    normal = ((e + 126) << 23) | (m << 22)
    mag = tl.where(e == 0, m * (126 << 23), normal)  # subnormal: 0 or 0.5 (= 2^-1: exponent field 126)
    # The sign goes in as a bit: unary minus in Triton is `0 - x`, which turns -0 into +0.
    return (mag | ((c & 8) << 28)).to(tl.float32, bitcast=True)


@triton.jit
def _fp8_rne_code(x, MANT: tl.constexpr, BIAS: tl.constexpr):
    """Finite float32 x (|x| within the fp8 format's max finite) -> fp8 code (int32, sign in bit 7), RNE.

    Normal range: round the float32 bit pattern to MANT mantissa bits (adding half-ulp-minus-one plus the kept
    LSB gives ties-to-even; a carry rolls into the exponent field) and rebias the exponent.
    Subnormal range (|x| < 2^(1-BIAS)): the code is RNE(|x| / 2^(1-BIAS-MANT)), an integer < 2^MANT rounded with the
    2^23 trick; the multiply is by a power of two, so exact, and a result of 2^MANT is the smallest normal code."""
    bits = x.to(tl.int32, bitcast=True)
    mag_bits = bits & 0x7FFFFFFF
    drop: tl.constexpr = 23 - MANT
    rounded = mag_bits + ((1 << (drop - 1)) - 1) + ((mag_bits >> drop) & 1)
    normal_code = (rounded >> drop) - ((127 - BIAS) << MANT)
    a = mag_bits.to(tl.float32, bitcast=True)
    min_normal: tl.constexpr = float(2.0 ** (1 - BIAS))
    sub_quantum_inv: tl.constexpr = float(2 ** (BIAS - 1 + MANT))
    # The clamp keeps the unused lanes of the subnormal path in int32 range (an out-of-range fptosi is poison).
    sub = (tl.minimum(a, min_normal) * sub_quantum_inv + 8388608.0) - 8388608.0
    code = tl.where(a < min_normal, sub.to(tl.int32), normal_code)
    return code | (((bits >> 31) & 1) << 7)


@triton.jit
def e4m3_encode(x):
    """Finite float32 with |x| <= 448 -> E4M3 code (int32 0..255), RNE. Same bits as torch `.to(float8_e4m3fn)`."""
    return _fp8_rne_code(x, 3, 7)


@triton.jit
def e5m2_encode(x):
    """Finite float32 with |x| <= 57344 -> E5M2 code (int32 0..255), RNE."""
    return _fp8_rne_code(x, 2, 15)


@triton.jit
def e4m3_decode(code):
    """E4M3 code (low 8 bits) -> float32 (0x7F/0xFF NaN codes are not special-cased: callers never produce them)."""
    c = code.to(tl.int32) & 0xFF
    e = (c >> 3) & 0xF
    m = c & 7
    normal = ((e + 120) << 23) | (m << 20)
    subnormal = (m.to(tl.float32) * 0.001953125).to(tl.int32, bitcast=True)  # m * 2^-9, exact
    mag = tl.where(e == 0, subnormal, normal)
    return (mag | ((c & 0x80) << 24)).to(tl.float32, bitcast=True)  # sign as a bit (see e2m1_decode)


@triton.jit
def e8m0_from_amax(amax, EMAX_ELEM: tl.constexpr):
    """OCP MX shared-scale code from a block amax (>= 0): clamp(floor(log2(amax)) - EMAX_ELEM + 127, 0, 254),
    read from the float32 exponent field. Non-finite amax gives 255 (NaN)."""
    biased = (amax.to(tl.int32, bitcast=True) >> 23) & 0xFF
    code = tl.minimum(tl.maximum(biased - EMAX_ELEM, 0), 254)
    return tl.where(biased == 255, 255, code)


@triton.jit
def e8m0_inverse_scale(code):
    """2^(127 - code) as float32 (a normal number for codes 0..252), built from exponent bits."""
    e = tl.minimum(tl.maximum(254 - code.to(tl.int32), 1), 254)
    return (e << 23).to(tl.float32, bitcast=True)


@triton.jit
def e8m0_decode(code):
    """UE8M0 code (low 8 bits) -> float32 2^(code-127); 255 -> NaN. Code 0 is 2^-127, a float32 subnormal, which
    GPUs running flush-to-zero arithmetic may treat as 0."""
    c = code.to(tl.int32) & 0xFF
    normal = (c << 23).to(tl.float32, bitcast=True)
    val = tl.where(c == 0, 5.877471754111438e-39, normal)
    return tl.where(c == 255, float("nan"), val)
