"""`bwtriton opt` / `bwtriton-opt`: run passes (ours and Triton's, in the order given) over IR, like
triton-opt.

Two command lines are accepted:

* bwtriton's own: ``bwtriton opt FILE --passes 'a,b{x=1}' [--target T] [--report]``;
* triton-opt's: ``bwtriton-opt [FILE|-] [-o OUT] [-split-input-file]
  [-verify-diagnostics[=only-expected]] [-allow-unregistered-dialect] [-mlir-print-local-scope]
  [--PASS[='opt=v ...']]... [--pass-pipeline=P]``, so upstream lit files run with ``%triton-opt`` =
  ``python -m bwtriton.opt`` (see docs/regression_testing.md).

MLIR inputs (.ttir/.ttgir/.mlir, stdin) take our TTIR/TTGIR passes and Triton's MLIR passes;
text inputs (.ptx, .ll) take our PTX/LLIR passes. Options of Triton's passes are applied through
the Python adders or refused (`bwtriton.optcompat.triton_options`); passes Triton's Python
bindings do not expose are an error. With ``-split-input-file`` each ``// -----`` piece runs on
its own: its output is followed by its own ``--report``, and an error of one of our passes fails
that piece (exit status 1) while the later pieces still run. With no input file, stdin must be a
pipe holding IR (a terminal is refused).
"""
from __future__ import annotations

import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .errors import BwTritonError, InputError, UnknownPassError, UsageError, suggest
from .mlir import load_module, module_attr_int
from .optcompat.diagnostics import captured_stderr, parse_diagnostics, parse_expectations, verify
from .optcompat.local_scope import inline_aliases
from .optcompat.triton_options import adder_args, check_applied, context_for, split_option_text
from .pipeline import (PassSelection, all_passes, parse_pass_options, parse_pass_spec, run_stage_passes,
                       split_top_level_commas)
from .targets import Target, get_target, target_for_capability
from .triton_passes import triton_pass_table
from .userfiles import check_output_file, decode, read_stdin, read_text

_MLIR_SUFFIXES = {".ttir": "ttir", ".ttgir": "ttgir", ".mlir": "ttgir"}
_TEXT_SUFFIXES = {".ptx": "ptx", ".ll": "llir", ".llir": "llir"}
SPLIT_MARKER = "// -----"
_KINDS = {".ptx": "PTX", ".ll": "LLVM IR", ".llir": "LLVM IR"}  # what an input of each suffix should hold
_USAGE = "give an IR file and passes, e.g. `bwtriton opt k.ttgir --passes plan-tmem`, or pipe IR into it"


@dataclass
class PassStep:
    """One pass to run: its name and the options given for it (text values, as written)."""

    name: str
    options: dict[str, str] = field(default_factory=dict)


@dataclass
class OptResult:
    text: str
    reports: dict[str, dict] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------------------------
# Pass specs: bwtriton's grammar goes through pipeline.parse_pass_spec (the one parser); MLIR's textual pipeline
# (--pass-pipeline, op anchors, space-separated options) is unwrapped here down to those same entries.
# --------------------------------------------------------------------------------------------------------------

def parse_pass_list(spec: str) -> list[PassStep]:
    """'a,b{x=1 y=2}' or a --pass-pipeline text 'builtin.module(a{x=1},tt.func(b))' -> ordered PassSteps.
    Nested op anchors are flattened: Triton's adders add every pass at the top level."""
    steps = []
    for entry in _split_top(spec.strip()):
        anchor = re.match(r"^(?P<anchor>[A-Za-z0-9_.\-]+)\s*\((?P<body>.*)\)$", entry, re.S)
        if anchor:  # an op anchor such as builtin.module(...) or tt.func(...)
            steps.extend(parse_pass_list(anchor["body"]))
            continue
        for e in parse_pass_spec(entry):
            if e.sign or e.is_keyword:
                raise UnknownPassError(f"opt runs an ordered list of passes; {e.sign}{e.name!s} (a selection edit) "
                                       f"has no meaning here. Name each pass to run, e.g. 'plan-tmem,cse'")
            steps.append(PassStep(e.name, split_option_text(e.options)))
    return steps


