"""tools/upstream_cases.py: the would-run probe, the per-case runner and its summary, on a tiny upstream-style test
file of our own (a conftest with `--device`, capability skips at import and in the body, one small launch)."""
from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from fixtures.upstream_conftest import DEVICE_CONFTEST

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("upstream_cases", ROOT / "tools" / "upstream_cases.py")
uc = importlib.util.module_from_spec(_spec)
sys.modules["upstream_cases"] = uc
_spec.loader.exec_module(uc)

CONFTEST = DEVICE_CONFTEST

# Expected behaviour per case is encoded in its parameters; `list` must find: copy[64], copy[128] (launch),
# pure (no launch, runs anyway), fails, hangs; not copy[4096] (upstream-style skip) nor the non-Blackwell test.
TEST_FILE = """
import os
import time
import pytest
import torch
import triton
import triton.language as tl

BLACKWELL = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 10


@triton.jit
def copy_kernel(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) + 1.0)


@pytest.mark.parametrize("N", [64, 128, 4096])
def test_copy(N, device):
    if N > 1024:
        pytest.skip("Skipped due to insufficient shared memory on this GPU.")
    if triton.runtime.driver.active.get_current_target().arch != 100:
        pytest.skip("Requires compute capability == 10")
    x = torch.arange(N, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    copy_kernel[(1,)](x, y, N=N)
    torch.testing.assert_close(y, x + 1)


@pytest.mark.skipif(BLACKWELL, reason="Hopper only")
def test_hopper_only(device):
    copy_kernel[(1,)](None, None, N=16)


def test_pure(device):
    assert device == "cpu"


def test_fails(device):
    assert 1 + 1 == 3, "arithmetic is broken"


def test_hangs(device):
    time.sleep(float(os.environ.get("TINY_HANG_S", "0")))  # the timeout test sets it; the list probe must not wait
"""


