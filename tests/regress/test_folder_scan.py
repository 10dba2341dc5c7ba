"""Folder snapshots read only kernel files: each .py file is parsed, only those declaring BWTRITON_SPECS or
corpus_kernels() are imported, the others are named as skipped; and snapshot loads files with loading.py's loader."""
from __future__ import annotations

import json
import textwrap

import pytest

from bwtriton import loading
from bwtriton.cli import main
from bwtriton.errors import InputError

KERNEL = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def copy(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs))


    BWTRITON_SPECS = {"copy": {"signature": {"x_ptr": "*fp16", "y_ptr": "*fp16"}, "constexprs": {"BLOCK": 128}}}
''')
# A helper beside the kernels that does work when run: it reads the snapshot it summarises (its docstring names
# BWTRITON_SPECS, which is all the old text check looked for) and leaves a mark if it ever runs.
HELPER = textwrap.dedent('''
    """Summarise a snapshot of the kernels in this folder (their BWTRITON_SPECS)."""
    import json
    import pathlib

    pathlib.Path(__file__).with_name("helper_ran").write_text("yes")
    print(json.loads(pathlib.Path("latest.json").read_text()))
''')
JIT_ONLY = textwrap.dedent('''
    import triton


    @triton.jit
    def unspecified(x_ptr):
        pass
''')


@pytest.fixture()
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "copy.py").write_text(KERNEL)
    (kernels / "summarise.py").write_text(HELPER)
    (kernels / "jit_only.py").write_text(JIT_ONLY)
    (kernels / "__init__.py").write_text("")
    return kernels


def test_a_folder_snapshot_imports_only_kernel_files_and_names_the_rest(folder, capsys):
    assert main(["snapshot", "kernels", "-o", "s.json", "-q", "--no-cache"]) == 0
    err = capsys.readouterr().err
    assert not (folder / "helper_ran").exists()
    records = json.loads(open("s.json").read())["records"]
    assert list(records) == ["kernels/copy.py:copy[default]@sm_100a"]
    assert "skipped 3 file(s)" in err
    assert "kernels/summarise.py: no BWTRITON_SPECS, @triton.jit function or corpus_kernels()" in err
    assert "kernels/jit_only.py: @triton.jit kernels but no BWTRITON_SPECS" in err
    assert "kernels/__init__.py:" in err


@pytest.mark.parametrize("source,found", [
    (KERNEL, {"specs", "jit"}), (HELPER, set()), (JIT_ONLY, {"jit"}),
    ("from triton import jit\n@jit\ndef k(x):\n    pass\n", {"jit"}),
    ("import triton\n@triton.jit(do_not_specialize=['n'])\ndef k(x, n):\n    pass\n", {"jit"}),
    ("from triton.experimental import gluon\n@gluon.jit\ndef k(x):\n    pass\n", {"jit"}),
    ("def corpus_kernels():\n    return {}\n", {"corpus"}),
    ("BWTRITON_SPECS: dict = {}\n", {"specs"}),
    ("def f():\n    BWTRITON_SPECS = {}\n", set()),  # a local, not the module's
    ("import torch\n@torch.jit.script\ndef f(x):\n    return x\n", set()),
    ("def broken(:\n", set()),
], ids=["kernel", "helper", "jit-only", "bare-jit", "jit-call", "gluon", "corpus", "annotated-specs", "local-specs",
        "torch-jit", "syntax-error"])
def test_kernel_file_contents_by_parsing(source, found):
    assert loading.kernel_file_contents(source) == found


def test_snapshot_and_compile_share_one_loader(tmp_path):
    from bwtriton.regress import snapshot
    assert snapshot.import_kernel_file is loading.import_kernel_file
    path = tmp_path / "k.py"
    path.write_text(KERNEL)
    first = loading.import_kernel_file(path)
    assert loading.import_kernel_file(path) is first  # one module per unchanged file (workers, configs)
    path.write_text(KERNEL.replace("BLOCK: tl.constexpr", "BLOCK: tl.constexpr = 64") + "\n")
    assert loading.import_kernel_file(path) is not first  # an edited file is imported afresh


def test_a_spec_key_no_compile_reads_is_an_error(tmp_path, capsys):
    path = tmp_path / "k.py"
    path.write_text(KERNEL.replace('"constexprs": {"BLOCK": 128}', '"constexprs": {"BLOCK": 128}, "num_warp": 8'))
    assert main(["snapshot", str(path), "-o", str(tmp_path / "s.json"), "-q", "--no-cache"]) == 1
    err = capsys.readouterr().err
    assert "unknown key(s) 'num_warp'" in err and "num_warps" in err
    with pytest.raises(InputError, match="importing it failed: ZeroDivisionError"):
        bad = tmp_path / "bad.py"
        bad.write_text("x = 1 / 0\n")
        loading.import_kernel_file(bad)