def _split_top(text: str) -> list[str]:
    """Split at commas outside (...) and {...} (MLIR pipeline text nests both)."""
    return [p for p in (s.strip() for s in split_top_level_commas(text, "({", ")}")) if p]


def pass_flag_step(flag: str) -> PassStep:
    """'--tritongpu-pipeline=num-stages=2 dump-intermediate-steps=true' -> PassStep (triton-opt's pass flags)."""
    name, _, opts = flag.lstrip("-").partition("=")
    return PassStep(name, split_option_text(opts))


# --------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------

@dataclass
class OptInvocation:
    """A parsed triton-opt (or bwtriton opt) command line."""

    input: str = "-"
    output: str | None = None
    split: bool = False
    verify: str | None = None  # None, "all" or "only-expected"
    local_scope: bool = False
    allow_unregistered: bool = False
    steps: list[PassStep] = field(default_factory=list)
    target: str | None = None
    num_stages: int = 3
    report: bool = False
    stdin_implied: bool = False  # no input named: stdin must be a non-empty pipe, never a waiting terminal


_IGNORED_FLAGS = {"mlir-disable-threading", "mlir-print-op-on-diagnostic", "mlir-elide-elementsattrs-if-larger",
                  "mlir-print-ir-after-failure"}  # printing/threading knobs that do not change the result


def parse_command_line(argv: Sequence[str]) -> OptInvocation:
    """Read triton-opt's flags (and bwtriton opt's --passes/--target/--num-stages/--report)."""
    inv, args, positional = OptInvocation(), list(argv), []
    while args:
        arg = args.pop(0)
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            continue
        name, eq, value = arg.lstrip("-").partition("=")
        if name in ("o", "passes", "target", "num-stages", "pass-pipeline") and not eq:
            if not args:
                raise InputError(f"{arg} needs a value")
            value = args.pop(0)
        if name == "o":
            inv.output = value
        elif name == "passes":
            inv.steps.extend(parse_pass_list(value))
        elif name == "pass-pipeline":
            inv.steps.extend(parse_pass_list(value))
        elif name == "target":
            inv.target = value
        elif name == "num-stages":
            inv.num_stages = int(value)
        elif name == "report":
            inv.report = True
        elif name == "split-input-file":
            inv.split = True
        elif name == "verify-diagnostics":
            if value not in ("", "all", "only-expected"):
                raise InputError(f"-verify-diagnostics takes =all or =only-expected, got {value!r}")
            inv.verify = value or "all"
        elif name == "allow-unregistered-dialect":
            inv.allow_unregistered = True
        elif name == "mlir-print-local-scope":
            inv.local_scope = True
        elif name in ("debug-only", "debug"):
            # LLVM_DEBUG output goes to stderr and does not change the IR; Triton's release wheel has none.
            print(f"bwtriton-opt: note: {arg} ignored: Triton's release wheel prints no LLVM_DEBUG output",
                  file=sys.stderr)
        elif name == "mlir-print-debuginfo":
            raise InputError(f"{arg}: not supported by bwtriton-opt (Triton's Python bindings do not expose it)")
        elif name not in _IGNORED_FLAGS:
            inv.steps.append(pass_flag_step(arg))
    if len(positional) > 1:
        raise InputError(f"one input file expected, got {' '.join(positional)}")
    inv.input = positional[0] if positional else "-"
    inv.stdin_implied = not positional
    return inv


# --------------------------------------------------------------------------------------------------------------
# Resolving and running steps
# --------------------------------------------------------------------------------------------------------------

@dataclass
class _Resolved:
    kind: str  # "ours" or "triton"
    name: str
    options: dict[str, Any]
    cls: Any = None