@pytest.fixture(scope="module")
def upstream_file(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("upstream")
    (d / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (d / "test_tiny_upstream.py").write_text(textwrap.dedent(TEST_FILE))
    return d / "test_tiny_upstream.py"


def _ids(*names: str) -> list[str]:
    return [f"test_tiny_upstream.py::{n}" for n in names]


# ------------------------------------------------------------------------------------------------ pure logic

def test_case_function_strips_file_and_parameters():
    assert uc.case_function("t.py::test_a[1-2-x]") == "test_a"
    assert uc.case_function("t.py::TestK::test_b[3]") == "TestK::test_b"
    assert uc.case_function("t.py::test_c") == "test_c"


def test_would_run_classification():
    rec = uc.CaseRecord
    assert uc.would_run(rec("a", "skipped", uc.WOULD_RUN))
    assert not uc.would_run(rec("a", "skipped", "Requires compute capability == 10"))
    assert uc.would_run(rec("a", "passed")) and uc.would_run(rec("a", "failed", "boom"))


def test_merge_phase_keeps_first_failure_and_adds_durations():
    r = uc.CaseRecord("x")
    uc.merge_phase(r, "setup", "passed", "", 0.5)
    uc.merge_phase(r, "call", "failed", "AssertionError: no", 2.0)
    uc.merge_phase(r, "teardown", "failed", "RuntimeError: later", 0.25)
    assert (r.outcome, r.message, r.duration) == ("failed", "AssertionError: no", 2.75)
    s = uc.CaseRecord("y")
    uc.merge_phase(s, "setup", "failed", "fixture broke", 0.1)
    assert s.message == "[setup] fixture broke"


def test_first_error_line_of_crash_skip_and_not_close():
    crash = SimpleNamespace(longrepr=SimpleNamespace(reprcrash=SimpleNamespace(message="ValueError: bad\nmore")))
    assert uc.first_error_line(crash) == "ValueError: bad"
    assert uc.first_error_line(SimpleNamespace(longrepr=("f.py", 3, "Skipped: why"))) == "why"

    class NotClose:
        reprcrash = SimpleNamespace(message="AssertionError: Tensor-likes are not close!\n\nMismatched ...")

        def __str__(self):
            return "E   AssertionError: Tensor-likes are not close!\nE   \nE   Mismatched elements: 3 / 8 (37.5%)\n"
    assert uc.first_error_line(SimpleNamespace(longrepr=NotClose())) == \
        "AssertionError: Tensor-likes are not close! (Mismatched elements: 3 / 8 (37.5%))"


def test_stratified_sample_is_proportional_deterministic_and_covers_every_function():
    ids = [f"f.py::test_big[{i}]" for i in range(90)] + [f"f.py::test_mid[{i}]" for i in range(9)] + \
        ["f.py::test_one[0]"]
    s = uc.stratified_sample(ids, 10, seed=1)
    assert len(s) == 10 and s == uc.stratified_sample(ids, 10, seed=1)
    per = {fn: sum(uc.case_function(x) == fn for x in s) for fn in ("test_big", "test_mid", "test_one")}
    assert per == {"test_big": 8, "test_mid": 1, "test_one": 1}  # 9 / 0.9 / 0.1 with a minimum of one each
    assert s == [x for x in ids if x in s]  # input order kept
    assert uc.stratified_sample(ids, 10, seed=2) != s
    assert uc.stratified_sample(ids, 500, seed=0) == ids
    assert len(uc.stratified_sample(ids, 2, seed=0)) == 2  # fewer than functions: largest shares win


def test_summary_counts_budget_and_groups_reasons():
    R = uc.CaseResult
    results = [R("f::t[1]", "passed", 2.0, 6.0), R("f::t[2]", "passed", 12.0, 16.0),
               R("f::t[3]", "failed", 1.0, 5.0, "AssertionError: Mismatched elements: 3 / 8"),
               R("f::t[4]", "failed", 1.0, 5.0, "AssertionError: Mismatched elements: 5 / 8"),
               R("f::u[1]", "timeout", 60.0, 60.0, "killed after 60 s")]
    s = uc.summarize(results, budget_s=10)
    assert s.total == 5 and s.counts["passed"] == 2 and s.within_budget == 1
    assert s.pass_rate == pytest.approx(0.4) and s.criterion_rate == pytest.approx(0.2)
    assert s.reasons[0] == ("AssertionError: Mismatched elements: # / #", 2, ["f::t[3]", "f::t[4]"])
    assert s.by_function["t"] == {"passed": 2, "failed": 2} and s.by_function["u"] == {"timeout": 1}
    md = uc.render_markdown(s, results, "demo")
    assert "pass rate 40.0%" in md and "within 10 s: 1 (20.0%)" in md and "**2x**" in md


def test_case_list_round_trip(tmp_path):
    path = tmp_path / "cases.txt"
    uc.write_case_list(path, Path("/x/test_y.py"), ["test_y.py::a[1]", "test_y.py::b"], 7)
    assert uc.read_case_list(path) == (Path("/x/test_y.py"), ["test_y.py::a[1]", "test_y.py::b"])


def test_missing_record_is_a_crash_with_the_last_output_line():
    r = uc.result_from_records("f.py::t", [], 3.0, 1, "lots\nSegmentation fault\n")
    assert r.outcome == "crashed" and "Segmentation fault" in r.message


# --------------------------------------------------------------------------- end to end on the tiny file

@pytest.mark.emulated
def test_list_probe_finds_the_cases_a_b200_runs(upstream_file):
    records = uc.list_cases(upstream_file)
    ran = sorted(r.nodeid for r in records if uc.would_run(r))
    assert ran == sorted(_ids("test_copy[64]", "test_copy[128]", "test_pure", "test_fails", "test_hangs"))
    probe = {r.nodeid: r for r in records}
    assert probe[_ids("test_copy[64]")[0]].message.startswith(uc.WOULD_RUN)  # stopped at the launch
    assert uc.list_breakdown(records)["test_copy"] == (2, 3)


@pytest.mark.emulated
def test_run_records_pass_fail_crash_and_writes_reports(upstream_file, tmp_path, capsys):
    cases = tmp_path / "cases.txt"
    uc.write_case_list(cases, upstream_file, _ids("test_copy[64]", "test_fails", "test_nope"), 8)
    rc = uc.main(["run", "--cases", str(cases), "--timeout-s", "300", "--out", str(tmp_path / "res")])
    assert rc == 1
    import json
    data = json.loads((tmp_path / "res.json").read_text())
    got = {r["nodeid"].split("::")[1]: r for r in data["results"]}
    assert got["test_copy[64]"]["outcome"] == "passed"  # a real launch on the emulated B200
    assert got["test_fails"]["outcome"] == "failed" and "arithmetic is broken" in got["test_fails"]["message"]
    assert got["test_nope"]["outcome"] == "crashed" and "no such case" in got["test_nope"]["message"]
    assert "pass rate 33.3%" in (tmp_path / "res.md").read_text()
    assert "[3/3]" in capsys.readouterr().err


def test_run_kills_a_case_at_the_timeout(upstream_file, monkeypatch):
    monkeypatch.setenv("TINY_HANG_S", "60")
    r = uc.run_case(upstream_file, _ids("test_hangs")[0], timeout_s=2.0)
    # the case would hang 60 s: finishing well before that shows the hard kill, whatever the load
    assert r.outcome == "timeout" and r.wall < 45 and "killed after 2 s" in r.message


@pytest.mark.parametrize("argv, message", [
    (["run", "--cases", "/nonexistent/cases.txt"], "is not a file (make one with `list FILE`)"),
    (["list", "/nonexistent/test_x.py"], "FILE '/nonexistent/test_x.py' is not a file"),
    (["run", "--all", __file__, "--sample", "-1"], "--sample must be >= 0"),
    (["run", "--all", __file__, "--jobs", "0"], "--jobs must be >= 1"),
    (["run", "--all", __file__, "--timeout-s", "0"], "--timeout-s and --budget-s must be positive"),
    (["run"], "run needs --cases LIST"),
])
def test_bad_arguments_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        uc.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
