"""The verifier and the emulator agree on a fast sample of `tools/tool_agreement.py`: the warp-specialized tile
kernel passes both, and two planted faults (a dropped accumulator wait, a tcgen05.ld lane moved into another
warp's quarter) are rejected by both. The full table (every kernel x fault) is the tool's output."""
from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

pytest.importorskip("torch")

_spec = importlib.util.spec_from_file_location(
    "tool_agreement", pathlib.Path(__file__).resolve().parents[2] / "tools" / "tool_agreement.py")
agreement = importlib.util.module_from_spec(_spec)
sys.modules["tool_agreement"] = agreement   # its dataclasses look their module up by name
_spec.loader.exec_module(agreement)

pytestmark = pytest.mark.emulated


@pytest.fixture(scope="module")
def ws_tile():
    return agreement.CASES["t09_ws_tile"]()


@pytest.mark.parametrize("fault,emu_error", [(None, None), ("drop_acc_wait", "TmemRaceError"),
                                             ("ld_lane_plus32", "LaneQuarterError")])
def test_tools_agree(ws_tile, fault, emu_error):
    verifier, emulator, agree = agreement.compare(ws_tile, fault)
    assert agree, (verifier, emulator)
    if fault is None:
        assert (verifier, emulator) == ("clean", "ok")
    else:
        assert verifier != "clean" and emulator == emu_error