def resolve_steps(steps: list[PassStep], mlir: bool, suffix: str) -> list[_Resolved]:
    """Check every step names a pass we can run on this input (ours, or Triton's via its Python adder)."""
    ours, theirs = all_passes(), triton_pass_table()
    out = []
    for step in steps:
        if step.name in ours:
            cls = ours[step.name]
            text = ",".join(f"{k}={v}" for k, v in step.options.items())
            out.append(_Resolved("ours", step.name, parse_pass_options(cls, text), cls))
        elif step.name in theirs:
            if not mlir:
                raise InputError(f"Triton pass {step.name!r} runs on MLIR (.ttir/.ttgir/.mlir), not on {suffix} "
                                 f"files")
            out.append(_Resolved("triton", step.name, dict(step.options)))
        else:
            raise UnknownPassError(
                f"unknown pass or flag {step.name!r}: neither bwtriton nor Triton 3.6's Python bindings "
                f"(triton._C.libtriton passes.* / nvidia.passes.*) provide it, so it is not reachable from "
                f"Python.{suggest(step.name, list(ours) + list(theirs))} `bwtriton passes --triton` lists "
                f"what is.")
    return out


def _module_capability(text: str) -> int | None:
    m = re.search(r'"?ttg\.target"?\s*=\s*"cuda:(\d+)"', text) or re.search(r"\.target\s+sm_(\d+)", text)
    return int(m.group(1)) if m else None


def _bw_target(explicit: str | None, capability: int | None) -> Target:
    """bwtriton Target for our passes: --target, else the module's, else sm_100a."""
    if explicit:
        return get_target(explicit)
    if capability is None:
        return get_target("sm_100a")
    try:
        return target_for_capability(capability)
    except BwTritonError as exc:
        raise InputError(f"module target cuda:{capability}: {exc} Give --target to run bwtriton's passes.") from None


def _run_ours(res: _Resolved, ir_obj: Any, tgt: Target, metadata: dict, reports: dict) -> Any:
    cls = res.cls
    selection = PassSelection(((cls.name, tuple(sorted({**cls.option_defaults(), **res.options}.items()))),))
    if not cls().applies_to(tgt):
        reports[cls.name] = {"skipped": f"pass {cls.name} does not apply to {tgt.name}"}
        return ir_obj
    return run_stage_passes(cls.stage.value, ir_obj, selection, tgt, metadata, reports)


def _run_triton(res: _Resolved, module: Any, cctx) -> None:
    from triton._C.libtriton import ir
    pm = ir.pass_manager(module.context)
    triton_pass_table()[res.name][1](pm, *adder_args(res.name, res.options, cctx))
    check_applied(res.name, res.options, pm.get_pipeline_str())
    try:
        pm.run(module, f"bwtriton-opt:{res.name}")
    except RuntimeError as exc:
        raise PassFailure(f"pass {res.name} failed: {exc}") from None


class PassFailure(BwTritonError):
    """A pass (or the parser) reported errors; the diagnostics were printed by MLIR."""


def _parse_mlir(path: str, allow_unregistered: bool) -> Any:
    try:
        return load_module(path)
    except RuntimeError as exc:
        raise PassFailure(f"cannot parse {path}: {exc}") from None


UNREGISTERED_REASON = (
    "-allow-unregistered-dialect cannot be honoured: the input has ops of an unregistered dialect (e.g. "
    "\"test.op\"), and Triton 3.6's Python bindings create the MLIRContext without exposing "
    "allowUnregisteredDialects() (ir.context offers only printOpOnDiagnostic/printStackTraceOnDiagnostic, and "
    "libtriton.so exports no MLIR C++ symbols), so such IR cannot be parsed from Python")


def run_mlir_text(path: str, resolved: list[_Resolved], inv: OptInvocation, reports: dict) -> str:
    """Parse one MLIR file, run the steps in order, return the printed module."""
    text = Path(path).read_text()
    module = _parse_mlir(path, inv.allow_unregistered)
    cap = _module_capability(text)
    if inv.target and cap is None:
        cap = get_target(inv.target).capability
    metadata: dict = {}
    for res in resolved:
        if res.kind == "triton":
            cctx = context_for(cap, module_attr_int(module, "ttg.num-warps", 4),
                               module_attr_int(module, "ttg.num-ctas", 1), inv.num_stages)
            _run_triton(res, module, cctx)
        else:
            module = _run_ours(res, module, _bw_target(inv.target, cap), metadata, reports)
    return module.str_nodebug() if hasattr(module, "str_nodebug") else str(module)


