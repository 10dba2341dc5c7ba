#!/usr/bin/env python3
"""Run an upstream-style Triton test file (e.g. Triton 3.6's test_matmul.py) case by case on the emulated B200.

    upstream_cases.py list FILE [--out cases.txt]        which cases would RUN on a B200 (not skipped)
    upstream_cases.py run FILE [--cases cases.txt | --all] [--sample N --seed S] [--jobs J]
                      [--timeout-s 10] [--budget-s 10] [--out PREFIX]  each case in its own pytest process

`list` emulates nothing: it runs the file under `--emulate sm_100a --device cpu` (so capability checks and
`driver.active` see a B200) with a small plugin that makes a test's first Triton launch (`JITFunction.run`, which
`warmup` and autotuners go through, or `triton.compile`) raise a recognisable skip. Upstream's skips all happen
before a launch, so a case that reaches one would run on a B200; a case that finishes without launching ran too.

`run` starts one pytest process per case (own process group, killed at `--timeout-s`), records
pass/fail/skip/timeout/crash, the case's own pytest duration (setup+call+teardown, the figure the `<= budget`
criterion uses) and the process wall time, and the first error line; it writes PREFIX.json and PREFIX.md (pass
rate, cases within budget, failures grouped by reason). The upstream file stays where it is (e.g. /tmp):
this tool never copies it.
"""
from __future__ import annotations

import argparse
import concurrent.futures as futures
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent

#: the skip message the `list` plugin raises at a test's first launch
WOULD_RUN = "bwtriton-would-run: reached a Triton launch"
#: pytest arguments that put a run on the emulated B200 (upstream's conftest provides --device)
EMULATE_ARGS = ("-p", "bwtriton.emu.pytest_plugin", "--emulate", "sm_100a", "--device", "cpu")
OUTCOMES = ("passed", "failed", "skipped", "timeout", "crashed")


# ------------------------------------------------------------------------------------------------------------------
# what one case did (recorded inside the pytest process)
# ------------------------------------------------------------------------------------------------------------------

@dataclass
class CaseRecord:
    """One test case as pytest reported it: outcome over all phases, message, seconds in setup+call+teardown."""

    nodeid: str
    outcome: str = "passed"
    message: str = ""
    duration: float = 0.0


def first_error_line(report) -> str:
    """The first line of a failure's crash message (``ExcType: text``), or of its text when there is no crash."""
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple):  # skips: (path, lineno, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(longrepr)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ""
    # torch.testing's "not close" says how badly on later lines: keep the mismatch count with it
    detail = [ln for ln in str(longrepr).splitlines() if ln.lstrip("E ").startswith("Mismatched elements")]
    return lines[0] + (f" ({detail[0].lstrip('E ').strip()})" if detail and "not close" in lines[0] else "")


def merge_phase(rec: CaseRecord, when: str, outcome: str, message: str, duration: float) -> None:
    """Fold one phase's report into the case: the first non-pass outcome wins, durations add up."""
    rec.duration += duration
    if rec.outcome == "passed" and outcome != "passed":
        rec.outcome = "failed" if outcome == "failed" else "skipped"
        rec.message = message if when == "call" or outcome != "failed" else f"[{when}] {message}"


class RecorderPlugin:
    """pytest plugin object: records every case; in `list` mode also turns the first launch into a skip."""

    def __init__(self, out: Path, would_run_skip: bool):
        self.out, self.would_run_skip = out, would_run_skip
        self.records: dict[str, CaseRecord] = {}
        self._undo: list = []

    def pytest_configure(self, config) -> None:
        if self.would_run_skip:
            self._patch_launches()

    def _patch_launches(self) -> None:
        import pytest
        import triton
        import triton.runtime.jit as jit

        def refuse(*_a, **_k):
            pytest.skip(WOULD_RUN)
        for obj, name in ((jit.JITFunction, "run"), (triton, "compile")):
            self._undo.append((obj, name, getattr(obj, name)))
            setattr(obj, name, refuse)

    def pytest_runtest_logreport(self, report) -> None:
        rec = self.records.setdefault(report.nodeid, CaseRecord(report.nodeid))
        outcome = report.outcome
        if outcome == "skipped" and hasattr(report, "wasxfail"):  # an xfail ran: count it as run
            outcome = "passed"
        merge_phase(rec, report.when, outcome, first_error_line(report), float(report.duration or 0.0))

    def pytest_sessionfinish(self, session) -> None:
        for obj, name, old in reversed(self._undo):
            setattr(obj, name, old)
        self.out.write_text(json.dumps([asdict(r) for r in self.records.values()], indent=1))


