"""MXFP4 / MXFP8 (OCP MX v1.0): golden values, agreement with triton.tools.mxfp, NaN/zero/saturation handling."""
import pytest
import torch
from hypothesis import given, settings, strategies as st
from triton.tools.mxfp import MXFP4Tensor, MXScaleTensor

from bwtriton.errors import InputError
from bwtriton.formats import quantize_mxfp4, quantize_mxfp8, unpack_e2m1


def test_mxfp4_golden():
    x = torch.zeros(1, 64)
    # Block 0: amax 12 -> floor(log2 12) = 3, minus emax 2 -> X = 2 (code 128); 12/2 = 6, 5/2 = 2.5 (tie -> 2)
    x[0, :3] = torch.tensor([12.0, 5.0, -0.75])   # -0.375 -> 0.5 (between 0.25 and 0.75: code 9)
    # Block 1: amax 0.1 -> floor(log2 .1) = -4 -> X = 2^-6 (code 121); 0.1 * 64 = 6.4 saturates to 6
    x[0, 32] = 0.1
    qt = quantize_mxfp4(x)
    assert qt.format == "mxfp4" and qt.global_scale is None and qt.block_size == 32
    assert qt.scales.dtype == torch.float8_e8m0fnu and qt.scales_u8.tolist() == [[128, 121]]
    codes = unpack_e2m1(qt.data)[0]
    assert codes[:3].tolist() == [7, 4, 9] and codes[32].item() == 7
    assert qt.dequantize()[0, [0, 1, 2, 32]].tolist() == [12.0, 4.0, -1.0, 6 * 2.0 ** -6]


def test_mxfp8_golden():
    x = torch.zeros(1, 32)
    x[0, :3] = torch.tensor([500.0, 1.0, -3.0])  # floor(log2 500) = 8 -> X = 2^0 (code 127); 500 saturates to 448
    qt = quantize_mxfp8(x)
    assert qt.format == "mxfp8_e4m3" and qt.data.dtype == torch.float8_e4m3fn
    assert qt.scales_u8.tolist() == [[127]]
    assert qt.data.view(torch.uint8)[0, :3].tolist() == [0x7E, 0x38, 0xC4]
    e5 = quantize_mxfp8(x, torch.float8_e5m2)  # emax 15 -> X = 2^-7 (code 120); 500 * 128 = 64000 -> 57344
    assert e5.format == "mxfp8_e5m2" and e5.scales_u8.tolist() == [[120]]
    assert e5.dequantize()[0, 0].item() == 57344.0 / 128


def test_mxfp4_agrees_with_triton_tools_mxfp():
    """triton.tools.mxfp: MXScaleTensor = floor(log2(v)) as e8m0, MXFP4Tensor = RNE with saturation."""
    torch.manual_seed(0)
    x = torch.randn(64, 256) * torch.logspace(-6, 6, 64)[:, None]
    qt = quantize_mxfp4(x)
    amax = x.abs().reshape(64, 8, 32).amax(-1)
    ref_codes = MXScaleTensor(data=amax).data.to(torch.int32) - 2
    assert torch.equal(qt.scales_u8.to(torch.int32), ref_codes)
    scale = MXScaleTensor(data=amax).to(torch.float32) / 4  # X = 2^(floor(log2 amax) - 2)
    ref_elems = MXFP4Tensor(data=(x.reshape(64, 8, 32) / scale[..., None]).reshape(64, 256))
    assert torch.equal(qt.data, ref_elems.to_packed_tensor(dim=1))


@pytest.mark.parametrize("quantize", [quantize_mxfp4, quantize_mxfp8])
def test_nan_and_inf_poison_only_their_block(quantize):
    x = torch.randn(2, 96)
    x[0, 5] = float("nan")
    x[1, 40] = float("inf")
    qt = quantize(x)
    assert qt.scales_u8[0, 0].item() == 0xFF and qt.scales_u8[1, 1].item() == 0xFF
    d = qt.dequantize()
    assert torch.isnan(d[0, :32]).all() and torch.isnan(d[1, 32:64]).all()
    assert torch.isfinite(d[0, 32:]).all() and torch.isfinite(d[1, :32]).all() and torch.isfinite(d[1, 64:]).all()


@pytest.mark.parametrize("quantize", [quantize_mxfp4, quantize_mxfp8])
def test_zero_block_min_scale_zero_data(quantize):
    qt = quantize(torch.zeros(3, 64))
    assert torch.all(qt.scales_u8 == 0) and torch.all(qt.data.view(torch.uint8) == 0)
    assert torch.equal(qt.dequantize(), torch.zeros(3, 64))


@pytest.mark.parametrize("fp8,bound", [(torch.float8_e4m3fn, 0.035), (torch.float8_e5m2, 0.065)])
def test_mxfp8_relative_error(fp8, bound):
    """With m mantissa bits the rounding error is uniform in +-2^-m/2 of the binade base, i.e. RMS
    2^-m/sqrt(12) of the base, ~0.75x that relative to values spread over the binade: ~0.027 (E4M3), ~0.054 (E5M2)."""
    torch.manual_seed(1)
    x = torch.randn(256, 512)
    rel = ((quantize_mxfp8(x, fp8).dequantize() - x).norm() / x.norm()).item()
    assert bound * 0.6 < rel < bound, rel


def test_mxfp4_relative_error():
    """Power-of-two scales put the block max anywhere in [4, 8) grid units (saturating above 6), wasting up to
    one binade versus NVFP4, so the error is larger than NVFP4's ~0.096: expect ~0.11-0.13."""
    torch.manual_seed(1)
    x = torch.randn(256, 512)
    rel = ((quantize_mxfp4(x).dequantize() - x).norm() / x.norm()).item()
    assert 0.1 < rel < 0.14, rel


def test_bad_input():
    with pytest.raises(InputError, match="multiple of the block size 32"):
        quantize_mxfp4(torch.randn(4, 48))
    with pytest.raises(InputError, match="fp8_dtype"):
        quantize_mxfp8(torch.randn(4, 32), torch.bfloat16)
    with pytest.raises(InputError, match="unsupported dtype"):
        quantize_mxfp8(torch.ones(4, 32, dtype=torch.int32))


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 30), kblocks=st.integers(1, 5), log_scale=st.floats(-60, 60), seed=st.integers(0, 99),
       fmt=st.sampled_from(["mxfp4", "e4m3", "e5m2"]))
def test_property_blocked_roundtrip_and_scale_bounds(rows, kblocks, log_scale, seed, fmt):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 32 * kblocks, generator=g) * (2.0 ** log_scale)
    emax = {"mxfp4": 2, "e4m3": 8, "e5m2": 15}[fmt]
    fp8 = torch.float8_e4m3fn if fmt == "e4m3" else torch.float8_e5m2
    qt = quantize_mxfp4(x) if fmt == "mxfp4" else quantize_mxfp8(x, fp8)
    d = qt.dequantize()
    assert torch.isfinite(d).all()
    # OCP scale choice: amax / X lies in [2^emax_elem, 2^(emax_elem+1)) unless the exponent was clamped (code 0).
    amax = x.abs().reshape(rows, kblocks, 32).amax(-1)
    ratio = amax / qt.scales.float()
    unclamped = qt.scales_u8 > 0
    assert torch.all((ratio >= 2.0 ** emax)[unclamped]) and torch.all((ratio < 2.0 ** (emax + 1))[unclamped])
    assert torch.equal(qt.to_blocked().dequantize(), d)
    assert torch.equal(qt.to_blocked().to_plain().scales_u8, qt.scales_u8)
