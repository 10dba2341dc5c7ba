"""The files a user names on the command line: reading inputs defensively (missing, folder, unreadable, binary,
empty) and checking output paths before any work, so a bad path is a one-line `InputError` naming the fix and
nothing is written or created first. Folders are never created beyond the one the user named."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterable

from .errors import InputError, UsageError

_SNIFF_BYTES = 8192


def _describe(kind: str) -> str:
    if not kind:
        return "a text file"
    return f"{'an' if kind[0] in 'AEFHILMNORSX' else 'a'} {kind} file"  # an MLIR, a PTX, an LLVM IR


def read_text(path: "str | os.PathLike", kind: str = "", *, allow_empty: bool = False) -> str:
    """The UTF-8 text of `path`; an `InputError` naming the fix when it is missing, a folder, unreadable, binary
    or (unless `allow_empty`) empty. `kind` names what the file should hold ('PTX', 'MLIR', 'snapshot JSON')."""
    p = Path(path)
    want = _describe(kind)
    if not p.exists():
        raise InputError(f"{p}: no such file (check the path; the command wants {want})")
    if p.is_dir():
        raise InputError(f"{p} is a folder, not a file (name {want} inside it)")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(f"{p}: cannot read it: {exc.strerror or exc} (check its permissions)") from None
    return decode(data, str(p), kind, allow_empty=allow_empty)


def decode(data: bytes, shown: str, kind: str = "", *, allow_empty: bool = False) -> str:
    """`data` as UTF-8 text; binary bytes (NUL or undecodable) and, unless `allow_empty`, blank text are errors."""
    want = _describe(kind)
    if b"\0" in data[:_SNIFF_BYTES]:
        raise InputError(f"{shown} is a binary file, not text (pass {want})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{shown} is not UTF-8 text (undecodable byte at offset {exc.start}; pass {want})") \
            from None
    if not allow_empty and not text.strip():
        raise InputError(f"{shown} is empty (it should hold {kind or 'text'}; check that whatever wrote it "
                         f"succeeded)")
    return text


def read_stdin(kind: str, usage: str) -> str:
    """Text from stdin for a command given '-' or no input; a terminal or an empty pipe is a `UsageError`
    quoting `usage` (a command waiting silently on a terminal looks hung)."""
    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError(f"no input file given and stdin is a terminal ({usage})")
    data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
    if not data.strip():
        raise UsageError(f"no input file given and stdin is empty ({usage})")
    return decode(data, "<stdin>", kind)


def _writable_folder(folder: Path, flag: str, target: str) -> None:
    if not folder.exists():
        raise InputError(f"{flag} {target}: folder {folder} does not exist (create it first, or write elsewhere)")
    if not folder.is_dir():
        raise InputError(f"{flag} {target}: {folder} is a file, not a folder (choose another path)")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{flag} {target}: cannot write into {folder} (permission denied; choose a folder you "
                         f"can write)")


def check_output_file(path: "str | os.PathLike", flag: str, suffixes: Iterable[str] = ()) -> Path:
    """Check that `path` can be written as a file (its folder exists and is writable, it is no folder, its suffix
    is one of `suffixes` when given) before the work that produces it; returns it as a Path."""
    p = Path(path)
    allowed = tuple(suffixes)
    if allowed and p.suffix.lower() not in allowed:
        raise InputError(f"{flag} {p}: the file is written as {' or '.join(allowed)} (use one of those "
                         f"extensions)")
    if p.is_dir():
        raise InputError(f"{flag} {p} is a folder (name a file inside it)")
    _writable_folder(p.parent if str(p.parent) else Path("."), flag, str(p))
    if p.exists() and not os.access(p, os.W_OK):
        raise InputError(f"{flag} {p}: the file exists and is read-only (choose another path)")
    return p


def check_output_dir(path: "str | os.PathLike", flag: str) -> Path:
    """Check that `path` is a writable folder or can be made as one (its parent exists): only the named folder is
    ever created, never missing parents. Returns it as a Path; the folder is made by `make_output_dir`."""
    p = Path(path)
    if p.exists():
        if not p.is_dir():
            raise InputError(f"{flag} {p} is a file; {flag} names a folder for the files it writes (choose a "
                             f"folder path)")
        _writable_folder(p, flag, str(p))
    else:
        _writable_folder(p.parent if str(p.parent) else Path("."), flag, str(p))
    return p


def make_output_dir(path: "str | os.PathLike", flag: str) -> Path:
    """`check_output_dir`, then create the folder itself if missing (its parent must exist)."""
    p = check_output_dir(path, flag)
    p.mkdir(exist_ok=True)
    return p