def _inner_pytest(argv: Sequence[str]) -> int:
    """`_pytest MODE RECORD -- pytest args`: pytest.main with the recorder (the process `list`/`run` start)."""
    mode, record, rest = argv[0], Path(argv[1]), list(argv[2:])
    if rest[:1] == ["--"]:
        rest = rest[1:]
    import pytest
    return int(pytest.main(rest, plugins=[RecorderPlugin(record, would_run_skip=(mode == "list"))]))


def _pytest_cmd(mode: str, record: Path, test_file: Path, selectors: Sequence[str], extra: Sequence[str]) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "_pytest", mode, str(record), "--",
            "-q", "-p", "no:cacheprovider", "--rootdir", str(test_file.parent), *EMULATE_ARGS, *extra, *selectors]


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "BWTRITON_EMULATE"}  # --emulate turns it on, once
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "python"), env.get("PYTHONPATH", "")) if p)
    return env


# ------------------------------------------------------------------------------------------------------------------
# list
# ------------------------------------------------------------------------------------------------------------------

def case_function(nodeid: str) -> str:
    """The test function a case belongs to: ``file::[Class::]test_fn`` without the parameter id."""
    return nodeid.split("[", 1)[0].split("::", 1)[-1]


def would_run(rec: CaseRecord) -> bool:
    """A case runs on a B200 unless an upstream skip stopped it before its first launch."""
    return rec.outcome != "skipped" or rec.message.startswith(WOULD_RUN)


def list_cases(test_file: Path, extra: Sequence[str] = (), timeout_s: float = 3600) -> list[CaseRecord]:
    """Every collected case of `test_file`, with `outcome` as the would-run probe left it."""
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "records.json"
        proc = subprocess.run(_pytest_cmd("list", record, test_file, [test_file.name], extra), cwd=test_file.parent,
                              env=_env(), capture_output=True, text=True, timeout=timeout_s)
        if not record.exists():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
            raise SystemExit(f"upstream_cases list: pytest wrote no record (rc={proc.returncode}):\n" + "\n".join(tail))
        return [CaseRecord(**r) for r in json.loads(record.read_text())]


def list_breakdown(records: Iterable[CaseRecord]) -> dict[str, tuple[int, int]]:
    """{test function: (would run, collected)}."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in records:
        out[case_function(r.nodeid)][1] += 1
        out[case_function(r.nodeid)][0] += would_run(r)
    return {k: (v[0], v[1]) for k, v in out.items()}


def write_case_list(path: Path, test_file: Path, nodeids: Sequence[str], collected: int) -> None:
    header = [f"# upstream_cases list of {test_file}", f"# file: {test_file}",
              f"# {len(nodeids)} of {collected} collected cases would run on a B200"]
    path.write_text("\n".join(header + list(nodeids)) + "\n")


def read_case_list(path: Path) -> tuple[Optional[Path], list[str]]:
    """(the `# file:` the list names, if any; the node ids), ignoring blank and comment lines."""
    test_file, ids = None, []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("# file:"):
            test_file = Path(line.split(":", 1)[1].strip())
        elif line and not line.startswith("#"):
            ids.append(line)
    return test_file, ids


# ------------------------------------------------------------------------------------------------------------------
# run
# ------------------------------------------------------------------------------------------------------------------

def stratified_sample(nodeids: Sequence[str], n: int, seed: int) -> list[str]:
    """`n` cases, spread over test functions in proportion to their size (largest remainder), at least one per
    function when `n` allows; deterministic in `seed`; in the input's order."""
    groups: dict[str, list[str]] = defaultdict(list)
    for nid in nodeids:
        groups[case_function(nid)].append(nid)
    if n >= len(nodeids):
        return list(nodeids)
    total = len(nodeids)
    quota = {g: (n * len(ids) / total) for g, ids in groups.items()}
    take = {g: int(q) for g, q in quota.items()}
    if n >= len(groups):  # every function is represented
        for g in take:
            take[g] = max(take[g], 1)
    while sum(take.values()) > n:  # the minimum of 1 overshot: shrink the largest shares first
        g = max((g for g in take if take[g] > 1), key=lambda g: take[g] - quota[g])
        take[g] -= 1
    for g in sorted(groups, key=lambda g: quota[g] - int(quota[g]), reverse=True):
        if sum(take.values()) >= n:
            break
        if take[g] < len(groups[g]):
            take[g] += 1
    rng = random.Random(seed)
    chosen = {nid for g, ids in sorted(groups.items()) for nid in rng.sample(ids, min(take[g], len(ids)))}
    return [nid for nid in nodeids if nid in chosen]


