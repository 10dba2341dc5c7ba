"""`bwtriton emulate` end to end: compile a kernel spec for sm_100a, emulate it on generated inputs, check."""
from __future__ import annotations

import json

import pytest

from bwtriton.cli import main

pytestmark = pytest.mark.emulated


def test_emulate_kernel_spec_with_check(capsys):
    rc = main(["emulate", "python/bwtriton/examples/matmul.py:matmul_kernel", "--grid", "1,2",
               "--arg", "randn:fp16:128x64", "--arg", "randn:fp16:64x256", "--arg", "zeros:fp16:128x256",
               "--arg", "128", "--arg", "256", "--arg", "64", "--arg", "64", "--arg", "256", "--arg", "256",
               "--check", "2=0@1", "--rtol", "2e-3", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["stats"]["ctas"] == 2 and out["stats"]["instructions"] > 0
    assert out["check"]["rel_err"] < 2e-3          # fp16 output rounding: 2^-11 relative
    assert out["args"][2]["shape"] == [128, 256]


def test_emulate_ptx_file_check_fails_on_wrong_reference(tmp_path, capsys):
    import emu_cases as ec
    ptx = tmp_path / "one_mma.ptx"
    ptx.write_text(ec.case_gluon_one_mma().kernel.asm["ptx"])
    args = ["emulate", str(ptx), "--arg", "randn:fp16:128x64", "--arg", "randn:fp16:128x64",
            "--arg", "zeros:fp32:128x128"]
    assert main(args + ["--check", "2=0@1.T"]) == 0
    # C = A @ B^T; comparing against B @ A^T (= C^T) must fail the check with exit status 1
    assert main(args + ["--check", "2=1@0.T"]) == 1
    assert "FAILED" in capsys.readouterr().out


def test_emulate_bad_arg_spec_is_a_clear_error(capsys):
    rc = main(["emulate", "python/bwtriton/examples/matmul.py:matmul_kernel", "--arg", "gauss:fp16:8x8"])
    assert rc == 1
    assert "unknown tensor kind 'gauss'" in capsys.readouterr().err
