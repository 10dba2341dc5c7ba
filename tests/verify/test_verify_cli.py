"""`bwtriton check` (exit codes, --json, --explain) and the `verify-tcgen05` compile pass."""
from __future__ import annotations

import json

import pytest

from bwtriton.cli import main
from bwtriton.errors import CompileError
from fixtures.kernels import bad_kernels, corpus_ptx


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("ptx")
    good = d / "good.ptx"
    good.write_text(corpus_ptx("dot_bf16"))
    trap = d / "trap.ptx"
    trap.write_text(bad_kernels()["tmem_overflow_trap"]())
    junk = d / "junk.ptx"
    junk.write_text("this is not ptx\n")
    two = d / "two.ptx"
    two.write_text(corpus_ptx("gluon_two_ctas"))
    return {"good": good, "trap": trap, "junk": junk, "two": two, "missing": d / "nope.ptx"}


def test_exit_codes(files, capsys):
    assert main(["check", str(files["good"])]) == 0
    assert "0 error(s), 0 warning(s)" in capsys.readouterr().out
    assert main(["check", str(files["trap"])]) == 1
    out = capsys.readouterr().out
    assert "error: [trap-only-body/T1]" in out and str(files["trap"]) in out
    assert main(["check", str(files["junk"])]) == 1
    assert "not PTX" in capsys.readouterr().err
    assert main(["check", str(files["missing"])]) == 1


def test_json(files, capsys):
    assert main(["check", "--json", str(files["trap"])]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["counts"]["error"] == 1
    (f,) = [x for x in doc["findings"] if x["severity"] == "error"]
    assert f["check"] == "trap-only-body" and isinstance(f["line"], int)


def test_explain_matches_kernel_parameters(files, capsys):
    """dot_bf16 is compiled with BM=BN=128 from bf16 pointers: the decoded descriptors must say so."""
    assert main(["check", "--explain", "--json", str(files["good"])]) == 0
    doc = json.loads(capsys.readouterr().out)
    mmas = doc["mmas"]
    assert mmas and all(m["kind"] == "f16" and m["cta_group"] == 1 for m in mmas)
    d = mmas[0]["idesc"]
    assert (d["M"], d["N"], d["K"], d["a_type"], d["b_type"], d["d_type"]) == (128, 128, 16, "bf16", "bf16", "f32")
    assert mmas[0]["a_desc"]["swizzle"] == "128B"
    assert mmas[0]["d_tmem"]["column"] == 0 and mmas[0]["d_tmem"]["columns"] == 128


def test_explain_text_two_ctas(files, capsys):
    assert main(["check", "--explain", str(files["two"])]) == 0
    out = capsys.readouterr().out
    # the Gluon 2-CTA kernel is M=N=256 for the pair (two_ctas=True, block 128x256 per CTA)
    assert "cta_group::2 kind::f16" in out and "M=256 N=256" in out


def test_pass_reports_and_fails():
    from bwtriton import get_target
    from bwtriton.passes import get_pass
    from bwtriton.passes.base import PassContext
    cls = get_pass("verify-tcgen05")
    assert cls().applies_to(get_target("sm_100a")) and not cls().applies_to(get_target("sm_90a"))
    p = cls()
    ctx = PassContext("verify-tcgen05", get_target("sm_100a"), cls.option_defaults())
    assert p.run(corpus_ptx("ws_tma_matmul"), ctx) is None
    assert ctx.report["counts"]["error"] == 0 and ctx.report["findings"] == []
    ctx = PassContext("verify-tcgen05", get_target("sm_100a"), cls.option_defaults())
    with pytest.raises(CompileError) as ei:
        p.run(bad_kernels()["tmem_overflow_trap"](), ctx)
    assert ei.value.pass_name == "verify-tcgen05"
    assert ei.value.findings[0]["check"] == "trap-only-body"


def test_pass_runs_by_default_in_compile():
    import bwtriton
    from bwtriton.examples.matmul import matmul_constexprs, matmul_kernel, matmul_signature
    res = bwtriton.compile(matmul_kernel, signature=matmul_signature("fp16"), constexprs=matmul_constexprs())
    rep = res.reports["verify-tcgen05"]
    assert rep["counts"]["error"] == 0 and rep["counts"]["warning"] == 0


def test_unknown_target_is_an_error_listing_the_valid_ones(tmp_path, capsys):
    f = tmp_path / "k.ptx"
    f.write_text(corpus_ptx("gluon_one_mma"))
    assert main(["check", "--target", "sm_99z", str(f)]) == 2
    err = capsys.readouterr().err
    assert "unknown target 'sm_99z'" in err and "sm_100a" in err and "Traceback" not in err


def test_split_input_file_keeps_file_line_numbers(tmp_path, capsys):
    body = ".version 8.8\n.target sm_100a\n.visible .entry {n}()\n{{\n\ttrap;\n}}\n"
    f = tmp_path / "two.ptx"
    f.write_text(body.format(n="a") + "// -----\n" + body.format(n="b"))
    assert main(["check", "--split-input-file", str(f)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "// ----- case 1: a" and any(l.startswith("// ----- case 2: b") for l in out)
    lines = [int(l.split(":")[1]) for l in out if "trap-only-body" in l]
    assert lines == [5, 12]   # the trap lines of each chunk, counted in the whole file
