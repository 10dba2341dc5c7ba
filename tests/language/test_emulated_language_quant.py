"""Emulated twins of tests/language/test_language_quant.py's GPU tests: the in-kernel NVFP4/MX quantizers compiled for
sm_100a (where they use the native cvt.rn.satfinite.e2m1x2 / e4m3x2 conversions) and run on the emulated B200
must be bit-exact against the torch quantizers, like on the GPU. (They also pin the emulator's packed
`mul.f32x2`/`fma.rn.f32x2` lanes, which the quantizers' sm_100a PTX uses.)"""
from __future__ import annotations

import pytest

pytest.importorskip("torch")

from test_language_quant import (MX_CASES, NVFP4_CASES, check_e2m1_round, check_mx, check_nvfp4,  # noqa: E402
                                 check_unswizzle)

pytestmark = [pytest.mark.emulated, pytest.mark.usefixtures("emulated_b200_module")]



@pytest.mark.parametrize("case", NVFP4_CASES)
def test_nvfp4_bit_exact_emulated(case):
    assert check_nvfp4(case, "cpu") is None


@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8_e4m3", "mxfp8_e5m2"])
@pytest.mark.parametrize("case", MX_CASES)
def test_mx_bit_exact_emulated(fmt, case):
    assert check_mx(case, fmt, "cpu") is None


def test_unswizzle_5d_emulated():
    assert check_unswizzle("cpu") is None


def test_e2m1_round_emulated():
    assert check_e2m1_round("cpu") is None
