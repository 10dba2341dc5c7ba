"""Element and scale codecs: golden values worked by hand from reference §8 and agreement with
triton.tools.mxfp / torch's native fp8 dtypes."""
import pytest
import torch
from triton.tools.mxfp import MXFP4Tensor, MXScaleTensor

from bwtriton.formats import e2m1_decode, e2m1_encode, pack_e2m1, unpack_e2m1
from bwtriton.formats.fp8 import e8m0_decode, e8m0_encode_shared_exponent, e8m0_inverse_scale, to_fp8_saturating

# (input, expected code). Codes 0..7 are 0, .5, 1, 1.5, 2, 3, 4, 6 (ref §8a); ties go to the even mantissa.
E2M1_GOLDEN = [
    (0.0, 0), (0.25, 0),   # tie 0 / 0.5 -> 0 (m=0)
    (0.26, 1), (0.5, 1), (0.74, 1),
    (0.75, 2),             # tie 0.5 / 1.0 -> 1.0 (code 2, m=0)
    (1.25, 2),             # tie 1.0 / 1.5 -> 1.0
    (1.3, 3), (1.5, 3),
    (1.75, 4),             # tie 1.5 / 2.0 -> 2.0
    (2.5, 4),              # tie 2 / 3 -> 2 (code 4, m=0)
    (2.51, 5), (3.0, 5),
    (3.5, 6),              # tie 3 / 4 -> 4
    (5.0, 6),              # tie 4 / 6 -> 4 (code 6, m=0), not 6
    (5.01, 7), (6.0, 7), (7.0, 7), (1e30, 7),  # saturation at 6
    (-0.0, 8), (-0.1, 8),  # negative zero keeps its sign
    (-0.5, 9), (-2.5, 12), (-6.0, 15), (-100.0, 15),
]


@pytest.mark.parametrize("value,code", E2M1_GOLDEN)
def test_e2m1_golden(value, code):
    assert e2m1_encode(torch.tensor([value])).item() == code


def test_e2m1_decode_table_from_reference():
    # value = m*0.5 for e == 0, else 2^(e-1) * (1 + m/2); bias 1 (ref §8a)
    codes = torch.arange(16, dtype=torch.uint8)
    expected = []
    for c in range(16):
        e, m, s = (c >> 1) & 3, c & 1, -1.0 if c & 8 else 1.0
        expected.append(s * (m * 0.5 if e == 0 else 2.0 ** (e - 1) * (1 + m / 2)))
    assert torch.equal(e2m1_decode(codes), torch.tensor(expected))


def test_e2m1_matches_triton_mxfp4_reference():
    # Multiples of 1/256 include every tie exactly and nothing within MXFP4Tensor's 1e-6 tie-break epsilon.
    x = torch.arange(-8 * 256, 8 * 256 + 1, dtype=torch.float32) / 256
    ours = e2m1_encode(x)
    ref = MXFP4Tensor(data=x.clone()).data
    # MXFP4Tensor writes +0 for -0 inputs; compare magnitudes there.
    zero = (ours & 7) == 0
    assert torch.equal(ours[~zero], ref[~zero]) and torch.all(ref[zero] & 7 == 0)


def test_e2m1_roundtrip_all_codes():
    codes = torch.arange(16, dtype=torch.uint8)
    assert torch.equal(e2m1_encode(e2m1_decode(codes)), codes)


def test_pack_low_nibble_first():
    codes = torch.tensor([[1, 2, 15, 0]], dtype=torch.uint8)
    packed = pack_e2m1(codes)
    assert packed.tolist() == [[0x21, 0x0F]]
    assert torch.equal(unpack_e2m1(packed), codes)
    # Same convention as triton.tools.mxfp (low = element 0).
    ref = MXFP4Tensor(size=(3, 8)).random()
    assert torch.equal(pack_e2m1(ref.data), ref.to_packed_tensor(dim=1))


@pytest.mark.parametrize("value,bits", [
    (448.0, 0x7E), (1.0, 0x38), (2.0 ** -6, 0x08), (2.0 ** -9, 0x01), (0.5 * 2.0 ** -9, 0x00),  # tie -> 0
    (1.5 * 2.0 ** -9, 0x02),  # tie 1/2 -> 2 (even)
    (1.0625, 0x38),           # tie 1.0 / 1.125 -> 1.0
    (1.1875, 0x3A),           # tie 1.125 / 1.25 -> 1.25
    (1000.0, 0x7E),           # saturates (torch alone would give NaN)
    (-3.0, 0xC4),
])
def test_e4m3_golden(value, bits):
    # UE4M3 decode (ref §8b): e = b >> 3, m = b & 7, value = (1 + m/8) 2^(e-7), subnormal (m/8) 2^-6.
    assert to_fp8_saturating(torch.tensor([value]), torch.float8_e4m3fn).view(torch.uint8).item() == bits


@pytest.mark.parametrize("amax,emax,code", [
    (1.0, 2, 125),          # floor(log2 1) - 2 + 127
    (6.0, 2, 127), (7.99, 2, 127), (8.0, 2, 128),
    (1.0, 8, 119), (448.0, 8, 127), (1.0, 15, 112),
    (0.0, 2, 0),            # zero block -> minimum scale 2^-127
    (2.0 ** -130, 2, 0),    # subnormal amax clamps
    (3e38, 2, 252),         # floor(log2 3e38) = 127 -> 252
    (float("inf"), 2, 255), (float("nan"), 8, 255),
])
def test_e8m0_shared_exponent_golden(amax, emax, code):
    assert e8m0_encode_shared_exponent(torch.tensor([amax]), emax).item() == code


def test_e8m0_agrees_with_triton_mxscale():
    # MXScaleTensor encodes floor(log2(v)); our code for amax with emax_elem is that code minus emax_elem.
    amax = torch.logspace(-30, 30, 997)
    ref = MXScaleTensor(data=amax).data.to(torch.int32)
    assert torch.equal(e8m0_encode_shared_exponent(amax, 2).to(torch.int32), (ref - 2).clamp(0, 254))


def test_e8m0_decode_and_inverse():
    codes = torch.tensor([0, 1, 127, 128, 252, 254, 255], dtype=torch.uint8)
    dec = e8m0_decode(codes)
    assert dec[2] == 1.0 and dec[3] == 2.0 and dec[0] == 2.0 ** -127 and torch.isnan(dec[6])
    inv = e8m0_inverse_scale(codes[:5])
    assert torch.equal(inv * dec[:5], torch.ones(5))
    assert torch.all(inv >= torch.finfo(torch.float32).tiny)  # always normal: exact even under flush-to-zero
