"""`bwtriton check` fails loudly: without z3 it refuses with one error naming the package (instead of false
findings), a reader that closes the pipe (`| head`) ends it quietly, and findings come out in one stable order."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bwtriton.verify import Finding, verify_ptx
from bwtriton.verify.cli import split_chunks
from bwtriton.verify.findings import finding_order

ROOT = Path(__file__).resolve().parents[2]
LD_WAIT = ROOT / "test_lit" / "verify_tcgen05" / "ld_wait.ptx"   # several findings of one rule on one line
TRAP = ROOT / "test_lit" / "verify_tcgen05" / "trap_only.ptx"


def _env(**extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def _bwtriton(args: list[str], prelude: str = "", **popen) -> subprocess.Popen:
    """`bwtriton ARGS` in a fresh interpreter, after running `prelude` (e.g. hiding a module)."""
    code = f"import sys\n{prelude}\nfrom bwtriton.cli import main\nsys.exit(main({args!r}))"
    return subprocess.Popen([sys.executable, "-c", code], env=popen.pop("env", _env()), **popen)


def test_missing_z3_is_one_clear_error():
    # `sys.modules["z3"] = None` makes `import z3` raise ImportError, as on a machine without z3-solver
    p = _bwtriton(["check", str(LD_WAIT)], prelude='sys.modules["z3"] = None', stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 1
    assert out == ""   # no findings: without the solver they could be false
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bwtriton check: error:")
    assert "pip install z3-solver" in lines[0] and "Traceback" not in err


def test_missing_z3_from_python_raises_a_bwtriton_error():
    code = ('import sys; sys.modules["z3"] = None\n'
            "from bwtriton.errors import BwTritonError\nfrom bwtriton.verify import verify_ptx\n"
            f"try:\n    verify_ptx(open({str(TRAP)!r}).read())\n"
            "except BwTritonError as exc:\n    print(type(exc).__name__, exc)\n")
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=300)
    assert out.stdout.startswith("SolverMissingError ") and "pip install z3-solver" in out.stdout, out.stderr


def test_closed_pipe_ends_quietly():
    """The reader goes away before the first finding is written (what `| head` does to a long report)."""
    p = _bwtriton(["check", "--split-input-file", str(LD_WAIT)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 141   # 128 + SIGPIPE, what a shell reports for a process a closed pipe ended
    assert err == ""


def test_findings_sorted_by_line_then_rule_then_text():
    f = [Finding("z-check", "P11", "error", "b", 7, "k"), Finding("a-check", "P9", "note", "z", 7, "k"),
         Finding("a-check", "P9", "note", "a", 7, "k"), Finding("x", "T1", "error", "m", 3, "k")]
    got = [(x.line, x.rule, x.message) for x in sorted(f, key=finding_order)]
    assert got == [(3, "T1", "m"), (7, "P9", "a"), (7, "P9", "z"), (7, "P11", "b")]   # P9 before P11


def test_report_order_is_stable_across_runs():
    """Two interpreters with different hash seeds (set iteration order) print the same findings, sorted."""
    outs = []
    for seed in ("0", "12345"):
        p = _bwtriton(["check", "--split-input-file", str(LD_WAIT)], stdout=subprocess.PIPE, text=True,
                      env=_env(PYTHONHASHSEED=seed))
        outs.append(p.communicate(timeout=300)[0])
    assert outs[0] == outs[1]
    for chunk in split_chunks(LD_WAIT.read_text()):
        findings = verify_ptx(chunk).findings
        assert findings == sorted(findings, key=finding_order)
