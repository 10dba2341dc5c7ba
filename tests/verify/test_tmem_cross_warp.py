"""The cross-warp TMEM reuse race (fla#1228): with 8 warps, warps w and w + 4 share a lane quarter, and a
tcgen05.st of one over cells the other just loaded is unordered unless the loader's tcgen05.wait::ld is followed
by a barrier before the store. Verifier (P9 `ld-overwritten-cross-warp`) and emulator judge the same hand-written
PTX, the lit cases test_lit/verify_tcgen05/tmem_cross_warp*.ptx."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from bwtriton.verify import verify_ptx
from bwtriton.verify.cli import split_chunks

LIT = Path(__file__).resolve().parents[2] / "test_lit" / "verify_tcgen05"
RACY = [("tmem_cross_warp.ptx", 0), ("tmem_cross_warp_2.ptx", 0)]
CLEAN = [("tmem_cross_warp.ptx", 1), ("tmem_cross_warp.ptx", 2), ("tmem_cross_warp_2.ptx", 1),
         ("tmem_cross_warp_2.ptx", 2)]
_FINDING = re.compile(r"tcgen05\.st of warp (\d) writes lanes (\d+)-(\d+), columns (\d+)-(\d+) that the tcgen05\.ld "
                      r"at line (\d+) of warp (\d)")


def _case(name: str, i: int) -> str:
    return split_chunks((LIT / name).read_text())[i]


def _line_of(text: str, needle: str) -> int:
    return next(i + 1 for i, ln in enumerate(text.splitlines()) if needle in ln)


@pytest.mark.parametrize("name,i", RACY)
def test_unordered_store_over_the_other_warps_load_is_an_error(name, i):
    text = _case(name, i)
    errors = [f for f in verify_ptx(text).errors if f.check == "ld-overwritten-cross-warp"]
    assert len(errors) == 1
    got = _FINDING.search(errors[0].message)
    assert got, errors[0].message
    w_st, lane_lo, lane_hi, col_lo, col_hi, ld_line, w_ld = map(int, got.groups())
    assert w_st == w_ld + 4                                  # the other warp of the lane quarter
    assert (lane_lo, lane_hi) == (16 + 32 * w_ld, 31 + 32 * w_ld)   # the 16 lanes both windows address
    assert (col_lo, col_hi) == (16, 31)                      # store: 16-31; load of warp w < 4: 0-31
    assert ld_line == _line_of(text, "tcgen05.ld.") and errors[0].line == _line_of(text, "tcgen05.st.")


@pytest.mark.parametrize("name,i", CLEAN)
def test_ordered_or_disjoint_forms_are_clean(name, i):
    findings = verify_ptx(_case(name, i)).findings
    assert not [f for f in findings if f.severity in ("error", "warning")], findings


@pytest.mark.emulated
@pytest.mark.parametrize("schedule", ["latest", "eager"])
def test_emulator_names_the_race_under_both_schedules(schedule):
    import bwtriton.emu as emu  # noqa: PLC0415 - the emulator's import is heavy; only these tests need it
    text = _case("tmem_cross_warp.ptx", 0)
    with pytest.raises(emu.EmulationError, match="tcgen05.st writes TMEM") as exc:
        emu.run(text, (1,), num_warps=8, shared=1024, schedule=schedule)
    msg = str(exc.value)
    assert f"PTX line {_line_of(text, 'tcgen05.st.')}" in msg and f"PTX line {_line_of(text, 'tcgen05.ld.')}" in msg


@pytest.mark.emulated
@pytest.mark.parametrize("i", [1, 2])
def test_emulator_runs_the_barrier_ordered_forms(i):
    import bwtriton.emu as emu  # noqa: PLC0415 - the emulator's import is heavy; only these tests need it
    emu.run(_case("tmem_cross_warp.ptx", i), (1,), num_warps=8, shared=1024)
