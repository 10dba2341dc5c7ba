"""The `bwtriton` command line: compile, passes, demo, and the subcommands features register
(`check` from the verifier, `emulate` from the emulator, `opt` from bwtriton.opt, `snapshot`/`diff` from the
regression tools)."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

from . import opt as opt_cli
from .demo import run_demo
from .driver import compile as bw_compile
from .errors import BwTritonError, InputError, UsageError
from .loading import add_kernel_arguments, compile_keywords, load_kernel
from .pipeline import PASS_SPEC_GRAMMAR, PASSES_EXAMPLES, all_passes
from .regress import cli as regress_cli
from .report import MAX_WIDTH, check_report_names, format_table, render_reports, summary_table, wrap
from .targets import TARGETS, target_name
from .tmem import write_tmem_map
from .triton_passes import triton_pass_table
from .userfiles import check_output_dir, check_output_file
from .version import __version__


def glue_option_values(argv: Sequence[str], options: Sequence[str] = ("--passes",)) -> list[str]:
    """`--passes -NAME` -> `--passes=-NAME`: argparse takes a value that starts with '-' for an option and
    fails with "expected one argument", yet dropping a pass is spelt exactly that way."""
    out, it = [], iter(argv)
    for arg in it:
        if arg in options:
            value = next(it, None)
            if value is not None and value.startswith("-") and not value.startswith("--"):
                out.append(f"{arg}={value}")
                continue
            out += [arg] + ([value] if value is not None else [])
        else:
            out.append(arg)
    return out


def _stage_list(text: str) -> list[str]:
    """--stages ptx,sass -> ['ptx', 'sass']; an empty list is an error (the stages are checked at write time)."""
    stages = [s.strip() for s in text.split(",") if s.strip()]
    if not stages:
        raise InputError(f"--stages takes comma-separated stage names (e.g. ptx,sass), got {text!r}")
    return stages


def _ir_launch_options(args: argparse.Namespace) -> dict[str, int]:
    """Launch numbers for an IR-file compile; flags the file itself decides are errors, not silently dropped."""
    carried = ["signature", "constexpr", "example", "divisible_by_16"]
    carried += ["num_warps", "num_ctas"] if args.input.endswith(".ttgir") else []
    flags = [f"--{k.replace('_', '-')}" for k in carried if getattr(args, k)]
    if flags:
        own = " and its warps/CTAs (ttg.num-warps, ttg.num-ctas)" if args.input.endswith(".ttgir") else ""
        raise InputError(f"{', '.join(flags)}: not for {args.input}; an IR file carries its own argument types and "
                         f"constants{own} (drop the flag, or compile the .py kernel)")
    return {k: getattr(args, k) for k in ("num_warps", "num_ctas", "num_stages") if getattr(args, k) is not None}


def _compile_from_args(args: argparse.Namespace):
    """Compile what `bwtriton compile`'s arguments name (an IR file, or FILE.py:KERNEL with its spec)."""
    options: dict[str, Any] = dict(target=args.target, passes=args.passes, two_cta=args.two_cta,
                                   check_limits=not args.no_check_limits)
    if args.input.endswith((".ttir", ".ttgir")):
        return bw_compile(args.input, **options, **_ir_launch_options(args))
    fn, spec = load_kernel(args.input)
    return bw_compile(fn, **compile_keywords(fn, spec, args, args.input), **options)


def _emit(result, args: argparse.Namespace) -> int:
    data = result.asm[args.emit]
    if isinstance(data, bytes):
        raise InputError(f"stage {args.emit!r} is binary; write it with --out instead")
    sys.stdout.write(data if data.endswith("\n") else data + "\n")
    if args.report:
        print(render_reports(result, args.report))
    return 0


def _check_compile_outputs(args: argparse.Namespace) -> None:
    """Every name and path the compile writes or reports on, checked before it compiles."""
    check_report_names(args.report)
    if args.tmem_map:
        check_output_file(args.tmem_map, "--tmem-map", (".svg", ".png"))
    if args.out:
        check_output_dir(args.out, "-o/--out")
    if args.emit and (args.out or args.tmem_map or args.json):
        raise UsageError("--emit prints one stage to stdout; drop -o/--tmem-map/--json, or drop --emit")


