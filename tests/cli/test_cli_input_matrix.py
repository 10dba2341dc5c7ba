"""Every subcommand x each kind of bad input (missing, empty, binary, folder, wrong extension, unwritable output):
exit status 1, exactly one `bwtriton COMMAND: error: WHAT (HOW TO FIX)` line on stderr, nothing on stdout, and no
file or folder written anywhere under the test's folder. Usage mistakes exit 2 with one line as well."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from bwtriton.cli import build_parser, main

REPO = Path(__file__).resolve().parents[2]
MATMUL = f"{REPO / 'python' / 'bwtriton' / 'examples' / 'matmul.py'}:matmul_kernel"
KERNEL_FILE = '''import triton
import triton.language as tl


@triton.jit
def k(x_ptr):
    tl.store(x_ptr, 1.0)


BWTRITON_SPECS = {"k": {"signature": {"x_ptr": "*fp32"}}}
'''


def _inputs(root: Path) -> None:
    """The files the cases name: empty and binary files of each suffix, a folder named like a file, kernels."""
    for suffix in (".ptx", ".ttgir", ".mlir", ".py", ".json"):
        (root / f"empty{suffix}").write_text("")
        (root / f"binary{suffix}").write_bytes(b"\x7fELF\x02\x01\x00\x00\xff\xfe" * 8)
        (root / f"folder{suffix}").mkdir()
    (root / "notes.txt").write_text("just words\n")
    (root / "afile").write_text("a file where a folder is wanted\n")
    (root / "k.py").write_text(KERNEL_FILE)
    (root / "raises.py").write_text("import triton\nraise RuntimeError('broken at import time')\n"
                                    "BWTRITON_SPECS = {}\n")


# (argv, a fragment of the message that names what is wrong or how to fix it). {t} is the test's folder.
CASES = {
    "compile": [
        (["compile", "{t}/missing.py:k"], "missing.py: no such file (check the path"),
        (["compile", "{t}/missing.ttgir"], "missing.ttgir: no such file (check the path"),
        (["compile", "{t}/empty.ttgir"], "empty.ttgir is empty; write a TTGIR module into it (e.g."),
        (["compile", "{t}/empty.py:k"], "empty.py is empty (it should hold Python"),
        (["compile", "{t}/binary.ttgir"], "binary.ttgir is a binary file, not text (pass a TTGIR file)"),
        (["compile", "{t}/binary.py:k"], "binary.py is a binary file, not text (pass a Python file)"),
        (["compile", "{t}/folder.py:k"], "folder.py is a folder, not a Python file"),
        (["compile", "{t}/folder.ttgir"], "folder.ttgir is a folder, not a file (name a TTGIR file inside it)"),
        (["compile", "{t}/notes.txt"], "got '{t}/notes.txt' (a .txt file; name the kernel as FILE.py:KERNEL"),
        (["compile", "{t}/raises.py:k"], "raises.py: importing it failed: RuntimeError: broken at import time"),
        (["compile", MATMUL, "-o", "{t}/new/deeper"], "folder {t}/new does not exist (create it first"),
        (["compile", MATMUL, "-o", "{t}/afile"], "afile is a file; -o/--out names a folder"),
        (["compile", MATMUL, "--tmem-map", "{t}/new/map.svg"], "folder {t}/new does not exist (create it first"),
        (["compile", MATMUL, "--tmem-map", "{t}/folder.py"], "the file is written as .svg or .png"),
        (["compile", MATMUL, "--report", "bogus", "-o", "{t}/out"], "--report bogus: no such pass to report on"),
    ],
    "check": [
        (["check", "{t}/missing.ptx"], "missing.ptx: no such file (check the path"),
        (["check", "{t}/empty.ptx"], "empty.ptx is empty (it should hold PTX"),
        (["check", "{t}/binary.ptx"], "binary.ptx is a binary file, not text (pass a PTX file)"),
        (["check", "{t}/folder.ptx"], "folder.ptx is a folder, not a file (name a PTX file inside it)"),
        (["check", "{t}/k.py"], "input is not PTX"),
    ],
    "emulate": [
        (["emulate", "{t}/missing.ptx"], "missing.ptx: no such file (check the path"),
        (["emulate", "{t}/empty.ptx"], "empty.ptx is empty (it should hold PTX"),
        (["emulate", "{t}/binary.ptx"], "binary.ptx is a binary file, not text (pass a PTX file)"),
        (["emulate", "{t}/folder.ptx"], "folder.ptx is a folder, not a file (name a PTX file inside it)"),
        (["emulate", "{t}/notes.txt"], "emulate takes FILE.ptx or FILE.py:KERNEL"),
        (["emulate", "{t}/k.py:k", "--arg", "zeros:fp32:4", "--save", "0={t}/new/x.npy"],
         "folder {t}/new does not exist (create it first"),
    ],
    "opt": [
        (["opt", "{t}/missing.ttgir", "--passes", "cse"], "missing.ttgir: no such file (check the path"),
        (["opt", "{t}/empty.mlir", "--passes", "cse"], "empty.mlir is empty (it should hold MLIR"),
        (["opt", "{t}/binary.mlir", "--passes", "cse"], "binary.mlir is a binary file, not text (pass an MLIR"),
        (["opt", "{t}/binary.ptx", "--passes", "insert-tcgen05-wait-ld"], "binary.ptx is a binary file"),
        (["opt", "{t}/folder.mlir", "--passes", "cse"], "folder.mlir is a folder, not a file"),
        (["opt", "{t}/notes.txt", "--passes", "cse"], "runs on MLIR (.ttir/.ttgir/.mlir), not on .txt files"),
        (["opt", "{t}/empty.ptx", "-o", "{t}/new/out.mlir"], "folder {t}/new does not exist (create it first"),
    ],
    "snapshot": [
        (["snapshot", "{t}/missing.py", "-o", "{t}/s.json"], "missing.py: no such file or folder"),
        (["snapshot", "{t}/empty.py", "-o", "{t}/s.json"], "empty.py is empty (it should hold Python"),
        (["snapshot", "{t}/binary.py", "-o", "{t}/s.json"], "binary.py is a binary file, not text"),
        (["snapshot", "{t}/folder.ptx", "-o", "{t}/s.json"], "no kernels found in"),
        (["snapshot", "{t}/notes.txt", "-o", "{t}/s.json"], "notes.txt: not a Python file"),
        (["snapshot", "{t}/raises.py", "-o", "{t}/s.json"], "raises.py: importing it failed: RuntimeError: broken"),
        (["snapshot", "{t}/k.py", "-o", "{t}/new/s.json"], "folder {t}/new does not exist (create it first"),
        (["snapshot", "{t}/k.py", "-o", "{t}/folder.json"], "--out {t}/folder.json is a folder (name a file"),
        (["snapshot", "{t}/k.py", "--passes", "bogus", "-o", "{t}/s.json"], "unknown pass 'bogus'"),
    ],
    "diff": [
        (["diff", "{t}/missing.json", "{t}/missing.json"], "missing.json: no such file (check the path"),
        (["diff", "{t}/empty.json", "{t}/empty.json"], "empty.json is empty (it should hold snapshot JSON"),
        (["diff", "{t}/binary.json", "{t}/binary.json"], "binary.json is a binary file, not text"),
        (["diff", "{t}/folder.json", "{t}/folder.json"], "folder.json is a folder, not a file"),
        (["diff", "{t}/k.py", "{t}/k.py"], "not JSON"),
        (["diff", "{t}/k.py", "{t}/k.py", "-o", "{t}/new/d.md"], "folder {t}/new does not exist (create it"),
    ],
}

USAGE = [["compile"], ["check"], ["emulate"], ["snapshot", "x.py"], ["diff", "a.json"], ["compile", "x", "--bogus"],
         ["passes", "--bogus"], ["demo", "--target", "sm_1"], ["check", "x.ptx", "--target", "sm_99z"]]


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_every_subcommand_is_in_the_matrix():
    import argparse
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(action.choices) - {"passes", "demo", "doctor", "version"} == set(CASES)  # these read no files


@pytest.mark.parametrize("argv,fragment", [case for cases in CASES.values() for case in cases],
                         ids=[" ".join(a[:2]).replace("{t}/", "") for cases in CASES.values() for a, _ in cases])
def test_bad_input_is_one_line_exit_1_and_writes_nothing(capsys, tmp_path, monkeypatch, argv, fragment):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BWTRITON_SNAPSHOT_CACHE", str(tmp_path / "cache"))  # a cache write would show up too
    _inputs(tmp_path)
    before = _tree(tmp_path)
    rc, out, err = _run(capsys, [a.replace("{t}", str(tmp_path)) for a in argv])
    lines = err.splitlines()
    assert rc == 1, err
    assert len(lines) == 1 and lines[0].startswith(f"bwtriton {argv[0]}: error: "), err
    assert fragment.replace("{t}", str(tmp_path)) in lines[0]
    assert out == "" and "Traceback" not in err and "internal error" not in err
    assert _tree(tmp_path) == before, "files were written before the error"


@pytest.mark.parametrize("argv", USAGE, ids=[" ".join(a) for a in USAGE])
def test_usage_errors_are_one_line_exit_2(capsys, argv):
    rc, out, err = _run(capsys, argv)
    lines = err.splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith(f"bwtriton {argv[0]}: error: "), err
    assert "--help" in lines[0] or "valid targets" in lines[0]


def test_opt_without_input_says_what_it_wants(capsys, monkeypatch):
    import io
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"")))
    rc, out, err = _run(capsys, ["opt"])
    assert rc == 2 and out == ""
    assert err == ("bwtriton opt: error: no input file given and stdin is empty (give an IR file and passes, e.g. "
                   "`bwtriton opt k.ttgir --passes plan-tmem`, or pipe IR into it)\n")


def test_opt_on_a_terminal_does_not_wait(capsys, monkeypatch):
    class Terminal:
        def isatty(self) -> bool:
            return True

        def read(self, *a):  # pragma: no cover - reaching it is the failure
            raise AssertionError("opt read a terminal")
    monkeypatch.setattr("sys.stdin", Terminal())
    rc, out, err = _run(capsys, ["opt", "--passes", "cse"])
    assert rc == 2 and "stdin is a terminal (give an IR file" in err


def test_an_internal_error_is_exit_3_with_one_line(capsys, monkeypatch):
    import bwtriton.cli as cli

    def broken(args):
        raise ZeroDivisionError("a bug")
    monkeypatch.setattr(cli, "cmd_passes", broken)
    monkeypatch.delenv("BWTRITON_VERBOSE", raising=False)
    parser = cli.build_parser
    monkeypatch.setattr(cli, "build_parser", lambda: _with_func(parser(), "passes", broken))
    rc, out, err = _run(capsys, ["passes"])
    assert rc == 3 and err.startswith("bwtriton passes: error: internal error: ZeroDivisionError: a bug (this is")
    assert len(err.splitlines()) == 1


def _with_func(parser, command: str, func):
    import argparse
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    action.choices[command].set_defaults(func=func)
    return parser


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into read-only folders")
def test_a_read_only_output_folder_fails_before_work(capsys, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        rc, out, err = _run(capsys, ["compile", MATMUL, "-o", str(locked / "out")])
        assert rc == 1 and "cannot write into" in err and not (locked / "out").exists()
    finally:
        locked.chmod(0o700)
