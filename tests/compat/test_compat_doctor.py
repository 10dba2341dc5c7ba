"""`bwtriton doctor` / `bwtriton version`: the installation as a user reports it, and the feature table."""
from __future__ import annotations

import json
import re

import pytest

from bwtriton.cli import main
from bwtriton.compat import features, versions



def test_doctor_names_every_component_and_the_installed_triton(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^triton\s+{re.escape(versions.installed_text())}\s+\(supported\)$", out, re.M)
    for label in ("bwtriton", "python", "torch", "z3-solver", "ptxas (sm_100a)", "ptxas (sm_90a)"):
        assert re.search(rf"^{re.escape(label)}\s+\S", out, re.M), label
    assert re.search(r"^ptxas \(sm_100a\)\s+Build cuda_\d+\.\d+", out, re.M)
    rows = [ln for ln in out.splitlines() if ln.startswith(("  yes ", "  no  "))]
    assert len(rows) == len(features.FEATURES)


def test_version_is_the_same_report_and_json_is_machine_readable(capsys):
    assert main(["version", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["triton"] == versions.installed_text() and info["triton_supported"] is True
    assert info["supported_tritons"] == list(versions.SUPPORTED)
    assert set(info["features"]) == set(features.FEATURES)


def test_doctor_on_an_unsupported_triton_says_so_and_exits_1(monkeypatch, capsys):
    monkeypatch.setattr("bwtriton.doctor.installed_text", lambda: "3.10.0")
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "3.10.0  (NOT supported (bwtriton is tested on 3.6.0, 3.7.1, 3.8.0, 3.9.0))" in out
    assert "features on" not in out


def test_a_feature_a_release_lacks_is_refused_by_name(monkeypatch):
    monkeypatch.setitem(features.FEATURES, "probe", features.Feature("probe feature", first=(9, 0),
                                                                     instead="use the other path"))
    with pytest.raises(features.CompileError, match=r"probe feature is not available on Triton \d+\.\d+\.\d+; "
                                                    r"use the other path"):
        features.require("probe")
