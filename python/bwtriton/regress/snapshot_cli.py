"""Command lines of `bwtriton snapshot` and `bwtriton diff`."""
from __future__ import annotations

import argparse
import sys

from ..errors import InputError
from ..pipeline import PASS_SPEC_GRAMMAR, PASSES_EXAMPLES, resolve_passes
from ..targets import get_target
from ..userfiles import check_output_dir, check_output_file
from .atomic import write_atomic
from .diff import diff_snapshots, parse_fail_on, render
from .snapshot import (_progress, default_cache_dir, discover_jobs, load_snapshot, take_snapshot, without_timing,
                       write_snapshot)


def add_snapshot_parser(subparsers: argparse._SubParsersAction) -> None:
    s = subparsers.add_parser("snapshot", help="compile a kernel corpus and record what was emitted (JSON)")
    s.add_argument("kernels", nargs="+", help="files with BWTRITON_SPECS, FILE.py:KERNEL, folders, or PTX corpus "
                   "modules with corpus_kernels()")
    s.add_argument("--targets", default="sm_100a", help="comma-separated targets (default sm_100a)")
    s.add_argument("--passes", default="default", help="'default' (bwtriton's passes), 'none' (Triton alone, "
                   f"no bwtriton hook), or a pass spec, e.g. {PASSES_EXAMPLES}; {PASS_SPEC_GRAMMAR}")
    s.add_argument("--out", "-o", required=True, help="snapshot file to write (.json)")
    s.add_argument("--jobs", "-j", type=int, default=1, help="worker processes (default 1)")
    s.add_argument("--cache", help="incremental cache folder (default $BWTRITON_SNAPSHOT_CACHE or "
                   "~/.cache/bwtriton/snapshots)")
    s.add_argument("--no-cache", action="store_true", help="analyse every kernel again")
    s.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    s.add_argument("--no-timing", action="store_true", help="leave compile times out (for checked-in snapshots)")
    s.add_argument("--check-determinism", action="store_true", help="compile each kernel once more, afresh, and "
                   "record the stages whose canonical text differs ('nondeterministic'): a diff reports those as "
                   "nondeterminism, not as changes (doubles the compile time)")
    s.add_argument("--allow-failures", action="store_true", help="exit 0 even when kernels fail to compile (their "
                   "errors are recorded either way; without this flag any failure exits 1)")
    s.set_defaults(func=cmd_snapshot)


def _targets(text: str) -> list[str]:
    names = [get_target(t.strip()).name for t in text.split(",") if t.strip()]
    if not names:
        raise InputError(f"--targets takes comma-separated target names (e.g. sm_100a,sm_90a), got {text!r}")
    return names


def _check_passes(passes: str, targets: list[str]) -> None:
    """A bad --passes fails before any kernel compiles (it would fail every one of them)."""
    if passes not in ("default", "none"):
        for target in targets:
            resolve_passes(passes, target)


def cmd_snapshot(args: argparse.Namespace) -> int:
    targets = _targets(args.targets)
    if args.jobs < 1:
        raise InputError(f"--jobs must be at least 1, got {args.jobs}")
    check_output_file(args.out, "--out")
    if args.cache and not args.no_cache:
        check_output_dir(args.cache, "--cache")
    _check_passes(args.passes, targets)
    skipped: list[tuple[str, str]] = []
    jobs = discover_jobs(args.kernels, targets, args.passes, skipped)
    doc = take_snapshot(jobs, jobs_n=args.jobs, cache_dir=None if args.no_cache else (args.cache or
                                                                                       default_cache_dir()),
                        progress=None if args.quiet else _progress, check_determinism=args.check_determinism)
    write_snapshot(without_timing(doc) if args.no_timing else doc, args.out)
    _print_summary(args.out, doc, skipped)
    errors = [k for k, r in doc["records"].items() if "error" in r]
    if errors and not args.allow_failures:
        print(f"bwtriton snapshot: error: {len(errors)} of {len(doc['records'])} kernel configs failed to compile "
              f"(recorded in {args.out}; pass --allow-failures to exit 0 with failures recorded)", file=sys.stderr)
        return 1
    return 0


def _print_summary(out: str, doc: dict, skipped: list[tuple[str, str]]) -> None:
    """The one-line result, then files passed over, damaged cache entries and compile errors on stderr."""
    records = doc["records"]
    errors = [k for k, r in records.items() if "error" in r]
    cached = sum(1 for r in records.values() if r.get("cached"))
    print(f"wrote {out}: {len(records)} records ({cached} from cache, {len(errors)} failed to "
          f"compile) in {doc['wall_seconds']:.1f} s with Triton {doc['triton']}")
    if skipped:
        print(f"  skipped {len(skipped)} file(s) that are no kernel files (read, not imported):", file=sys.stderr)
        for path, why in skipped:
            print(f"    {path}: {why}", file=sys.stderr)
    for key, rec in records.items():
        if rec.get("cache_note"):
            print(f"  note: {key}: {rec['cache_note']}", file=sys.stderr)
    for key in errors:
        print(f"  {key}: {records[key]['error']}", file=sys.stderr)


def add_diff_parser(subparsers: argparse._SubParsersAction) -> None:
    d = subparsers.add_parser("diff", help="compare two snapshots kernel by kernel")
    d.add_argument("old")
    d.add_argument("new")
    d.add_argument("--fail-on", default="", help="exit 1 when a change matches: comma-separated rules such as "
                   "spills,registers>+8,findings,tcgen05 (see docs/regression_testing.md)")
    d.add_argument("--format", choices=("markdown", "json"), default="markdown")
    d.add_argument("--out", "-o", help="write the report here instead of stdout")
    d.set_defaults(func=cmd_diff)


def cmd_diff(args: argparse.Namespace) -> int:
    rules = parse_fail_on(args.fail_on)
    if args.out:
        check_output_file(args.out, "--out")
    result = diff_snapshots(load_snapshot(args.old), load_snapshot(args.new), rules)
    text = render(result, args.format)
    if args.out:
        write_atomic(args.out, text)
    else:
        sys.stdout.write(text)
    return 1 if result["failing"] else 0
