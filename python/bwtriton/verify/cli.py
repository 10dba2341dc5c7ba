"""`bwtriton check FILE.ptx [--json] [--explain] [--target T] [--split-input-file]`.

Exit status: 0 no error finding, 1 at least one error finding or an unreadable / non-PTX input (one
`bwtriton check: error: ...` line), 2 a bad command line.
Findings go to stdout as `FILE:LINE: severity: [check/rule] message` (with --json: one JSON document).
"""
from __future__ import annotations

import argparse
import json
import re
import sys

from bwtriton.errors import InputError, UsageError
from bwtriton.ptx import parse_ptx
from bwtriton.targets import TARGETS, target_name
from bwtriton.userfiles import decode, read_text

from . import verify_module
from .checks.resources import TCGEN05_TARGETS
from .explain import explain_mmas, format_explain


def register(subparsers) -> None:
    p = subparsers.add_parser("check", help="statically verify tcgen05/TMEM usage in a PTX file")
    p.add_argument("file", help="PTX file (e.g. compiled.asm['ptx'] written to disk); '-' reads stdin")
    p.add_argument("--json", action="store_true", help="print findings (and --explain rows) as JSON")
    p.add_argument("--explain", action="store_true",
                   help="print every tcgen05.mma with decoded M/N/K, types, majorness, swizzle, scales, TMEM D")
    p.add_argument("--target", default=None, type=target_name, help="target name (default: the file's .target)")
    p.add_argument("--no-notes", action="store_true", help="hide note-severity findings")
    p.add_argument("--split-input-file", action="store_true",
                   help="verify each '// -----'-separated chunk as its own module (lit tests); each chunk's "
                        "output starts with '// ----- case N: ENTRY' and line numbers stay those of the file")
    p.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    name = args.file
    if args.target is not None and args.target not in known_targets():
        raise UsageError(f"unknown --target {args.target!r} (valid targets: {', '.join(known_targets())})")
    if name == "-":
        text = decode(sys.stdin.buffer.read(), "<stdin>", "PTX")
    else:
        text = read_text(name, "PTX")
    if args.split_input_file:
        return _run_split(args, name, text)
    try:
        mod = parse_ptx(text)
    except InputError as exc:
        raise InputError(f"{name}: {exc}") from None
    return _check_one(args, name, mod)


def known_targets() -> list[str]:
    """Targets `check --target` accepts: bwtriton's compile targets plus every PTX target with tcgen05."""

    return sorted(set(TARGETS) | TCGEN05_TARGETS)


_SPLIT_RE = re.compile(r"^[ \t]*// -----[^\n]*$", re.M)


def split_chunks(text: str) -> list[str]:
    """The `// -----` chunks of `text`, each padded with blank lines so its line numbers are the file's."""
    chunks, start, line = [], 0, 0
    for m in list(_SPLIT_RE.finditer(text)) + [None]:
        end = m.start() if m else len(text)
        chunks.append("\n" * line + text[start:end])
        if m:
            line = text.count("\n", 0, m.end()) + 1
            start = m.end() + 1
    return chunks


def _run_split(args: argparse.Namespace, name: str, text: str) -> int:
    worst = 0
    for n, chunk in enumerate(split_chunks(text), 1):
        try:
            mod = parse_ptx(chunk)
        except InputError as exc:
            print(f"// ----- case {n}")
            print(f"{name}: case {n}: {exc}")
            worst = 1
            continue
        entry = mod.functions[0].name if mod.functions else "?"
        print(f"// ----- case {n}: {entry}")
        worst = max(worst, _check_one(args, name, mod))
    return worst


def _check_one(args: argparse.Namespace, name: str, mod) -> int:
    target = args.target or mod.target or "sm_100a"
    report = verify_module(mod, target)
    findings = [f for f in report.findings if not (args.no_notes and f.severity == "note")]
    if args.json:
        doc = report.to_dict()
        doc["file"] = name
        doc["target"] = target
        doc["findings"] = [f.to_dict() for f in findings]
        if args.explain:
            doc["mmas"] = explain_mmas(mod, target)
        print(json.dumps(doc, indent=2))
    else:
        if args.explain:
            text_out = format_explain(explain_mmas(mod, target))
            print(text_out if text_out else "no tcgen05.mma in this file")
        for f in findings:
            print(f.format(name))
        counts = report.counts
        print(f"{name}: {counts['error']} error(s), {counts['warning']} warning(s), {counts['note']} note(s) "
              f"in {len(report.functions)} function(s)")
    return 1 if report.errors else 0
