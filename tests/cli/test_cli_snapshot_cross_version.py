"""Opt-in: snapshot the same kernel with Triton alone (`--passes none`) under this Triton (3.6.0) and under
another Triton installed in its own venv, then `bwtriton diff` them (docs/regression_testing.md, "Comparing
Triton versions"). Skipped unless BWTRITON_OTHER_TRITON_PYTHON names that venv's python, e.g.

    python -m venv --system-site-packages /tmp/tv && /tmp/tv/bin/pip install triton==3.9.0
    BWTRITON_OTHER_TRITON_PYTHON=/tmp/tv/bin/python python -m pytest -q tests/test_cli_snapshot_cross_version.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

OTHER = os.environ.get("BWTRITON_OTHER_TRITON_PYTHON", "")
REPO = Path(__file__).resolve().parents[2]
KERNEL = "python/bwtriton/examples/matmul.py:matmul_kernel"
KEY = "python/bwtriton/examples/matmul.py:matmul_kernel[default]@sm_100a"

pytestmark = pytest.mark.skipif(not OTHER, reason="set BWTRITON_OTHER_TRITON_PYTHON to a venv's python with "
                                                  "another triton to compare against")


def _bwtriton(python: str, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    return subprocess.run([python, "-m", "bwtriton", *argv], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)


def test_passes_none_snapshots_of_two_triton_versions_diff(tmp_path):
    versions = {}
    for label, python in (("this", sys.executable), ("other", OTHER)):
        out = tmp_path / f"{label}.json"
        done = _bwtriton(python, "snapshot", KERNEL, "--passes", "none", "-o", str(out), "--no-cache", "-q",
                         "--no-timing")
        assert done.returncode == 0, done.stderr
        doc = json.loads(out.read_text())
        record = doc["records"][KEY]
        assert "error" not in record, record["error"]
        assert any(k.startswith("tcgen05.mma") for k in record["census"]["tcgen05"])  # both lower to tcgen05
        versions[label] = doc["triton"]
    assert versions["this"] != versions["other"], "the other venv runs the same Triton"
    done = _bwtriton(sys.executable, "diff", str(tmp_path / "this.json"), str(tmp_path / "other.json"),
                     "--format", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["old"]["triton"], result["new"]["triton"]) == (versions["this"], versions["other"])
    assert [k["kernel"] for k in result["kernels"]] == [KEY]