def cmd_compile(args: argparse.Namespace) -> int:
    stages = _stage_list(args.stages) if args.stages is not None else None
    _check_compile_outputs(args)
    result = _compile_from_args(args)
    if args.emit:
        return _emit(result, args)
    if args.tmem_map:
        report = result.reports.get("plan-tmem")
        if report is None:
            raise InputError(f"no TMEM plan for this compile (plan-tmem runs on tcgen05 targets; target is "
                             f"{result.target.name})")
        write_tmem_map(report, args.tmem_map)
        print(f"  wrote TMEM map {args.tmem_map}")
    written = result.write(args.out, stages) if args.out else []
    if args.json:
        print(json.dumps({"summary": result.summary(), "reports": result.reports,
                          "written": [str(p) for p in written]}, indent=2, default=str))
        return 0
    print(summary_table(result))
    for path in written:
        print(f"  wrote {path}")
    if args.report:
        print(render_reports(result, args.report, outdir=args.out))
    return 0


def _default_column(cls, registry: dict) -> str:
    """'on', 'opt-in', or 'with P' for a pass a default-on pass P requires (it runs whenever P does)."""
    if cls.default_enabled:
        return "on"
    needed_by = [n for n, c in registry.items() if c.default_enabled and cls.name in c.requires]
    return f"with {needed_by[0]}" if needed_by else "opt-in"