@dataclass
class CaseResult:
    """What one case's process did."""

    nodeid: str
    outcome: str           # one of OUTCOMES
    seconds: float         # the case's pytest duration (setup+call+teardown); the wall time when none was recorded
    wall: float            # the whole process, Python start-up and imports included
    message: str = ""


def run_case(test_file: Path, nodeid: str, timeout_s: float, extra: Sequence[str] = ()) -> CaseResult:
    """One case in its own pytest process (own process group, SIGKILLed at `timeout_s`)."""
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "record.json"
        t0 = time.perf_counter()
        proc = subprocess.Popen(_pytest_cmd("run", record, test_file, [nodeid], extra), cwd=test_file.parent,
                                env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            wall = time.perf_counter() - t0
            return CaseResult(nodeid, "timeout", wall, wall, f"killed after {timeout_s:g} s")
        wall = time.perf_counter() - t0
        records = [CaseRecord(**r) for r in json.loads(record.read_text())] if record.exists() else []
    return result_from_records(nodeid, records, wall, proc.returncode, output)


def result_from_records(nodeid: str, records: list[CaseRecord], wall: float, rc: int, output: str) -> CaseResult:
    """The case's result from what its process recorded (no record of it: a crash, with the output's last line)."""
    mine = [r for r in records if r.nodeid == nodeid or r.nodeid.endswith("::" + nodeid.split("::", 1)[-1])]
    if not mine:
        tail = [ln for ln in output.strip().splitlines() if ln.strip()]
        why = "no such case collected" if rc == 4 or "no tests ran" in output else f"pytest exited {rc}"
        return CaseResult(nodeid, "crashed", wall, wall, f"{why}: {tail[-1] if tail else ''}"[:400])
    rec = mine[0]
    return CaseResult(nodeid, rec.outcome, rec.duration, wall, rec.message[:400])


#: numbers that stand alone (not the digits of a name like tcgen05 or sm_100a), hex, quoted names
_VOLATILE = re.compile(r"\b0x[0-9a-fA-F]+\b|(?<![\w.])\d+(\.\d+)?(?![\w])|'[^']*'|\"[^\"]*\"")


def reason_key(result: CaseResult) -> str:
    """A failure's reason with its numbers and quoted names blanked, so alike failures group together."""
    if result.outcome in ("timeout", "crashed"):
        return result.outcome + (": " + _VOLATILE.sub("#", result.message.split(":", 1)[0]) if result.outcome ==
                                 "crashed" else "")
    return _VOLATILE.sub("#", result.message)[:120] or "(no message)"


@dataclass
class Summary:
    """The figures a run is judged by."""

    total: int
    counts: dict[str, int]
    within_budget: int          # passed with seconds <= budget
    budget_s: float
    pass_rate: float            # passed / total
    criterion_rate: float       # within_budget / total
    by_function: dict[str, dict[str, int]] = field(default_factory=dict)
    reasons: list[tuple[str, int, list[str]]] = field(default_factory=list)


def summarize(results: Sequence[CaseResult], budget_s: float) -> Summary:
    """Counts per outcome and function, passes within `budget_s`, failures grouped by reason (most first)."""
    counts = Counter(r.outcome for r in results)
    within = sum(r.outcome == "passed" and r.seconds <= budget_s for r in results)
    by_fn: dict[str, Counter] = defaultdict(Counter)
    groups: dict[str, list[str]] = defaultdict(list)
    for r in results:
        by_fn[case_function(r.nodeid)][r.outcome] += 1
        if r.outcome != "passed":
            groups[reason_key(r)].append(r.nodeid)
    n = len(results)
    reasons = sorted(((k, len(v), v) for k, v in groups.items()), key=lambda t: (-t[1], t[0]))
    return Summary(n, {o: counts.get(o, 0) for o in OUTCOMES}, within, budget_s, counts.get("passed", 0) / n if n
                   else 0.0, within / n if n else 0.0, {k: dict(v) for k, v in by_fn.items()}, reasons)


def render_markdown(summary: Summary, results: Sequence[CaseResult], title: str) -> str:
    """The report a person reads: totals, per-function table, failures by reason, slowest cases."""
    s = summary
    lines = [f"# {title}", "", f"{s.total} cases: " + ", ".join(f"{s.counts[o]} {o}" for o in OUTCOMES if s.counts[o]),
             f"pass rate {100 * s.pass_rate:.1f}%; passed within {s.budget_s:g} s: {s.within_budget} "
             f"({100 * s.criterion_rate:.1f}%)", "", "| function | " + " | ".join(OUTCOMES) + " |",
             "|---|" + "---|" * len(OUTCOMES)]
    for fn, c in sorted(s.by_function.items()):
        lines.append(f"| {fn} | " + " | ".join(str(c.get(o, 0)) for o in OUTCOMES) + " |")
    if s.reasons:
        lines += ["", "## Not passed, by reason", ""]
        for key, n, ids in s.reasons:
            lines.append(f"- **{n}x** `{key}`")
            lines += [f"  - `{i}`" for i in ids[:5]] + ([f"  - ... {n - 5} more"] if n > 5 else [])
    lines += ["", "## Slowest", "", "| case | outcome | case s | process s |", "|---|---|---|---|"]
    for r in sorted(results, key=lambda r: -r.seconds)[:10]:
        lines.append(f"| `{r.nodeid}` | {r.outcome} | {r.seconds:.1f} | {r.wall:.1f} |")
    return "\n".join(lines) + "\n"


def _progress(i: int, n: int, r: CaseResult, counts: Counter, t0: float) -> None:
    tally = " ".join(f"{o[0]}{counts[o]}" for o in OUTCOMES if counts[o])
    line = f"[{i:>{len(str(n))}}/{n}] {r.outcome:<7} {r.seconds:6.1f}s  {r.nodeid}"
    if r.outcome != "passed" and r.message:
        line += f"\n        {r.message[:160]}"
    print(f"{line}\n        ({tally}; {time.perf_counter() - t0:.0f} s elapsed)", file=sys.stderr, flush=True)


def run_cases(test_file: Path, nodeids: Sequence[str], timeout_s: float, jobs: int,
              extra: Sequence[str] = ()) -> list[CaseResult]:
    """All cases, `jobs` processes at a time, in input order in the result; progress on stderr."""
    results: dict[str, CaseResult] = {}
    counts: Counter = Counter()
    t0 = time.perf_counter()
    with futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        todo = {pool.submit(run_case, test_file, nid, timeout_s, extra): nid for nid in nodeids}
        for i, fut in enumerate(futures.as_completed(todo), 1):
            r = fut.result()
            results[r.nodeid] = r
            counts[r.outcome] += 1
            _progress(i, len(nodeids), r, counts, t0)
    return [results[n] for n in nodeids]


# ------------------------------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------------------------------

def _cmd_list(args) -> int:
    test_file = Path(args.file).resolve()
    records = list_cases(test_file, args.pytest_arg)
    ids = [r.nodeid for r in records if would_run(r)]
    out = Path(args.out or f"{test_file.stem}.cases.txt")
    write_case_list(out, test_file, ids, len(records))
    print(f"{len(ids)} of {len(records)} cases would run on a B200 -> {out}")
    how = Counter("reached a launch" if r.message.startswith(WOULD_RUN) else f"{r.outcome} without a launch"
                  for r in records if would_run(r))
    print("  (" + ", ".join(f"{n} {k}" for k, n in how.most_common()) + ")")
    for fn, (run, coll) in list_breakdown(records).items():
        print(f"  {fn:<40} {run:>5} of {coll:>5}")
    return 0


def _cmd_run(args) -> int:
    test_file = Path(args.file).resolve() if args.file else None
    if args.cases:
        listed_file, ids = read_case_list(Path(args.cases))
        test_file = test_file or listed_file
    elif args.all:
        ids = [r.nodeid for r in list_cases(test_file, args.pytest_arg) if would_run(r)]
    else:
        raise SystemExit("upstream_cases run: give --cases FILE (from `list`) or --all")
    if test_file is None or not test_file.is_file():
        raise SystemExit(f"upstream_cases run: test file {test_file} not found; pass it as the FILE argument")
    if args.sample:
        ids = stratified_sample(ids, args.sample, args.seed)
    results = run_cases(test_file, ids, args.timeout_s, args.jobs, args.pytest_arg)
    summary = summarize(results, args.budget_s)
    out = Path(args.out)
    title = f"{test_file.name} on the emulated B200 ({len(ids)} cases{f', sample seed {args.seed}' if args.sample else ''})"
    out.with_suffix(".md").write_text(render_markdown(summary, results, title))
    out.with_suffix(".json").write_text(json.dumps({"file": str(test_file), "summary": asdict(summary),
                                                    "results": [asdict(r) for r in results]}, indent=1))
    print(f"{summary.total} cases: " + ", ".join(f"{summary.counts[o]} {o}" for o in OUTCOMES if summary.counts[o])
          + f"; pass rate {100 * summary.pass_rate:.1f}%, within {args.budget_s:g} s {summary.within_budget}"
          f" -> {out.with_suffix('.md')}, {out.with_suffix('.json')}")
    return 0 if summary.counts["passed"] == summary.total else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_pytest"]:
        return _inner_pytest(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="which cases would run on a B200 (emulates nothing)")
    ls.add_argument("file", help="the upstream-style test file (its conftest must provide --device)")
    ls.add_argument("--out", help="case list to write (default FILE-stem.cases.txt here)")
    rn = sub.add_parser("run", help="run cases, one pytest process each, on the emulated B200")
    rn.add_argument("file", nargs="?", help="the test file (default: the one the --cases list names)")
    rn.add_argument("--cases", help="a case list from `list`")
    rn.add_argument("--all", action="store_true", help="list first, then run every case that would run")
    rn.add_argument("--sample", type=int, default=0, help="run N cases, stratified by test function")
    rn.add_argument("--seed", type=int, default=0)
    rn.add_argument("--jobs", type=int, default=1, help="cases at a time (default 1)")
    rn.add_argument("--timeout-s", type=float, default=10.0, help="kill a case's process after this (default 10)")
    rn.add_argument("--budget-s", type=float, default=10.0, help="a pass counts as within budget up to this case "
                                                                 "duration (default 10, the issue's criterion)")
    rn.add_argument("--out", default="upstream-run", help="PREFIX of PREFIX.md and PREFIX.json")
    for sp in (ls, rn):
        sp.add_argument("--pytest-arg", action="append", default=[], help="extra pytest argument (repeatable)")
    args = p.parse_args(argv)
    _check_args(p, args)
    return _cmd_list(args) if args.cmd == "list" else _cmd_run(args)


def _check_args(p: argparse.ArgumentParser, args) -> None:
    """Bad paths and counts are usage errors naming the fix (argparse exits 2), not tracebacks later."""
    for name in ("file", "cases"):
        path = getattr(args, name, None)
        if path and not os.path.isfile(path):
            p.error(f"{'--cases' if name == 'cases' else 'FILE'} {path!r} is not a file"
                    + (" (make one with `list FILE`)" if name == "cases" else ""))
    if args.cmd != "run":
        return
    if not (args.cases or args.all or args.file):
        p.error("run needs --cases LIST (from `list`), or FILE with --all")
    if args.sample < 0:
        p.error(f"--sample must be >= 0 (0: every case), got {args.sample}")
    if args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    if args.timeout_s <= 0 or args.budget_s <= 0:
        p.error("--timeout-s and --budget-s must be positive seconds")


if __name__ == "__main__":
    sys.exit(main())
