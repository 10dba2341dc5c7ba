"""Argument parsers of `bwtriton snapshot` and `bwtriton diff` (filled in by the snapshot modules)."""
from __future__ import annotations

import argparse


def add_snapshot_parser(subparsers: argparse._SubParsersAction) -> None:
    pass


def add_diff_parser(subparsers: argparse._SubParsersAction) -> None:
    pass
