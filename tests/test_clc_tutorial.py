"""tutorials/06_clc_persistent.py runs and shows what it claims (CLC code on sm_100a only, both schedules
matching torch, a clean verifier)."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.emu
_PATH = Path(__file__).resolve().parents[1] / "tutorials" / "06_clc_persistent.py"


def test_tutorial_06(capsys):
    spec = importlib.util.spec_from_file_location("tutorial06", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main()
    out = capsys.readouterr().out
    assert "sm_100a SASS: UGETNEXTWORKID.SELFCAST" in out
    assert "clusterlaunchcontrol present: False" in out
    errs = [float(x) for x in re.findall(r"max \|C - torch\| = ([0-9.e-]+)", out)]
    ulp = float(re.search(r"ulp at max \|C\| = [0-9.]+ is ([0-9.e-]+)", out).group(1))
    assert len(errs) == 2 and all(e <= ulp for e in errs)
    workers = re.findall(r"^\s+worker (\d): (.*)$", out, re.M)
    assert len(workers) == 6  # 3 static rows + 3 CLC rows
    clc_tiles = sorted(int(t) for _, row in workers[3:] for t in re.findall(r"t(\d+):", row))
    assert clc_tiles == list(range(14))  # every tile exactly once under CLC
    assert "0 CLC finding(s)" in out
