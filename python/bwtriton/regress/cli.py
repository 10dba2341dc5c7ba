"""Subcommands of the regression tools, registered into `bwtriton` by cli.py's plugin list: `snapshot`, `diff`."""
from __future__ import annotations

import argparse

from .snapshot_cli import add_diff_parser, add_snapshot_parser


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `snapshot` and `diff` to the bwtriton command line."""
    add_snapshot_parser(subparsers)
    add_diff_parser(subparsers)
