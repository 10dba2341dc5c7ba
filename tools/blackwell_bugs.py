#!/usr/bin/env python3
"""The corpus of upstream Blackwell miscompiles (corpus/blackwell_bugs/): compile every case with the installed
Triton, state what Triton's own PTX does, and what bwtriton's verifier, default pipeline and emulator say.

    PYTHONPATH=python python tools/blackwell_bugs.py [--json] [--cases NAME,...] [--no-emulate]
    python tools/blackwell_bugs.py --pythons PY1,PY2,...   # one row per case and interpreter (Triton version)
    python tools/blackwell_bugs.py --all-versions          # every supported Triton with an environment here
    python tools/blackwell_bugs.py --render run.json       # the markdown table of a saved --json run

Each case is a kernel file with BWTRITON_SPECS, a CASE dict (report, kernel, reach: "ptx" or "below-ptx") and
optionally `emulate_launch()` -> (grid, args, check). Every case runs in its own process, so a compiler abort
(LLVM ERROR, an assertion) becomes a "crash" cell instead of ending the run. Prints one markdown row per case and
Triton version, or `--json` the records themselves.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus" / "blackwell_bugs"
#: Seconds one case may take in its worker (compiles of both pipelines, verifier, emulator).
CASE_TIMEOUT_S = 600
COLUMNS = ("case", "report", "Triton", "Triton's PTX", "verifier on Triton's PTX", "default pipeline",
           "verifier on final PTX", "emulator")


def case_files(names: Optional[list[str]] = None) -> list[Path]:
    """The corpus kernel files, sorted; `names` (file stems) selects some."""
    files = sorted(p for p in CORPUS.glob("*.py") if p.stem not in ("ptx_facts", "__init__"))
    if names:
        unknown = set(names) - {p.stem for p in files}
        if unknown:
            raise SystemExit(f"blackwell_bugs: unknown case(s) {', '.join(sorted(unknown))}; cases: "
                             f"{', '.join(p.stem for p in files)}")
        files = [p for p in files if p.stem in names]
    return files


def _import(path: Path):
    spec = importlib.util.spec_from_file_location(f"_bwbug_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _findings(ptx: str, target: str) -> dict[str, int]:
    """'severity check/rule' -> count, from bwtriton's verifier (notes left out)."""
    from bwtriton.verify import verify_ptx  # noqa: PLC0415 - imported in the worker only
    report = verify_ptx(ptx, target=target)
    return dict(sorted(Counter(f"{f.severity} {f.check}/{f.rule}" for f in report.findings
                               if f.severity != "note").items()))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160] if text else ''}"


def _emulate(module, compiled) -> str:
    """'ok', 'wrong result' or the emulator's error, for the case's small launch."""
    import bwtriton.emu as emu  # noqa: PLC0415 - imported in the worker only
    grid, args, check = module.emulate_launch()
    try:
        emu.run(compiled, grid, *args)
    except emu.EmulationError as exc:
        return _first_line(exc)
    return "ok" if check() else "wrong result"


