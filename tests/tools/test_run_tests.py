"""tools/run_tests.py's choice of pytest workers."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import run_tests  # noqa: E402


@pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="pytest-xdist (the test extra)")
def test_one_worker_per_core_with_whole_files_unless_the_arguments_choose(monkeypatch):
    monkeypatch.setattr(run_tests.os, "cpu_count", lambda: 2)
    assert run_tests.worker_args(["-m", "emulated"]) == ["-n", "2", "--dist", "loadfile"]
    assert run_tests.worker_args(["-n", "4"]) == [] and run_tests.worker_args(["-n4"]) == []
    assert run_tests.worker_args(["-p", "no:xdist"]) == []
    monkeypatch.setattr(run_tests.os, "cpu_count", lambda: 64)
    assert run_tests.worker_args([])[1] == str(run_tests.MAX_WORKERS)
    monkeypatch.setattr(run_tests.os, "cpu_count", lambda: 1)
    assert run_tests.worker_args([]) == []
