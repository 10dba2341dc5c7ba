"""Crash-safe cache and outputs: files are written whole or not at all (temp file in the same folder, then
os.replace), and a damaged cache entry is recomputed with a note instead of becoming a compile failure."""
from __future__ import annotations

import json
import os
import textwrap

import pytest

from bwtriton.cli import main
from bwtriton.regress import snapshot as snapshot_mod

KERNEL = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def copy(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs))


    BWTRITON_SPECS = {"copy": {"signature": {"x_ptr": "*fp16", "y_ptr": "*fp16"}, "constexprs": {"BLOCK": 128}}}
''')
KEY = "k.py:copy[default]@sm_100a"


def test_a_truncated_cache_entry_is_recomputed_with_a_note(tmp_path, monkeypatch, capsys):
    """As a snapshot killed mid-write of an entry left it with the in-place writes of old: the next snapshot
    must recompute that kernel, say so, and exit 0 (it used to report a JSONDecodeError compile failure)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k.py").write_text(KERNEL)
    argv = ["snapshot", "k.py", "-q", "--cache", "cache"]
    assert main([*argv, "-o", "first.json"]) == 0
    (entry,) = (tmp_path / "cache").glob("*.json")
    text = entry.read_text()
    entry.write_text(text[: len(text) // 2])  # truncated
    capsys.readouterr()
    assert main([*argv, "-o", "second.json"]) == 0
    err = capsys.readouterr().err
    record = json.loads((tmp_path / "second.json").read_text())["records"][KEY]
    assert "error" not in record and record["cached"] is False
    assert f"note: {KEY}: damaged cache entry {entry.name} discarded and recomputed" in err
    first = json.loads((tmp_path / "first.json").read_text())["records"][KEY]
    assert record["census"] == first["census"] and record["hashes"] == first["hashes"]
    assert json.loads(entry.read_text())["record"]["hashes"] == first["hashes"]  # rewritten whole
    assert main([*argv, "-o", "third.json"]) == 0 and "note:" not in capsys.readouterr().err


def test_snapshot_files_and_cache_entries_are_renamed_into_place(tmp_path, monkeypatch):
    """No writer opens the destination itself: each file appears by os.replace from a temporary file in the
    destination's folder, so a reader (the next run, a parallel job) never sees part of it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k.py").write_text(KERNEL)
    renames = []
    real_replace = os.replace

    def replace(src, dst):
        renames.append((os.path.abspath(src), os.path.abspath(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    assert main(["snapshot", "k.py", "-q", "--cache", "cache", "-o", "s.json"]) == 0
    (entry,) = (tmp_path / "cache").glob("*.json")
    written = {dst: src for src, dst in renames}
    for dst in (str(tmp_path / "s.json"), str(entry)):
        assert dst in written, f"{dst} was not renamed into place"
        assert os.path.dirname(written[dst]) == os.path.dirname(dst)
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_an_interrupted_write_keeps_the_old_file_whole(tmp_path, monkeypatch):
    out = tmp_path / "s.json"
    snapshot_mod.write_snapshot({"records": {"old": {}}}, str(out))
    before = out.read_text()

    def killed(*_):
        raise KeyboardInterrupt  # as if the process were stopped between writing and renaming

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        snapshot_mod.write_snapshot({"records": {"new": {"x": "y" * 100000}}}, str(out))
    assert out.read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]


def test_a_cache_entry_of_the_wrong_shape_is_discarded(tmp_path):
    entry = tmp_path / "e.json"
    entry.write_text(json.dumps({"record": "not a dict"}))
    got, note = snapshot_mod.read_cache_entry(entry)
    assert got is None and "not a snapshot cache entry" in note and not entry.exists()


def _writer(path: str, text: str, times: int) -> None:
    from bwtriton.regress.atomic import write_atomic
    for _ in range(times):
        write_atomic(path, text)


def test_parallel_writers_of_one_entry_never_show_a_reader_part_of_it(tmp_path):
    """Two jobs finishing the same kernel write the same cache entry at once while a third reads it."""
    import multiprocessing
    path = str(tmp_path / "entry.json")
    texts = [json.dumps({"record": {"x": c * 100000}}) for c in "ab"]
    _writer(path, texts[0], 1)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, t, 25)) for t in texts]
    for p in procs:
        p.start()
    seen = set()
    while any(p.is_alive() for p in procs):
        with open(path) as f:
            seen.add(f.read())
    for p in procs:
        p.join()
        assert p.exitcode == 0
    assert seen <= set(texts) and seen


def test_a_cache_entry_of_another_kernel_is_discarded(tmp_path):
    job = snapshot_mod.Job("k.py", "copy", "default", 0, "sm_100a", "default")
    entry = tmp_path / "e.json"
    other = {"file": "k.py", "kernel": "other", "config": "default", "target": "sm_100a", "passes": "default"}
    entry.write_text(json.dumps({"validity": {}, "record": other}))
    got, note = snapshot_mod.read_cache_entry(entry, job)
    assert got is None and "holds k.py:other, not this kernel" in note and not entry.exists()
    entry.write_text(json.dumps({"validity": {}, "record": {**other, "kernel": "copy"}}))
    assert snapshot_mod.read_cache_entry(entry, job)[0] is not None