def run_case(path: Path, emulate: bool = True) -> dict[str, Any]:
    """Everything the table says about one case with the installed Triton (runs in the worker process)."""
    import bwtriton  # noqa: PLC0415 - imported in the worker only
    from bwtriton.compat.versions import installed  # noqa: PLC0415 - imported in the worker only
    from bwtriton.loading import load_kernel  # noqa: PLC0415 - imported in the worker only
    sys.path.insert(0, str(CORPUS))
    from ptx_facts import ptx_facts  # noqa: PLC0415 - the corpus folder is on sys.path only here
    module = _import(path)
    case = module.CASE
    fn, spec = load_kernel(f"{path}:{case['kernel']}")
    target = case.get("target", "sm_100a")
    rec: dict[str, Any] = {"case": path.stem, "report": case["report"], "reach": case.get("reach", "ptx"),
                           "triton": ".".join(map(str, installed())), "kernel": case["kernel"], "target": target,
                           "num_warps": spec.get("num_warps", 4)}
    t0 = time.perf_counter()
    try:
        plain = bwtriton.compile(fn, target=target, passes="none", **spec)
    except Exception as exc:  # a compile failure of Triton itself is a result of the case
        rec["triton_compile"] = _first_line(exc)
        return rec
    rec["triton_compile"] = "ok"
    rec["facts"] = ptx_facts(plain.asm["ptx"]).to_dict()
    rec["verify_triton"] = _findings(plain.asm["ptx"], target)
    final = None
    try:
        final = bwtriton.compile(fn, target=target, **spec)
        rec["pipeline"] = "ok"
        rec["facts_final"] = ptx_facts(final.asm["ptx"]).to_dict()
        rec["ptx_changed"] = final.asm["ptx"] != plain.asm["ptx"]
        if "insert-proxy-fence" in final.reports:  # the repair pass, once it is in the pipeline
            rec["repair"] = final.reports["insert-proxy-fence"]
        rec["verify_final"] = _findings(final.asm["ptx"], target)
    except Exception as exc:  # the default pipeline refusing the kernel is a verdict
        rec["pipeline"] = _first_line(exc)
    if not hasattr(module, "emulate_launch"):
        rec["emulator"] = f"not run (no emulation of {target})" if target != "sm_100a" else "not run"
    elif emulate:
        rec["emulated_ptx"] = "final" if final is not None else "triton"
        try:
            rec["emulator"] = _emulate(module, final if final is not None else plain)
        except Exception as exc:  # an emulator bug or unsupported instruction is recorded, not fatal
            rec["emulator"] = _first_line(exc)
    rec["seconds"] = round(time.perf_counter() - t0, 1)
    return rec


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "python"), env.get("PYTHONPATH")]))
    return env


def run_in_process(path: Path, python: str, emulate: bool) -> dict[str, Any]:
    """`run_case` in a fresh `python` process; a crash or timeout is the record's `triton_compile`."""
    cmd = [python, str(Path(__file__).resolve()), "--worker", str(path)] + ([] if emulate else ["--no-emulate"])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=CASE_TIMEOUT_S, env=_worker_env())
    except subprocess.TimeoutExpired:
        return {"case": path.stem, "triton": _version_of(python), "triton_compile": f"timeout {CASE_TIMEOUT_S}s"}
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = [ln for ln in out.stderr.strip().splitlines() if ln.strip()][-3:]
    return {"case": path.stem, "triton": _version_of(python),
            "triton_compile": f"crash (exit {out.returncode}): {' | '.join(tail)[:240]}"}


def version_pythons() -> list[str]:
    """This interpreter, then an existing environment's interpreter for every other supported Triton: the venvs of
    ~/.cache/bwtriton/venvs/triton-X, else bwtriton's own (`bwtriton.compat.environments`)."""
    from bwtriton.compat.environments import env_python  # noqa: PLC0415 - the package under test
    from bwtriton.compat.versions import SUPPORTED, installed_text  # noqa: PLC0415 - the package under test
    out = [sys.executable]
    for version in SUPPORTED:
        if version == installed_text():
            continue
        venv = Path.home() / ".cache" / "bwtriton" / "venvs" / f"triton-{version}" / "bin" / "python"
        found = [p for p in (venv, env_python(version)) if p.exists()]
        if found:
            out.append(str(found[0]))
        else:
            print(f"blackwell_bugs: no environment for Triton {version}; skipped", file=sys.stderr)
    return out


