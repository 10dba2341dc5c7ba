"""`-verify-diagnostics` for `bwtriton-opt`: capture the diagnostics Triton's C++ prints while parsing and
running passes, and match them against `expected-error/-warning/-remark/-note` comments like MLIR does.

Triton 3.6's Python bindings give no diagnostic handler object, but every diagnostic is printed to the
process's stderr as ``loc("file":LINE:COL): error: message``; we redirect file descriptor 2 around the C++
calls and parse that text.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from typing import Iterator

_DIAG_RE = re.compile(r'^(?:loc\((?:"(?P<file>[^"]*)":(?P<line>\d+):(?P<col>\d+)|[^)]*)\)|(?P<f2>[^:\s]+):'
                      r'(?P<l2>\d+):(?P<c2>\d+))?:?\s*(?P<sev>error|warning|remark|note): (?P<msg>.*)$')
_EXPECT_RE = re.compile(r"expected-(?P<sev>error|warning|remark|note)(?P<re>-re)?\s*(?:@(?P<where>above|below|[+-]\d+|\d+))?"
                        r"\s*(?:\s(?P<count>\d+))?\s*\{\{(?P<msg>.*)\}\}")


@dataclass
class Diagnostic:
    severity: str
    message: str
    line: int | None  # 1-based line in the input, None when the location is not a file position


@dataclass
class Expected:
    severity: str
    message: str
    line: int
    written_at: int
    count: int = 1
    seen: int = 0
    is_regex: bool = False  # expected-*-re: `{{...}}` fragments are regexes, the rest literal


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[str]]:
    """Redirect fd 2 (where MLIR prints diagnostics) into a buffer; yields a list that gets the text on exit."""
    out: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield out
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out.append(tmp.read().decode(errors="replace"))


# What Triton's pass-manager wrapper adds when a pass fails (a reproducer dump and a generic pipeline error);
# triton-opt does not emit these, so they are not diagnostics of the input.
_RUNNER_NOISE = ("Failures have been detected while processing an MLIR pass pipeline",
                 "Pipeline failed while executing")


def parse_diagnostics(text: str) -> list[Diagnostic]:
    """Diagnostics in printed stderr text; continuation lines belong to the diagnostic above them."""
    return [d for d in _parse_all(text) if not d.message.startswith(_RUNNER_NOISE)]


def _parse_all(text: str) -> list[Diagnostic]:
    diags: list[Diagnostic] = []
    open_message = False  # continuation lines belong to the message until its source snippet
    for raw in text.splitlines():
        m = _DIAG_RE.match(raw.strip())
        if m:
            line = m["line"] or m["l2"]
            diags.append(Diagnostic(m["sev"], m["msg"].strip(), int(line) if line else None))
            open_message = True
        elif open_message and re.fullmatch(r"\s*\^\s*", raw):
            # SourceMgr's "source line, then caret" ends the message (and the IR dump after it is not message)
            diags[-1].message = diags[-1].message.rsplit("\n", 1)[0]
            open_message = False
        elif open_message and raw.strip():
            # MLIR keeps a multi-line message's indentation ("value:\n  #ttg.blocked<...>"); so do we.
            diags[-1].message += "\n" + raw.rstrip()
    return diags


def parse_expectations(text: str) -> list[Expected]:
    """expected-* comments of one input (1-based lines; @below/@above skip other expectation-only lines)."""
    lines = text.splitlines()
    found = []
    for idx, line in enumerate(lines, start=1):
        for m in _EXPECT_RE.finditer(line):
            found.append(Expected(m["sev"], m["msg"], _target_line(m["where"], idx, lines), idx,
                                  int(m["count"] or 1), is_regex=bool(m["re"])))
    return found


def _target_line(where: str | None, idx: int, lines: list[str]) -> int:
    if where is None:
        return idx
    if where in ("below", "above"):
        step = 1 if where == "below" else -1
        j = idx + step
        while 1 <= j <= len(lines) and _EXPECT_RE.search(lines[j - 1]) and not _code_before_comment(lines[j - 1]):
            j += step
        return j
    if where[0] in "+-":
        return idx + int(where)
    return int(where)


def _code_before_comment(line: str) -> bool:
    return bool(line.split("//", 1)[0].strip())


def _message_regex(message: str, is_regex: bool) -> str:
    """expected-*: the text is a literal substring. expected-*-re: literal text with `{{regex}}` fragments
    (MLIR's syntax), joined into one regex."""
    if not is_regex:
        return re.escape(message)
    parts = re.split(r"\{\{(.*?)\}\}", message)
    return "".join(re.escape(p) if i % 2 == 0 else f"(?:{p})" for i, p in enumerate(parts))


def _matches(exp: Expected, diag: Diagnostic) -> bool:
    if exp.severity != diag.severity or exp.line != diag.line:
        return False
    # LLVM's POSIX regexes let `.` match a newline; multi-line messages need that.
    return re.search(_message_regex(exp.message, exp.is_regex), diag.message, re.S) is not None


def verify(diags: list[Diagnostic], expected: list[Expected], only_expected: bool) -> list[str]:
    """Problems like MLIR's verifier prints them: unexpected diagnostics and expectations never produced.
    With `only_expected` (-verify-diagnostics=only-expected), unexpected diagnostics are not problems."""
    problems = []
    for d in diags:
        exp = next((e for e in expected if e.seen < e.count and _matches(e, d)), None)
        if exp:
            exp.seen += 1
        elif not only_expected:
            problems.append(f"line {d.line}: unexpected {d.severity}: {d.message}")
    printed_notes = any(d.severity == "note" for d in diags)
    for e in expected:
        if e.seen < e.count:
            why = "" if e.severity != "note" or printed_notes else f" ({NOTES_DROPPED})"
            problems.append(f"line {e.written_at}: expected {e.severity} \"{e.message}\" at line {e.line} "
                            f"was not produced{why}")
    return problems


# Why an expected-note can be unverifiable: Triton 3.6's ir.parse_mlir_module installs no diagnostic handler, and
# MLIR's fallback printer writes an error's message without the notes attached to it.
NOTES_DROPPED = ("no note was printed at all: Triton 3.6's parse_mlir_module reports parser errors through "
                 "MLIR's default printer, which drops attached notes, so notes cannot be checked from Python")
