"""Crash-safe file writes for snapshots, diff reports and cache entries: a reader (another worker, the next run)
sees either the old file or the whole new one, never a prefix of it."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: "str | Path", text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and `os.replace`: the rename is atomic
    only within one file system, hence the same folder. The temporary file is removed if anything fails."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # the data reaches the disk before the name points at it
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; a written file gets the usual mode
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