def _version_of(python: str) -> str:
    out = subprocess.run([python, "-c", "from importlib.metadata import version; print(version('triton'))"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "?"


def _short(text: str) -> str:
    """A pipeline or emulator error cut to its class and the first rule id it names, for a table cell."""
    m = re.search(r"\[([\w-]+/P\d+)\]", text)
    head = text.split(":", 1)[0]
    return f"{head}: {m.group(1)}" if m else text[:120]


def _cell_findings(found: Optional[dict[str, int]]) -> str:
    if found is None:
        return "-"
    errors = [f"{k.split(' ', 1)[1]} x{n}" for k, n in found.items() if k.startswith("error")]
    warnings = [f"{k.split(' ', 1)[1]} x{n}" for k, n in found.items() if k.startswith("warning")]
    parts = ([f"errors: {', '.join(errors)}"] if errors else []) + ([f"warnings: {', '.join(warnings)}"]
                                                                  if warnings else [])
    return "; ".join(parts) or "clean"


def _cell_facts(facts: Optional[dict], num_warps: int = 4) -> str:
    if not facts:
        return "-"
    parts = [f"{facts['mma']} tcgen05.mma", f"{facts['fence_proxy_async']} fence.proxy.async",
             f"{facts['bar_sync']} bar.sync"]
    parts += [f"{n} mma.sync {form}" for form, n in facts.get("mma_sync_forms", {}).items()]
    if facts["tma_store"]:
        parts.append(f"{facts['tma_store']} TMA stores")
    if facts["unfenced_mma_in_loop"]:
        parts.append(f"**{len(facts['unfenced_mma_in_loop'])} in-loop MMAs after st.shared with no fence**")
    if facts["unfenced_tma_store"]:
        parts.append(f"**{len(facts['unfenced_tma_store'])} TMA stores after st.shared with no fence**")
    if num_warps > 4 and facts.get("tmem_st_after_ld_unsynced"):  # two warps per lane quarter from 8 warps on
        parts.append(f"**{len(facts['tmem_st_after_ld_unsynced'])} tcgen05.st after a tcgen05.ld with no barrier "
                     f"({num_warps} warps: another warp's load)**")
    return ", ".join(parts)


def markdown_row(rec: dict[str, Any]) -> str:
    """One table row of a record."""
    compiled = rec.get("triton_compile", "-")
    if compiled != "ok":
        cells = [rec["case"], rec.get("report", ""), rec.get("triton", ""), f"compile: {compiled}", "-", "-", "-",
                 "-"]
    else:
        pipeline = rec.get("pipeline", "-")
        if pipeline == "ok":
            added = rec["facts_final"]["fence_proxy_async"] - rec["facts"]["fence_proxy_async"]
            forms = rec["facts_final"].get("mma_sync_forms", {})
            pipeline = "ok" + (f", +{added} fence.proxy.async" if added else "") + "".join(
                f", {n} mma.sync {form}" for form, n in forms.items()
                if forms != rec["facts"].get("mma_sync_forms")) + (
                ", PTX changed" if rec.get("ptx_changed") else ", PTX unchanged")
            if rec["facts_final"]["unfenced_mma_in_loop"] or rec["facts_final"]["unfenced_tma_store"]:
                pipeline += ", still unfenced"
        if pipeline != "-" and not pipeline.startswith("ok"):
            pipeline = "refused: " + _short(pipeline)
        emulator = rec.get("emulator", "not run")
        if rec.get("emulated_ptx") == "triton":
            emulator += " (Triton's PTX)"
        facts = _cell_facts(rec.get("facts"), rec.get("num_warps", 4))
        cells = [rec["case"], rec.get("report", ""), rec["triton"], facts,
                 _cell_findings(rec.get("verify_triton")), pipeline, _cell_findings(rec.get("verify_final")),
                 emulator]
    return "| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |"


def markdown_table(records: list[dict[str, Any]]) -> str:
    """The whole table: header and one row per record."""
    head = "| " + " | ".join(COLUMNS) + " |\n|" + " --- |" * len(COLUMNS)
    return "\n".join([head] + [markdown_row(r) for r in records])


def main(argv: Optional[list[str]] = None) -> int:
    """Command line: see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print the records as a JSON list")
    ap.add_argument("--cases", help="comma-separated case names (file stems)")
    ap.add_argument("--pythons", help="comma-separated interpreters, one per Triton version (default: this one)")
    ap.add_argument("--all-versions", action="store_true",
                    help="this interpreter plus one per other supported Triton whose environment exists")
    ap.add_argument("--no-emulate", action="store_true", help="skip the emulator runs")
    ap.add_argument("--render", metavar="FILE.json", help="print the markdown table of a saved --json run")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.render:
        print(markdown_table(json.loads(Path(args.render).read_text())))
        return 0
    if args.worker:
        print(json.dumps(run_case(Path(args.worker), emulate=not args.no_emulate)))
        return 0
    files = case_files(args.cases.split(",") if args.cases else None)
    pythons = args.pythons.split(",") if args.pythons else [sys.executable]
    if args.all_versions:
        pythons = version_pythons()
    records = []
    if not args.json:
        print("| " + " | ".join(COLUMNS) + " |\n|" + " --- |" * len(COLUMNS), flush=True)
    for path in files:
        for python in pythons:
            rec = run_in_process(path, python, emulate=not args.no_emulate)
            records.append(rec)
            if not args.json:
                print(markdown_row(rec), flush=True)
    if args.json:
        print(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `| head` closed the pipe: end quietly
        sys.stderr.close()
        sys.exit(0)
