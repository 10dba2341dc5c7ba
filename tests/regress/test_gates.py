"""Gates that fail: `snapshot` exits 1 when a kernel fails to compile (unless `--allow-failures`), a kernel that
compiled before and fails now is a regression under any `--fail-on`, and the README's example gate catches each
problem of a regression run that it should (and nondeterminism is no problem)."""
from __future__ import annotations

import json
import re
import shlex
import textwrap
from pathlib import Path

import pytest

from bwtriton.cli import main

REPO = Path(__file__).resolve().parents[2]

BROKEN = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def copy(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs))


    # BLOCK=100 is no power of two: tl.arange refuses it, so this config fails to compile; BLOCK=128 compiles.
    BWTRITON_SPECS = {"copy": [{"name": "ok", "signature": {"x_ptr": "*fp16", "y_ptr": "*fp16"},
                                "constexprs": {"BLOCK": 128}},
                               {"name": "bad", "signature": {"x_ptr": "*fp16", "y_ptr": "*fp16"},
                                "constexprs": {"BLOCK": 100}}]}
''')


def test_snapshot_exits_1_when_a_kernel_fails_to_compile(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k.py").write_text(BROKEN)
    assert main(["snapshot", "k.py", "-o", "s.json", "--no-cache", "-q"]) == 1
    err = capsys.readouterr().err
    assert "1 of 2 kernel configs failed to compile" in err and "--allow-failures" in err
    records = json.loads((tmp_path / "s.json").read_text())["records"]  # the record is written either way
    assert "error" in records["k.py:copy[bad]@sm_100a"] and "error" not in records["k.py:copy[ok]@sm_100a"]
    assert main(["snapshot", "k.py", "-o", "s2.json", "--no-cache", "-q", "--allow-failures"]) == 0


def _record(**over) -> dict:
    base = {"specialisation": {"divisible_by_16": ["x_ptr"], "source": "assumed"}, "ptx_version": "8.8",
            "census": {"tcgen05": {"tcgen05.mma.cta_group::1.kind::f16": 8}}, "sass": {"UTCHMMA": 8},
            "resources": {"registers": 100, "spill_stores": 0, "spill_loads": 0},
            "findings": {"by_check": {}}, "hashes": {"ttgir": "aa", "ptx": "bb"}, "nondeterministic": ["ttgir"]}
    return {**base, **over}


def _readme_gate() -> str:
    """The --fail-on value of the README's example gate, as written there."""
    section = (REPO / "README.md").read_text().split("### Regression testing", 1)[1].split("\n### ", 1)[0]
    (line,) = [l for l in section.splitlines() if l.startswith("bwtriton diff ") and "--fail-on" in l]
    argv = shlex.split(line)
    return argv[argv.index("--fail-on") + 1]


PROBLEMS = {
    "every kernel stops compiling": ({"k": _record(), "j": _record()},
                                     {"k": {"error": "CompileError: boom"}, "j": {"error": "CompileError: boom"}}),
    "one kernel stops compiling": ({"k": _record()}, {"k": {"error": "RuntimeError: ptxas failed"}}),
    "different specialisation": ({"k": _record()}, {"k": _record(specialisation={
        "divisible_by_16": [], "source": "example"})}),
    "a kernel is no longer snapshotted": ({"k": _record(), "j": _record()}, {"k": _record()}),
    "spills grow": ({"k": _record()}, {"k": _record(resources={"registers": 100, "spill_stores": 8,
                                                               "spill_loads": 8})}),
    "a new verifier finding": ({"k": _record()}, {"k": _record(findings={"by_check": {"error/ld-without-wait": 1}})}),
}


@pytest.mark.parametrize("problem", list(PROBLEMS))
def test_the_readme_gate_fails_on_each_problem(problem, tmp_path, capsys):
    old, new = PROBLEMS[problem]
    for name, records in (("old", old), ("new", new)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"triton": "3.6.0", "passes": "default",
                                                           "records": records}))
    rc = main(["diff", str(tmp_path / "old.json"), str(tmp_path / "new.json"), "--fail-on", _readme_gate()])
    out = capsys.readouterr().out
    assert rc == 1 and re.search(r"\*\*--fail-on \S+: [1-9]\d* match\(es\)\*\*", out), out


@pytest.mark.parametrize("rules", ["", "spills,registers>+8,findings,tcgen05"])
def test_compile_failure_fails_any_gate_but_an_old_failure_is_no_new_one(rules, tmp_path, capsys):
    snap = lambda rec: json.dumps({"triton": "3.6.0", "records": {"k": rec}})  # noqa: E731
    (tmp_path / "ok.json").write_text(snap(_record()))
    (tmp_path / "bad.json").write_text(snap({"error": "CompileError: boom"}))
    argv = ["--fail-on", rules] if rules else []
    assert main(["diff", str(tmp_path / "ok.json"), str(tmp_path / "bad.json"), *argv]) == 1
    assert "k: compile: CompileError: boom" in capsys.readouterr().out
    assert main(["diff", str(tmp_path / "bad.json"), str(tmp_path / "bad.json"), *argv]) == 0


def test_the_readme_gate_passes_on_nondeterminism_alone(tmp_path):
    noisy = _record(hashes={"ttgir": "cc", "ptx": "bb"})  # only the stage recorded as nondeterministic differs
    for name, rec in (("old", _record()), ("new", noisy)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"triton": "3.6.0", "records": {"k": rec}}))
    assert main(["diff", str(tmp_path / "old.json"), str(tmp_path / "new.json"), "--fail-on",
                 _readme_gate() + ",stages"]) == 0


def test_readme_gate_is_what_the_docs_show():
    gate = _readme_gate()
    assert re.fullmatch(r"[a-z_0-9,>+]+", gate) and "compile" in gate
    assert gate in (REPO / "docs" / "regression_testing.md").read_text()
