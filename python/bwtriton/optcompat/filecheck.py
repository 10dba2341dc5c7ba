"""`python -m bwtriton.optcompat.filecheck`: the `filecheck` PyPI port with LLVM FileCheck's display-only flags
accepted, so upstream lit files (`FileCheck %s --dump-input-context 50`) run unchanged.

The port rejects `--dump-input-context N` / `--dump-input-filter=...`, which in LLVM only choose how much input a
failure report shows; we drop them (matching is unchanged) and hand the rest to the port.
"""
from __future__ import annotations

import sys
from typing import Sequence

_DISPLAY_ONLY = ("--dump-input-context", "-dump-input-context", "--dump-input-filter", "-dump-input-filter")


def strip_display_flags(argv: Sequence[str]) -> list[str]:
    """argv without LLVM FileCheck's display-only flags (`--dump-input-context N`, `--dump-input-context=N`)."""
    out, args = [], list(argv)
    while args:
        arg = args.pop(0)
        name, eq, _ = arg.partition("=")
        if name in _DISPLAY_ONLY:
            if not eq and args:
                args.pop(0)  # the separate value: `--dump-input-context 20`
            continue
        out.append(arg)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run the filecheck port on argv with the display-only flags removed."""
    try:
        from filecheck.main import main as filecheck_main
    except ImportError:
        print("bwtriton.optcompat.filecheck: the `filecheck` package is missing: pip install filecheck",
              file=sys.stderr)
        return 2
    args = strip_display_flags(sys.argv[1:] if argv is None else argv)
    sys.argv = ["filecheck", *args]  # the port reads sys.argv itself
    return filecheck_main() or 0


if __name__ == "__main__":
    sys.exit(main())
