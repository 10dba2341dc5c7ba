"""Exception types. Every error bwtriton raises on purpose derives from `BwTritonError`,
so the CLI can print a short message instead of a traceback."""
from __future__ import annotations

import difflib
from typing import Iterable


class BwTritonError(Exception):
    """Base class of bwtriton's deliberate errors."""


class UnknownTargetError(BwTritonError, ValueError):
    """A target name that bwtriton does not know."""


class UnknownPassError(BwTritonError, ValueError):
    """A pass name that is not in the registry."""


class UnknownStageError(BwTritonError, KeyError):
    """A compile stage name (``compiled.asm[...]``, ``--emit``, ``--stages``) that the compile did not produce."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class CompileError(BwTritonError):
    """Compilation failed: a pass refused the kernel, or Triton itself failed."""

    def __init__(self, message: str, *, pass_name: str | None = None, findings: list | None = None):
        super().__init__(message)
        self.pass_name = pass_name
        self.findings = findings or []


class InputError(BwTritonError, ValueError):
    """Bad user input (shape, dtype, layout, alignment...)."""


class UsageError(BwTritonError):
    """A command line that does not say what to do (no input, conflicting flags); the CLI exits 2 for it."""


def suggest(name: str, valid: Iterable[str]) -> str:
    """' Did you mean: a, b?' for the closest valid names, or '' when none is close."""
    close = difflib.get_close_matches(name, list(valid), n=3, cutoff=0.5)
    return f" Did you mean: {', '.join(close)}?" if close else ""