def cmd_passes(args: argparse.Namespace) -> int:
    registry = all_passes()
    rows = []
    for name, cls in registry.items():
        inst = cls()
        targets = [t for t in TARGETS if inst.applies_to(TARGETS[t])]
        opts = ", ".join(f"{o.name}={o.default!r}" for o in cls.options)
        rows.append((name, cls.stage.value, _default_column(cls, registry), ",".join(targets),
                     cls.purpose + (f" [options: {opts}]" if opts else "")))
    if args.json:
        print(json.dumps([dict(zip(("name", "stage", "default", "targets", "purpose"), r)) for r in rows], indent=2))
        return 0
    header = ("pass", "stage", "default", "targets", "purpose")
    if args.wide:
        print(format_table(header, rows, width=None))
    else:  # the purpose under each row, wrapped: a fifth column would leave it a narrow strip
        every = ",".join(TARGETS)
        short = [r[:3] + ("all" if r[3] == every else r[3],) for r in rows]
        table = format_table(header[:4], short).splitlines()
        print("\n".join(table[:2]))
        for line, row in zip(table[2:], rows):
            print(line)
            print(wrap(row[4], MAX_WIDTH, indent="    ", first="    "))
    if any(r[2].startswith("with ") for r in rows):
        print(wrap("default 'with P': runs whenever pass P does (P requires it); '-P' drops both"))
    if args.triton:
        print("\nTriton passes usable in `bwtriton opt --passes`:")
        for name, (path, _, _) in sorted(triton_pass_table().items()):
            line = f"  {name:48s} {path}"
            print(line if args.wide or len(line) <= MAX_WIDTH else f"  {name}\n      {path}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(target=args.target, run_on_gpu=not args.no_gpu)


def cmd_doctor(args: argparse.Namespace) -> int:
    from . import doctor  # heavy: asks Triton's backend for its ptxas
    info = doctor.report()
    print(json.dumps(info, indent=2) if args.json else doctor.render(info))
    return 0 if info["triton_supported"] else 1


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="bwtriton", description="Blackwell (sm_100a) passes, verifier and emulator "
                                "on top of Triton 3.6 - 3.9.")
    p.add_argument("--version", action="version", version=f"bwtriton {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    c = sub.add_parser("compile", help="compile FILE.py:KERNEL or FILE.ttgir and write chosen stages")
    c.add_argument("input", help="FILE.py:KERNEL, FILE.ttir or FILE.ttgir")
    c.add_argument("--target", default="sm_100a", type=target_name, help=f"one of {', '.join(TARGETS)}")
    add_kernel_arguments(c)
    c.add_argument("--two-cta", action="store_true", help="2-CTA (cta_group::2) MMAs via the pair-ctas pass")
    c.add_argument("--passes", help=f"pass selection, e.g. {PASSES_EXAMPLES}; {PASS_SPEC_GRAMMAR}")
    c.add_argument("--out", "-o", help="folder for the stage files (default: write none)")
    c.add_argument("--stages", help="comma-separated stages to write (default: all + sass); ptx is the PTX the "
                   "cubin is built from, ptx_triton Triton's before bwtriton's passes (written as KERNEL.triton.ptx)")
    c.add_argument("--emit", metavar="STAGE", help="print one stage (ttir, ttgir, llir, ptx, sass, ...; "
                   "ptx_triton/ttgir_triton for Triton's text of a stage our passes rewrote) to stdout instead of "
                   "the summary")
    c.add_argument("--report", action="append", default=[], metavar="PASS|all",
                   help="print a pass's report (e.g. tmem, plan-tmem, verify-tcgen05, all)")
    c.add_argument("--tmem-map", metavar="PATH", help="write the plan-tmem TMEM map picture (.svg, or .png with "
                   "matplotlib)")
    c.add_argument("--no-check-limits", action="store_true", help="keep a kernel over the target's shared-memory "
                   "or TMEM limit (it cannot launch) to inspect what Triton emitted for it")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_compile)

    ps = sub.add_parser("passes", help="list the pass registry")
    ps.add_argument("--json", action="store_true")
    ps.add_argument("--triton", action="store_true", help="also list Triton's passes usable in `opt`")
    ps.add_argument("--wide", action="store_true", help="print full table rows, however wide (default: wrapped "
                    "to 100 columns)")
    ps.set_defaults(func=cmd_passes)

    d = sub.add_parser("demo", help="compile the tutorial kernels for sm_100a and show what the Blackwell path "
                       "emitted; on a GPU also run and check them")
    d.add_argument("--target", default="sm_100a", type=target_name)
    d.add_argument("--no-gpu", action="store_true", help="do not launch on a local GPU even if one exists")
    d.set_defaults(func=cmd_demo)

    for name in ("doctor", "version"):
        dr = sub.add_parser(name, help="print bwtriton, Triton (and whether it is supported), torch, the CUDA tools "
                            "Triton bundles, and which features this Triton can run")
        dr.add_argument("--json", action="store_true")
        dr.set_defaults(func=cmd_doctor)

    # Feature modules that add subcommands: each has `register(subparsers)` setting `func` on its parser.
    from .emu import cli as emu_cli  # heavy: the emulator (numpy, torch, Triton's driver API)
    from .verify import cli as verify_cli  # heavy: the verifier and its checks (z3)
    for plugin in (verify_cli, emu_cli, opt_cli, regress_cli):
        plugin.register(sub)
    return p


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's one-line usage error: `bwtriton CMD: error: WHAT (see 'bwtriton CMD --help')`."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """parse_args, with unknown flags reported by the subcommand's parser (its name and --help in the line)."""
    args, extra = parser.parse_known_args(glue_option_values(sys.argv[1:] if argv is None else argv))
    if extra:
        sub = next((a.choices.get(getattr(args, "command", None)) for a in parser._actions
                    if isinstance(a, argparse._SubParsersAction)), None)
        (sub or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _error(command: str | None, message: str) -> None:
    print(f"bwtriton{' ' + command if command else ''}: error: {message}", file=sys.stderr)


#: exit status when stdout's reader went away: what a shell reports for a process SIGPIPE ended (128 + 13)
EXIT_BROKEN_PIPE = 141


def _stdout_closed() -> int:
    """stdout's reader closed the pipe (`bwtriton check ... | head`): stop without a word. stdout is pointed at
    /dev/null so the interpreter's own flush at exit does not raise (and print) BrokenPipeError again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (captured): nothing left to flush into
        pass
    return EXIT_BROKEN_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `bwtriton` command. Exit status: 0 success, 1 bad input (or a failed check), 2 usage, 3 a bwtriton
    bug; every error is one `bwtriton COMMAND: error: WHAT (HOW TO FIX)` line on stderr."""
    parser = build_parser()
    try:
        args = _parse(parser, argv)
    except SystemExit as exc:  # usage errors (exit 2, message printed) and --help/--version (exit 0)
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    command = getattr(args, "command", None)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()   # a reader that went away shows here, not in the interpreter's exit flush
        return status
    except BrokenPipeError:
        return _stdout_closed()
    except UsageError as exc:
        _error(command, str(exc))
        return 2
    except BwTritonError as exc:
        _error(command, str(exc))
        return 1
    except KeyboardInterrupt:
        return 130
    except OSError as exc:  # a path of the user's that the checks before the work could not foresee (full disk)
        if os.environ.get("BWTRITON_VERBOSE") == "1" or not exc.filename:
            raise
        _error(command, f"{exc.filename}: {exc.strerror or exc} (check the path and its permissions)")
        return 1
    except Exception as exc:  # a bug of ours: one line for the user, the traceback on request
        if os.environ.get("BWTRITON_VERBOSE") == "1":
            raise
        _error(command, f"internal error: {type(exc).__name__}: {exc} (this is a bwtriton bug; rerun with "
                        f"BWTRITON_VERBOSE=1 for the traceback and report it)")
        return 3


if __name__ == "__main__":
    sys.exit(main())
