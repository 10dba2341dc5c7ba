"""Subcommands of the regression tools, registered into `bwtriton` by cli.py's plugin list:
`opt` (replaced by the triton-opt-compatible front end of bwtriton/opt.py), `snapshot` and `diff`."""
from __future__ import annotations

import argparse

from ..opt import opt_main
from .snapshot_cli import add_diff_parser, add_snapshot_parser


def _replace_subcommand(subparsers: argparse._SubParsersAction, name: str) -> None:
    """Drop an already registered subcommand so a richer one can take its name."""
    subparsers.choices.pop(name, None)
    subparsers._choices_actions[:] = [a for a in subparsers._choices_actions if a.dest != name]


def _cmd_opt(args: argparse.Namespace) -> int:
    return opt_main(args.argv, prog="bwtriton")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `opt`, `snapshot` and `diff` to the bwtriton command line."""
    _replace_subcommand(subparsers, "opt")
    # No option parsing here: triton-opt's flags (-split-input-file, --tritongpu-pipeline=..., ...) are read by
    # opt.parse_command_line, so every argument is passed through as is.
    o = subparsers.add_parser("opt", prefix_chars="\x01", add_help=False,
                              help="run passes over IR; takes bwtriton's --passes or triton-opt's command line")
    o.add_argument("argv", nargs="*")
    o.set_defaults(func=_cmd_opt)
    add_snapshot_parser(subparsers)
    add_diff_parser(subparsers)
