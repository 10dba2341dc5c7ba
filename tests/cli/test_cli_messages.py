"""The messages that used to say the wrong thing: each now names what happened (the count, the type, the dtype
of the argument, the import error), from the CLI and from the Python API alike."""
from __future__ import annotations

import textwrap

import pytest
import torch

import bwtriton
import bwtriton.emu as emu
from bwtriton.cli import main
from bwtriton.errors import CompileError, InputError

ADD_ONE = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


    BWTRITON_SPECS = {"add_one": {"signature": {"x_ptr": "*fp32", "n": "i32"}, "constexprs": {"BLOCK": 128}}}
''')
SIG = {"x_ptr": "*fp32", "n": "i32"}


@pytest.fixture(scope="module")
def kernel_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("kernels") / "add_one.py"
    path.write_text(ADD_ONE)
    return path


@pytest.fixture(scope="module")
def add_one(kernel_file):
    from bwtriton.loading import load_kernel
    return load_kernel(f"{kernel_file}:add_one")[0]


@pytest.fixture(scope="module")
def compiled(add_one):
    return bwtriton.compile(add_one, signature=SIG, constexprs={"BLOCK": 128}, passes="none")


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("value,shown", [(42, "got int 42"), (None, "got NoneType None")])
def test_compile_of_something_that_is_no_kernel_says_what_it_got(value, shown):
    with pytest.raises(InputError, match=f"takes a @triton.jit or @gluon.jit function, or a .ttir/.ttgir file "
                                         f"path; {shown}"):
        bwtriton.compile(value, signature=SIG)


def test_a_string_constexpr_where_a_number_is_wanted_is_named_first(add_one):
    with pytest.raises(CompileError) as info:
        bwtriton.compile(add_one, signature=SIG, constexprs={"BLOCK": "abc"}, passes="none")
    first = str(info.value).splitlines()[0]
    assert first.startswith("constexpr BLOCK='abc' is a string and the kernel failed to compile with it (give a "
                            "number, e.g. BLOCK=128")


def test_run_with_one_argument_too_many_says_too_many(compiled):
    x = torch.zeros(128)
    with pytest.raises(InputError, match=r"too many kernel arguments: the kernel takes 2 parameter\(s\) .* 3 were "
                                         r"given; drop the last 1"):
        emu.run(compiled, 1, x, 128, 7)
    with pytest.raises(InputError, match=r"too few kernel arguments: .* 1 were given; next unbound parameter"):
        emu.run(compiled, 1, x)


def test_a_fault_from_a_tensor_of_another_dtype_names_the_argument_and_both_dtypes(compiled):
    # 128 fp16 elements are 256 bytes; the kernel compiled for *fp32 reads 512: a fault, which names its cause
    with pytest.raises(emu.MemoryFaultError, match=r"likely cause: argument 'x_ptr' was compiled as \*fp32 but "
                                                   r"got a float16 tensor \(\*fp16\); pass a fp32 tensor"):
        emu.run(compiled, 1, torch.zeros(128, dtype=torch.float16), 128)


def test_a_placeholder_tensor_of_another_dtype_is_no_error(compiled):
    x = torch.zeros(128)
    emu.run(compiled, 1, x, 0)  # n = 0: x_ptr is never dereferenced, as with an unused bias pointer
    emu.run(compiled, 1, torch.zeros(256, dtype=torch.float16), 0)
    assert x.eq(0).all()


def test_emulate_cli_notes_a_dtype_mismatch_that_did_not_fault(capsys, kernel_file):
    rc, out, err = _run(capsys, "emulate", f"{kernel_file}:add_one", "--arg", "zeros:fp16:256", "--arg", "128")
    assert rc == 0 and "bwtriton emulate: note: argument 'x_ptr' was compiled as *fp32 but got a float16" in err


@pytest.mark.emulated
def test_run_with_the_right_arguments_still_runs(compiled):
    x = torch.arange(128, dtype=torch.float32)
    emu.run(compiled, 1, x, 100)
    assert torch.equal(x[:100], torch.arange(100, dtype=torch.float32) + 1) and x[100:].eq(
        torch.arange(100, 128, dtype=torch.float32)).all()


def test_emulate_cli_with_too_many_arguments_says_too_many(capsys, kernel_file):
    rc, out, err = _run(capsys, "emulate", f"{kernel_file}:add_one", "--arg", "zeros:fp32:128", "--arg", "128",
                        "--arg", "5")
    assert rc == 1 and "bwtriton emulate: error: too many kernel arguments" in err and "drop the last 1" in err


def test_compile_of_a_folder_named_like_a_kernel_file_says_folder(capsys, tmp_path):
    (tmp_path / "dir.py").mkdir()
    rc, out, err = _run(capsys, "compile", f"{tmp_path / 'dir.py'}:kernel")
    assert rc == 1 and "dir.py is a folder, not a Python file" in err and "no such file" not in err


def test_snapshot_of_a_file_whose_import_fails_shows_the_import_error(capsys, tmp_path):
    bad = tmp_path / "raises.py"
    bad.write_text("import triton\nraise ImportError('no module named shiny')\n")
    rc, out, err = _run(capsys, "snapshot", bad, "-o", tmp_path / "s.json", "--no-cache")
    assert rc == 1 and "raises.py: importing it failed: ImportError: no module named shiny" in err
    assert "no kernels found" not in err and not (tmp_path / "s.json").exists()
