"""bwtriton's own regression corpus and its checked-in snapshot (tests/snapshots/corpus.json).

Update after an intended change of emitted code, from the repository root:

    python -m bwtriton.regress.corpus            # rewrites tests/snapshots/corpus.json
    git diff tests/snapshots/corpus.json         # or: python -m bwtriton diff OLD NEW for the readable report
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .snapshot import _progress, default_cache_dir, discover_jobs, take_snapshot, without_timing, write_snapshot

REPO = Path(__file__).resolve().parents[3]
#: Kernel sources of the corpus, relative to the repository root (BWTRITON_SPECS files and PTX corpus modules).
CORPUS_INPUTS = ("python/bwtriton/examples", "tests/fixtures/kernels.py")
CORPUS_TARGETS = ("sm_100a", "sm_90a")
SNAPSHOT = Path("tests/snapshots/corpus.json")


def snapshot_corpus(jobs: int = 2, cache_dir: str | None = None, progress=None) -> dict:
    """A fresh snapshot of the corpus with bwtriton's default passes (run from the repository root)."""
    import os
    cwd = os.getcwd()
    os.chdir(REPO)  # record keys are paths relative to the repository root
    try:
        found = discover_jobs(CORPUS_INPUTS, list(CORPUS_TARGETS), "default")
        return take_snapshot(found, jobs_n=jobs, cache_dir=cache_dir or default_cache_dir(), progress=progress)
    finally:
        os.chdir(cwd)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bwtriton.regress.corpus", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", "-j", type=int, default=2)
    p.add_argument("--out", default=str(REPO / SNAPSHOT))
    args = p.parse_args(argv)
    doc = snapshot_corpus(args.jobs, progress=_progress)
    write_snapshot(without_timing(doc), args.out)
    failed = [k for k, r in doc["records"].items() if "error" in r]
    print(f"wrote {args.out}: {len(doc['records'])} records, {len(failed)} failed to compile")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