def run_opt(path: "str | Path", passes: "str | list[str]", *, target: "str | Target | None" = None,
            num_stages: int = 3) -> OptResult:
    """Run `passes` (bwtriton's spec, e.g. 'a,b{x=1}') in order over the IR in `path`; returns the printed IR
    and our passes' reports."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    spec = passes if isinstance(passes, str) else ",".join(passes)
    tgt_name = target.name if isinstance(target, Target) else target
    inv = OptInvocation(input=str(path), steps=parse_pass_list(spec), target=tgt_name, num_stages=num_stages)
    reports: dict[str, dict] = {}
    return OptResult(_run_file(path, inv, reports), reports)


def _run_file(path: Path, inv: OptInvocation, reports: dict) -> str:
    suffix = path.suffix
    if suffix in _MLIR_SUFFIXES:
        return run_mlir_text(str(path), resolve_steps(inv.steps, True, suffix), inv, reports)
    if suffix not in _TEXT_SUFFIXES:
        raise InputError(f"{path}: unknown IR kind {suffix!r}; expected one of "
                         f"{', '.join(sorted({**_MLIR_SUFFIXES, **_TEXT_SUFFIXES}))}")
    stage, ir_text, metadata = _TEXT_SUFFIXES[suffix], path.read_text(), {}
    tgt = _bw_target(inv.target, _module_capability(ir_text))
    for res in resolve_steps(inv.steps, False, suffix):
        if res.cls.stage.value != stage:
            raise InputError(f"pass {res.name} runs on {res.cls.stage.value}, not on {suffix} files")
        ir_text = _run_ours(res, ir_text, tgt, metadata, reports)
    return ir_text


# --------------------------------------------------------------------------------------------------------------
# triton-opt driver: split input, diagnostics, output
# --------------------------------------------------------------------------------------------------------------

def split_chunks(text: str, split: bool) -> list[tuple[int, str]]:
    """(first line index, chunk text) for each `// -----` piece (one piece without -split-input-file)."""
    if not split:
        return [(0, text)]
    chunks, start, cur = [], 0, []
    for idx, line in enumerate(text.splitlines(keepends=True)):
        if re.fullmatch(r"//\s*-{5,}\s*", line.strip()):
            chunks.append((start, "".join(cur)))
            start, cur = idx + 1, []
        else:
            cur.append(line)
    chunks.append((start, "".join(cur)))
    return chunks


def _run_chunk(first_line: int, chunk: str, suffix: str, inv: OptInvocation,
               reports: dict) -> tuple[str | None, str, str]:
    """Run one chunk: the input file itself when it is not split, else a temp file padded so diagnostics keep the
    original line numbers. Returns (printed IR or None on failure, captured stderr, rendered --report text), both
    texts naming the input, never the temp file."""
    shown = "<stdin>" if inv.input == "-" else inv.input
    tmp = None
    if inv.split or inv.input == "-":
        fd, tmp = tempfile.mkstemp(suffix=suffix if suffix in {**_MLIR_SUFFIXES, **_TEXT_SUFFIXES} else ".mlir")
        with os.fdopen(fd, "w") as f:
            f.write("\n" * first_line + chunk)
    path = Path(tmp or inv.input)
    try:
        with captured_stderr() as err:
            try:
                out: str | None = _run_file(path, inv, reports)
            except PassFailure:
                out = None
            except BwTritonError as exc:  # our passes quote locations: name the user's file
                exc.args = (_named_input(str(exc), tmp, shown),)
                if not inv.split:
                    raise
                # split input, as in triton-opt: a failing piece prints its error and the next pieces still run
                print(f"error: {exc}", file=sys.stderr)
                out = None
        if out is not None and first_line and out.startswith("\n" * first_line):  # text passes keep the padding
            out = out[first_line:]
        return out, _named_input(err[0], tmp, shown), _named_input(_render_reports(inv, reports), tmp, shown)
    finally:
        if tmp:
            os.unlink(tmp)


def _named_input(text: str, tmp: str | None, shown: str) -> str:
    """`text` with the temp chunk file's path and name replaced by the user's input (diagnostics, report locations)."""
    return text.replace(tmp, shown).replace(os.path.basename(tmp), os.path.basename(shown)) if tmp else text


def _check_unregistered(stderr: str, inv: OptInvocation) -> None:
    if "unregistered dialect" in stderr and inv.allow_unregistered:
        raise InputError(UNREGISTERED_REASON)


def opt_main(argv: Sequence[str] | None = None, prog: str = "bwtriton-opt") -> int:
    """Entry point of `bwtriton-opt` / `python -m bwtriton.opt` (prog names the error prefix); exit 1 for bad
    input or failed passes, 2 for a command line without input."""
    try:
        return _opt_main(list(sys.argv[1:] if argv is None else argv))
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except BwTritonError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1


def register(subparsers) -> None:
    """Add `bwtriton opt` (errors go through the top CLI's contract, as `bwtriton opt: error: ...`)."""
    # No option parsing here: triton-opt's flags (-split-input-file, --tritongpu-pipeline=..., ...) are read by
    # parse_command_line, so every argument is passed through as is.
    o = subparsers.add_parser("opt", prefix_chars="\x01", add_help=False,
                              help="run passes over IR; takes bwtriton's --passes or triton-opt's command line")
    o.add_argument("argv", nargs="*")
    o.set_defaults(func=lambda args: _opt_main(list(args.argv)))


def _opt_main(argv: list[str]) -> int:
    if any(a in ("-h", "--help", "-help") for a in argv):
        print(__doc__)
        return 0
    inv = parse_command_line(argv)
    if inv.verify:  # Triton's pass manager prints only errors unless told to show these severities too
        os.environ.setdefault("MLIR_ENABLE_DIAGNOSTICS", "warnings,remarks")
    if inv.output and inv.output != "-":
        check_output_file(inv.output, "-o")
    if inv.stdin_implied:
        text, suffix = read_stdin("MLIR", _USAGE), ".mlir"
    elif inv.input == "-":
        text, suffix = decode(sys.stdin.buffer.read(), "<stdin>", "MLIR", allow_empty=True), ".mlir"
    else:
        suffix = Path(inv.input).suffix or ".mlir"
        text = read_text(inv.input, _KINDS.get(suffix, "MLIR"))
    resolve_steps(inv.steps, suffix in _MLIR_SUFFIXES, suffix)  # fail on a bad pass before any work
    outputs, failed, problems = [], False, []
    for first, chunk in split_chunks(text, inv.split):
        reports: dict = {}  # per chunk: each `// -----` piece is followed by its own reports
        out, err, rendered = _run_chunk(first, chunk, suffix, inv, reports)
        _check_unregistered(err, inv)
        if inv.verify:
            problems += verify(parse_diagnostics(err), parse_expectations("\n" * first + chunk),
                               inv.verify == "only-expected")
        else:
            sys.stderr.write(err)
            failed |= out is None
        if out is not None or reports:
            printed = (inline_aliases(out) if inv.local_scope else out) if out is not None else ""
            outputs.append((printed if printed.endswith("\n") or not printed else printed + "\n") + rendered)
    _write_output(inv, outputs)
    for p in problems:
        print(f"{inv.input}: {p}", file=sys.stderr)
    return 1 if failed or problems else 0


def _render_reports(inv: OptInvocation, reports: dict) -> str:
    if not (inv.report and reports):
        return ""
    registry = all_passes()
    return "".join(f"// ----- bwtriton report: {n} -----\n{registry[n].render_report(r)}\n" for n, r in reports.items())


def _write_output(inv: OptInvocation, outputs: list[str]) -> None:
    body = f"{SPLIT_MARKER}\n".join(o if o.endswith("\n") else o + "\n" for o in outputs)
    if inv.output and inv.output != "-":
        Path(inv.output).write_text(body)
    else:
        sys.stdout.write(body)


if __name__ == "__main__":
    sys.exit(opt_main())
