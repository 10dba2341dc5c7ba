"""tutorials/06_clc_persistent.py runs and shows what it claims (CLC code on sm_100a only, every tile once, CLC
faster than static once an SM is slowed, all runs matching torch, a clean verifier)."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.emulated
_PATH = Path(__file__).resolve().parents[2] / "tutorials" / "06_clc_persistent.py"


def test_tutorial_06(capsys):
    spec = importlib.util.spec_from_file_location("tutorial06", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main()
    out = capsys.readouterr().out
    assert "sm_100a SASS: UGETNEXTWORKID.SELFCAST" in out
    assert "clusterlaunchcontrol present: False" in out
    err = float(re.search(r"max \|C - torch\| = ([0-9.e-]+)", out).group(1))
    ulp = float(re.search(r"ulp at max \|C\| = [0-9.]+ is ([0-9.e-]+)", out).group(1))
    assert err <= ulp
    pictures = re.findall(r"^   (static persistent|CLC)\b.*?(\d+) rounds.*\n((?:     worker .*\n)+)", out, re.M)
    assert [p[0] for p in pictures] == ["static persistent", "CLC"] * 2
    for _, _, rows in pictures:
        assert sorted(int(t) for t in re.findall(r"t(\d+):", rows)) == list(range(14))  # every tile once
    (_, fast_static, _), (_, fast_clc, _), (_, slow_static, _), (_, slow_clc, rows) = pictures
    assert int(slow_clc) < int(slow_static)   # the slowed SM holds the static schedule back, not CLC
    slow_worker_tiles = re.search(r"worker 2: (.*)", rows).group(1).count(":")
    assert slow_worker_tiles < 14 // 3        # ... because CLC gave it fewer tiles than its static share
    assert "0 CLC finding(s)" in out
