"""Issue 17's bad-input cases: each is a short error that says what is wrong, what is valid and how to fix it, and
no malformed command line of any subcommand reaches the user as a Python traceback."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import bwtriton
from bwtriton.cli import build_parser, main
from bwtriton.errors import InputError, UnknownStageError
from bwtriton.examples.matmul import matmul_constexprs, matmul_kernel, matmul_signature

REPO = Path(__file__).resolve().parents[2]
MATMUL = f"{REPO / 'python' / 'bwtriton' / 'examples' / 'matmul.py'}:matmul_kernel"
SIG, CONSTS = matmul_signature("fp16"), matmul_constexprs()


def _compile(**kw):
    return bwtriton.compile(matmul_kernel, **{"signature": SIG, "constexprs": CONSTS, "passes": "none", **kw})


@pytest.fixture(scope="module")
def compiled():
    return _compile()


# --- bwtriton.compile -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,message", [
    (dict(signature="*fp16,*fp16,*fp16,i32"), r"signature= maps argument names to Triton types, e\.g\. "
                                              r"\{'a_ptr': '\*fp16', 'M': 'i32'\}; got a str"),
    (dict(signature={**SIG, "a_ptr": "fp16*"}), r"argument 'a_ptr' has unknown type 'fp16\*'\. \(a pointer type puts "
                                                r"'\*' first: '\*fp16'\) Valid types look like '\*fp16'"),
    (dict(signature={**SIG, "M": "int32"}), r"argument 'M' has unknown type 'int32'\..*Valid types look like"),
    (dict(signature={**SIG, "M": 32}), r"the type of argument 'M' must be a string such as"),
    (dict(divisible_by_16=["nope"]), r"divisible_by_16 names 'nope', which is not a pointer or integer argument; "
                                     r"valid: a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm"),
    (dict(divisible_by_16="a_ptr"), r"divisible_by_16= takes a list of argument names, e\.g\. \['a_ptr', 'M'\]; "
                                    r"got 'a_ptr'"),
    (dict(example={"M": "200"}), r"example value of 'M' must be an integer, got '200'"),
    (dict(example={"a_ptr": 16}), r"example values are for the integer arguments: M, N, K, stride_am"),
    (dict(example={"M": 16}, divisible_by_16=[]), r"give divisible_by_16= or example=, not both"),
    (dict(cluster_launch=True), r"bwtriton.compile has no option 'cluster_launch'\..*Valid options: signature, "
                                r"constexprs, target, passes, divisible_by_16, example, two_cta, problem_shape, "
                                r"check_limits, clc, num_warps, .*maxnreg"),
    (dict(num_wraps=8), r"no option 'num_wraps'\. Did you mean: num_warps"),
    (dict(num_warps=6), r"num_warps must be a power of 2 \(1, 2, 4, 8, 16, 32\), got 6"),
    (dict(num_stages="3"), r"num_stages must be a non-negative integer, got '3'"),
    (dict(target=100), r"target must be a name such as 'sm_100a'"),
])
def test_compile_rejects_bad_input_by_name(kwargs, message):
    with pytest.raises(bwtriton.BwTritonError, match=message):
        _compile(**kwargs)


def test_valid_options_are_tritons_fields_plus_ours():
    import dataclasses

    from triton.backends.nvidia.compiler import CUDAOptions

    from bwtriton.driver import valid_option_names
    names = valid_option_names()
    assert {f.name for f in dataclasses.fields(CUDAOptions)} <= set(names) and "two_cta" in names
    assert _compile(maxnreg=128).asm["ptx"].count(".maxnreg 128") == 1  # a Triton field still reaches Triton


@pytest.mark.parametrize("text", ["", "\n  \n", "// only a comment\n"])
@pytest.mark.parametrize("suffix", [".ttir", ".ttgir"])
def test_an_empty_ir_file_is_an_error_before_tritons_parser(tmp_path, text, suffix):
    path = tmp_path / f"k{suffix}"
    path.write_text(text)
    with pytest.raises(InputError, match=rf"k\{suffix} is empty; write a {suffix[1:].upper()} module into it"):
        bwtriton.compile(path)


def test_an_empty_ttgir_on_the_command_line_does_not_crash_the_process(tmp_path):
    """Triton 3.6's MLIR parser segfaults (rc 139) on an empty file; the check runs in a child process so a
    regression shows up as a failed test, not a crashed test run."""
    path = tmp_path / "empty.ttgir"
    path.write_text("")
    proc = subprocess.run([sys.executable, "-m", "bwtriton", "compile", str(path)], capture_output=True, text=True,
                          timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(REPO / "python")})
    assert proc.returncode == 1 and "empty.ttgir is empty" in proc.stderr and "Traceback" not in proc.stderr


def test_a_ttir_file_takes_the_launch_numbers_a_ttgir_file_carries(compiled, tmp_path):
    """TTIR has no ttg.num-warps: Triton's TTIR->TTGIR conversion takes num_warps from the options, so it must
    reach Triton (it used to be dropped); a TTGIR module decides its own."""
    ttir = tmp_path / "mm.ttir"
    ttir.write_text(compiled.asm["ttir"])
    assert bwtriton.compile(ttir, num_warps=8, passes="none").summary()["num_warps"] == 8
    ttgir = tmp_path / "mm.ttgir"
    ttgir.write_text(compiled.asm["ttgir"])
    assert bwtriton.compile(ttgir, num_warps=8, passes="none").summary()["num_warps"] == 4  # ttg.num-warps = 4


def test_a_non_module_ir_file_is_an_error(tmp_path):
    path = tmp_path / "k.ttir"
    path.write_text("hello\n")
    with pytest.raises(InputError, match=r"holds no Triton module"):
        bwtriton.compile(path)


def test_unknown_stage_lists_the_available_ones(compiled):
    with pytest.raises(UnknownStageError, match=r"no stage 'foo'\. Available stages: source, ttir, ttgir, llir, "
                                                r"ptx, cubin, sass\."):
        compiled.asm["foo"]
    with pytest.raises(UnknownStageError, match=r"no stage 'ptxx'\. Did you mean: ptx"):
        compiled.asm["ptxx"]


def test_write_refuses_a_file_as_folder_and_unknown_stages_before_writing(compiled, tmp_path):
    existing = tmp_path / "out"
    existing.write_text("keep me")
    with pytest.raises(InputError, match=r"out is a file; -o/--out names a folder for the files it writes"):
        compiled.write(existing, ["ptx"])
    assert existing.read_text() == "keep me"
    with pytest.raises(UnknownStageError, match="no stage 'foo'"):
        compiled.write(tmp_path / "new", ["ptx", "foo"])
    assert not (tmp_path / "new").exists()


# --- the command line -----------------------------------------------------------------------------------------

def _run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("argv,message", [
    (["compile", MATMUL, "--constexpr", "BLOCK_M=abc"], "--constexpr BLOCK_M=abc: a constexpr value is an integer, "
                                                        "a float, True/False or a quoted string (e.g. BLOCK_M=128, or "
                                                        "BLOCK_M='abc' if the kernel takes a string)"),
    (["compile", MATMUL, "--signature", "a_ptr=fp16*"], "argument 'a_ptr' has unknown type 'fp16*'"),
    (["compile", MATMUL, "--emit", "foo"], "no stage 'foo'. Available stages: source, ttir, ttgir, llir, ptx, cubin, sass, ttir_triton"),
    (["compile", MATMUL, "--stages", "ptx,foo", "-o", "{tmp}/o"], "no stage 'foo'."),
    (["compile", MATMUL, "--stages", ",", "-o", "{tmp}/o"], "--stages takes comma-separated stage names"),
    (["compile", MATMUL, "-o", "{tmp}/afile"], "afile is a file; -o/--out names a folder"),
    (["compile", MATMUL, "--example", "M=two"], "--example M=two: the value must be an integer (e.g. M=256)"),
    (["compile", MATMUL, "--example", "a_ptr=16"], "example values are for the integer arguments"),
    (["compile", MATMUL, "--example", "M=16", "--divisible-by-16", "M"], "give --example"),
    (["compile", MATMUL, "--divisible-by-16", "nope"], "divisible_by_16 names 'nope'"),
    (["compile", MATMUL, "--num-warps", "6"], "num_warps must be a power of 2"),
    (["compile", MATMUL, "--tmem-map", "{tmp}/map.txt"], "map.txt: the file is written as .svg or .png"),
    (["compile", "{tmp}/bad.py:kernel"], "bad.py: importing it failed: NameError"),
    (["compile", "{tmp}/spec.py:k"], "BWTRITON_SPECS['k'] has unknown key(s) 'divisible_by16'. Did you mean: "
                                     "divisible_by_16?"),
    (["compile", "{tmp}/k.ttgir", "--signature", "a=*fp16"], "--signature: not for "),
    (["compile", "{tmp}/k.ttgir", "--num-warps", "8"], "its warps/CTAs (ttg.num-warps, ttg.num-ctas)"),
    (["emulate", MATMUL, "--arg", "randn:fp16:128by128"], "shape '128by128' should be sizes joined by 'x'"),
    (["emulate", MATMUL, "--arg", "{tmp}/missing.npy"], "missing.npy: no such file"),
    (["emulate", MATMUL, "--arg", "zeros:fp16:8x8", "--check", "9=0@1"], "--check 9=0@1: '9' is not the index of "
                                                                        "a tensor argument; tensor arguments are #0"),
    (["emulate", MATMUL, "--arg", "zeros:fp16:8x8", "--arg", "zeros:fp16:8x8", "--check", "0=0@1x"],
     "'1x' is not the index of a tensor argument"),
    (["emulate", MATMUL, "--arg", "zeros:fp16:8x8", "--save", "7={tmp}/y.npy"], "--save 7="),
    (["emulate", MATMUL, "--arg", "zeros:fp16:8x8", "--save", "0={tmp}/nofolder/y.npy"], "does not exist (create it first"),
    (["emulate", MATMUL, "--arg", "zeros:fp16:8x8", "--save", "0"], "--save takes I=FILE.npy"),
    (["emulate", "{tmp}/missing.ptx"], "missing.ptx: no such file (check the path"),
])
def test_cli_errors_name_the_problem(capsys, tmp_path, argv, message):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "bad.py").write_text("import triton\nundefined_name\n")
    (tmp_path / "spec.py").write_text("import triton\n@triton.jit\ndef k(x):\n    pass\n"
                                      "BWTRITON_SPECS = {'k': {'signature': {'x': '*fp32'}, 'divisible_by16': []}}\n")
    rc, out, err = _run(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert rc == 1 and err.startswith(f"bwtriton {argv[0]}: error: ") and message in err, err
    assert "Traceback" not in err and "internal error" not in err


@pytest.mark.parametrize("argv,message", [
    (["emulate", "k.ptx", "--grid", "a,b"], "argument --grid: 'a,b' is not a grid: give 1 to 3 positive integers"),
    (["emulate", "k.ptx", "--grid", "0"], "is not a grid"),
    (["check", "k.ptx", "--target", "sm_99z"], "argument --target: unknown target 'sm_99z'"),
])
def test_usage_errors_come_from_argparse(capsys, argv, message):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and message in err and "Traceback" not in err


def test_tmem_map_into_a_missing_folder_fails_before_compiling_and_creates_nothing(capsys, tmp_path):
    svg = tmp_path / "new" / "deeper" / "map.svg"
    rc, out, err = _run(capsys, "compile", MATMUL, "--tmem-map", str(svg))
    assert rc == 1 and f"folder {svg.parent} does not exist (create it first" in err, err
    assert not (tmp_path / "new").exists() and out == ""


def test_tmem_map_into_an_existing_folder_is_written(capsys, tmp_path):
    svg = tmp_path / "map.svg"
    rc, out, err = _run(capsys, "compile", MATMUL, "--tmem-map", str(svg))
    assert rc == 0, err
    assert svg.read_text().lstrip().startswith("<svg") and f"wrote TMEM map {svg}" in out


# --- every subcommand, malformed ------------------------------------------------------------------------------

def _subcommands() -> list[str]:
    import argparse
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(action.choices)


#: Malformed arguments worth trying on every subcommand (each is wrong for all of them).
GENERIC = [[], ["--no-such-flag"], ["/no/such/file.ttgir"], ["/no/such/file.py:kernel"], ["--target", "sm_99z"],
           ["--passes", "nope{x=1}"]]


def test_every_subcommand_is_walked():
    assert {"compile", "opt", "passes", "demo", "check", "emulate"} <= set(_subcommands())


@pytest.mark.parametrize("command", _subcommands())
@pytest.mark.parametrize("extra", GENERIC, ids=lambda e: " ".join(e) or "no-args")
def test_no_malformed_command_line_shows_a_traceback(capsys, monkeypatch, command, extra):
    if command == "demo" and extra in ([], ["--passes", "nope{x=1}"]):
        pytest.skip("`bwtriton demo` with no arguments is a valid command (it compiles every demo kernel)")
    import io
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # `opt` with no file reads stdin, as triton-opt does
    rc, out, err = _run(capsys, command, *extra)
    if rc == 0:  # valid for some subcommands: `passes` and `doctor` take no input, `opt` of an empty stdin is an
        # empty module
        assert extra == [] and command in ("passes", "opt", "doctor", "version"), (command, extra, out[-300:])
        return
    assert "error:" in err and "Traceback" not in err and "internal error" not in err, (command, extra, err)
