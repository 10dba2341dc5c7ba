#!/usr/bin/env python3
"""Run bwtriton's whole test suite: pytest (unit, numerics, emulator; GPU tests skip without CUDA) then lit, on the
installed Triton; then the version matrix: the compat selection (tests marked `compat`, and all of lit) on every
other supported Triton release, each in its own environment (bwtriton.compat.environments: built once, reused).

Fails when any test fails or when either runner ran no test at all (pytest exit 5 is a failure here), in any
release. Ends with one line `total: N passed, N failed, N skipped` over everything that ran.
`--no-matrix` runs the installed Triton only; `--versions 3.7.1,3.9.0` picks the matrix's releases;
`--compat` runs only the compat selection (what the matrix runs in each environment). With pytest arguments
(`-m gpu`, `-k ...`) the matrix is off unless `--versions` names releases.
Extra arguments go to pytest (e.g. `-m gpu`, `-k formats`, `-m emulated` for the emulated-B200 selection);
`--no-lit` skips the lit suite. pytest runs on one worker per CPU core (pytest-xdist, whole files per worker, at
most MAX_WORKERS) unless the arguments choose (`-n ...`, `-p no:xdist`). The emulator's share (the tests marked
`emulated`; tests/conftest.py records the marker in the JUnit report) is reported on its own line, so CI sees what
the emulated selection costs.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def is_emulated(case: ET.Element) -> bool:
    """Whether a JUnit testcase carries the `emulated` marker (tests/conftest.py writes it as a property)."""
    return any(p.get("name") == "marker" and p.get("value") == "emulated" for p in case.iter("property"))


def emulated_summary(suite: ET.Element) -> str:
    """'N passed, N failed, N skipped in S s' over the tests marked `emulated` (a CI budget check)."""
    counts, seconds = {"passed": 0, "failed": 0, "skipped": 0}, 0.0
    for case in suite.iter("testcase"):
        if not is_emulated(case):
            continue
        seconds += float(case.get("time", 0) or 0)
        kind = ("failed" if case.find("failure") is not None or case.find("error") is not None
                else "skipped" if case.find("skipped") is not None else "passed")
        counts[kind] += 1
    return f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped in {seconds:.0f} s"


#: Most pytest workers: the suite on 2 cores took 18 min on one worker, 8 min on two (same 2280 passed).
MAX_WORKERS = 8


def worker_args(args: list[str]) -> list[str]:
    """pytest-xdist's arguments for this machine (whole test files per worker, so that module fixtures are built
    once per file), none where the caller chose or there is one core or no xdist."""
    cores = min(os.cpu_count() or 1, MAX_WORKERS)
    chosen = any(re.fullmatch(r"-n\d*|--numprocesses(=.*)?|no:xdist", a) for a in args)
    if chosen or cores < 2 or importlib.util.find_spec("xdist") is None:
        return []
    return ["-n", str(cores), "--dist", "loadfile"]


def run_pytest(args: list[str]) -> tuple[int, int, int, int]:
    """Returns (exit code, passed, failed, skipped)."""
    args = worker_args(args) + args
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "pytest.xml"
        rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              f"--junitxml={xml}", *args], cwd=ROOT)
        if not xml.exists():
            return rc or 1, 0, 1, 0
        suite = ET.parse(xml).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        total, failures, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
        print(f"emulated (sm_100a on the CPU): {emulated_summary(suite)}")
    return rc, total - failures - errors - skipped, failures + errors, skipped


def run_lit() -> tuple[int, int, int, int]:
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, BWTRITON_LIT_OUT=out)
        proc = subprocess.run([sys.executable, "-c", "import lit.main; lit.main.main()", "-sv", str(ROOT / "test_lit")],
                              cwd=ROOT, env=env,
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    print(proc.stdout[-20000:])
    counts: dict[str, int] = {}
    for key in ("Passed", "Failed", "Unsupported", "Expectedly Failed", "Unresolved", "Unexpectedly Passed"):
        m = re.search(rf"^\s*{key}\s*:\s*(\d+)", proc.stdout, re.M)
        counts[key] = int(m.group(1)) if m else 0
    passed = counts["Passed"] + counts["Expectedly Failed"]
    failed = counts["Failed"] + counts["Unresolved"] + counts["Unexpectedly Passed"]
    return proc.returncode, passed, failed, counts["Unsupported"]


def compat_files() -> list[str]:
    """The compat selection's test files (tests/conftest.py's COMPAT_SELECTION, read without importing it)."""
    import ast
    tree = ast.parse((ROOT / "tests" / "conftest.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") ==
                "COMPAT_SELECTION")
    return [f"tests/{name}" for name in ast.literal_eval(node.value)]


def _installed_triton() -> str:
    from bwtriton.compat.versions import installed_text  # the package under test (tools/ is not a package)
    return installed_text() or "none"


def run_matrix(versions: list[str]) -> list[tuple[str, int, int, int, int]]:
    """(release, exit code, passed, failed, skipped) of the compat selection in each release's environment."""
    from bwtriton.compat.environments import ensure_env  # the package under test
    rows = []
    for version in versions:
        print(f"\n=== Triton {version}: compat selection ===", flush=True)
        try:
            python = ensure_env(version, ROOT, progress=lambda m: print(m, flush=True))
        except Exception as exc:  # a release we could not install is a failed release, not a crash
            print(f"FAILED: no environment for Triton {version}: {exc}")
            rows.append((version, 1, 0, 1, 0))
            continue
        proc = subprocess.run([str(python), str(Path(__file__).resolve()), "--compat", "--no-matrix"], cwd=ROOT,
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        print(proc.stdout[-6000:])
        m = re.search(r"^total: (\d+) passed, (\d+) failed, (\d+) skipped", proc.stdout, re.M)
        counts = tuple(map(int, m.groups())) if m else (0, 1, 0)
        rows.append((version, proc.returncode, *counts))
    return rows


def _matrix_versions(argv: list[str], pytest_args: list[str]) -> list[str]:
    from bwtriton.compat.versions import SUPPORTED  # the package under test
    chosen = next((a.split("=", 1)[1] for a in argv if a.startswith("--versions=")), None)
    if chosen is not None:
        return [v for v in chosen.split(",") if v]
    if "--no-matrix" in argv or "--compat" in argv or pytest_args:
        return []
    return [v for v in SUPPORTED if v != _installed_triton()]


def main(argv: list[str]) -> int:
    with_lit = "--no-lit" not in argv
    own = {"--no-lit", "--no-matrix", "--compat"}
    args = [a for a in argv if a not in own and not a.startswith("--versions=")]
    versions = _matrix_versions(argv, args)
    if "--compat" in argv:
        args = [*compat_files(), *args]
    print(f"Triton {_installed_triton()}: {'compat selection' if '--compat' in argv else 'pytest'}", flush=True)
    rc_py, p1, f1, s1 = run_pytest(args)
    rc_lit, p2, f2, s2 = run_lit() if with_lit else (0, 0, 0, 0)
    print(f"pytest: exit {rc_py}, {p1} passed, {f1} failed, {s1} skipped")
    if with_lit:
        print(f"lit: exit {rc_lit}, {p2} passed, {f2} failed, {s2} unsupported")
    problems = []
    if rc_py == 5 or p1 == 0:
        problems.append("pytest ran no test")
    elif rc_py != 0:
        problems.append(f"pytest failed (exit {rc_py})")
    if with_lit and (p2 == 0):
        problems.append("lit ran no test")
    elif with_lit and rc_lit != 0:
        problems.append(f"lit failed (exit {rc_lit})")
    passed, failed, skipped = p1 + p2, f1 + f2, s1 + s2
    for version, rc, p, f, s in run_matrix(versions):
        print(f"Triton {version} compat selection: exit {rc}, {p} passed, {f} failed, {s} skipped")
        passed, failed, skipped = passed + p, failed + f, skipped + s
        if rc != 0 or p == 0:
            problems.append(f"Triton {version}'s compat selection failed (exit {rc}, {p} passed)")
    for p in problems:
        print(f"FAILED: {p}")
    print(f"total: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
