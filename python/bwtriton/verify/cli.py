"""`bwtriton check FILE.ptx [--json] [--explain] [--target T]`.

Exit status: 0 no error finding, 1 at least one error finding, 2 unreadable or non-PTX input.
Findings go to stdout as `FILE:LINE: severity: [check/rule] message` (with --json: one JSON document).
"""
from __future__ import annotations

import argparse
import json
import sys

from bwtriton.errors import InputError
from bwtriton.targets import target_name


def register(subparsers) -> None:
    p = subparsers.add_parser("check", help="statically verify tcgen05/TMEM usage in a PTX file")
    p.add_argument("file", help="PTX file (e.g. compiled.asm['ptx'] written to disk); '-' reads stdin")
    p.add_argument("--json", action="store_true", help="print findings (and --explain rows) as JSON")
    p.add_argument("--explain", action="store_true",
                   help="print every tcgen05.mma with decoded M/N/K, types, majorness, swizzle, scales, TMEM D")
    p.add_argument("--target", default=None, type=target_name, help="target name (default: the file's .target)")
    p.add_argument("--no-notes", action="store_true", help="hide note-severity findings")
    p.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    from bwtriton.ptx import parse_ptx

    from . import verify_module
    from .explain import explain_mmas, format_explain
    name = args.file
    try:
        text = sys.stdin.read() if name == "-" else open(name, encoding="utf-8", errors="replace").read()
        mod = parse_ptx(text)
    except OSError as exc:
        print(f"bwtriton check: error: cannot read {name}: {exc.strerror}", file=sys.stderr)
        return 2
    except InputError as exc:
        print(f"bwtriton check: error: {name}: {exc}", file=sys.stderr)
        return 2
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
