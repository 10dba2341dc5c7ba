"""tools/third_party.py: a fast sample of the third-party corpus (liger-kernel, fla-core, gemlite) run unmodified on
the emulated B200, kernels recorded, verified and judged; plus the tool's table and usage errors. Library cases skip
cleanly when the `thirdparty` extra is not installed."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

import bwtriton.emu as emu

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import third_party as tp  # noqa: E402

pytestmark = pytest.mark.emulated


def _needs(library: str) -> None:
    module, requirement = tp.LIBRARIES[library]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{requirement} not installed (pip install -e .[thirdparty])")


@pytest.mark.parametrize("library", sorted(tp.LIBRARIES))
def test_sample_cases_run_clean_on_the_emulated_b200(library):
    _needs(library)
    cases = tp.select_cases([library], None, sample=True)
    assert cases, f"no sample case for {library}"
    results, kernels = tp.run_emulated(cases, log=lambda line: None)
    assert [r.name for r in results if not r.passed] == [], [r.message for r in results]
    assert kernels and all(k.library == library for k in kernels)
    for k in kernels:
        assert k.compiled and k.launches >= 1 and ".entry" in k.ptx and k.name in k.ptx
        assert k.verifier_errors == 0 and not k.emulator_error and k.numerics_pass, k
        assert k.disagreement == ""
    if library == "gemlite":  # the sample includes a tile large enough for tcgen05.mma
        assert any(k.tcgen05 for k in kernels), [k.name for k in kernels]


def _record(**kw) -> tp.KernelRecord:
    base = dict(library="lib", name="k", hash="0" * 32, specialisation="", cases=["c"], numerics_pass=True)
    return tp.KernelRecord(**{**base, **kw})


def test_disagreements_are_named_both_ways():
    assert tp.disagreement(_record()) == ""
    verifier_only = _record(verifier_errors=1, verifier_first="line 3: [P4/x] missing wait")
    assert "does not reproduce" in tp.disagreement(verifier_only) and "P4" in tp.disagreement(verifier_only)
    emulator_only = _record(emulator_error="TmemRaceError: ...", protocol_failure=True, numerics_pass=False)
    assert "verifier is silent" in tp.disagreement(emulator_only)
    both = _record(verifier_errors=2, emulator_error="TmemRaceError: ...", protocol_failure=True,
                   numerics_pass=False)
    assert tp.disagreement(both) == ""  # the tools agree that the kernel is wrong
    gap = _record(emulator_error="UnsupportedInstructionError: x", numerics_pass=False)
    assert tp.disagreement(gap) == ""  # an emulator coverage gap is not a protocol finding


def test_table_counts_per_library_and_marks_failures(tmp_path):
    kernels = [_record(name="good"), _record(name="bad", verifier_errors=1, numerics_pass=False, tcgen05=True,
                                             emulator_error="DeadlockError: stuck", protocol_failure=True)]
    results = [tp.CaseResult("lib", "c", False, 1.0, "y: 3/4 outside", ["lib:good", "lib:bad"])]
    table = tp.render_table(results, kernels, [{"library": "lib", "case": "c", "equal": True, "plain_pass": True,
                                                "bwtriton_pass": True}])
    assert "| lib | 2 | 1 | 2 | 1 | 1 | 1 (50%) | 0 | 1 / 1 / 1 |" in table
    assert "| lib | `bad` | c | yes | yes | 1 / 0 | **no** | yes | DeadlockError: stuck |" in table
    assert "`lib:c`: y: 3/4 outside" in table
    only_ours = tp.render_table(results, kernels, [{"library": "lib", "case": "c", "equal": False,
                                                    "plain_pass": False, "bwtriton_pass": True}])
    assert "| lib | 2 | 1 | 2 | 1 | 1 | 1 (50%) | 0 | 0 / 0 / 1 |" in only_ours
    assert "| **no** | plain fails, bwtriton passes |" in only_ours
    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{tp.BEGIN}\nold\n{tp.END}\noutro\n")
    tp.write_docs(doc, table)
    text = doc.read_text()
    assert text.startswith("intro\n") and text.endswith("outro\n") and "old" not in text and "`bad`" in text


def test_usage_errors_are_short_and_name_the_fix(capsys, tmp_path):
    assert tp.main(["run", "--library", "nosuchlib"]) == 2
    assert "unknown library 'nosuchlib'" in capsys.readouterr().err
    assert tp.main(["run", "--case", "nosuchcase"]) == 2
    assert "third_party.py list" in capsys.readouterr().err
    assert tp.main(["table", "--emulated", str(tmp_path / "missing.json")]) == 2
    assert "run --out DIR" in capsys.readouterr().err
    (tmp_path / "doc.md").write_text("no markers\n")
    with pytest.raises(tp.UsageError, match="generated block"):
        tp.write_docs(tmp_path / "doc.md", "x")
    assert (tmp_path / "doc.md").read_text() == "no markers\n"  # nothing written before the error


def test_a_failing_case_blames_the_kernel_that_broke_it():
    helper, broken = _record(name="pack", numerics_pass=None), _record(name="mma", numerics_pass=None,
                                                                        emulator_error="Unsupported...")
    tp.judge_case(False, [helper, broken])
    assert broken.numerics_pass is False and helper.numerics_pass is None  # the helper was not judged
    tp.judge_case(True, [helper])
    assert helper.numerics_pass is True
    wrong = _record(name="gemm", numerics_pass=True)
    tp.judge_case(False, [helper, wrong])  # no culprit: every kernel of the case is suspect
    assert helper.numerics_pass is False and wrong.numerics_pass is False


def test_gpu_mode_compares_plain_and_bwtriton_runs_case_by_case():
    """`--gpu`'s comparison, exercised on the emulated B200 (which answers torch.cuda.is_available() like a GPU):
    both runs pass, their outputs are bitwise equal, the launched kernel is named, one summary line per library."""
    _needs("liger")
    cases = tp.select_cases(["liger"], ["swiglu"], sample=False)
    with emu.emulated_gpu("sm_100a"):
        rows = tp.run_gpu(cases, log=lambda line: None)
    assert len(rows) == 1 and rows[0]["plain_pass"] and rows[0]["bwtriton_pass"] and rows[0]["equal"]
    assert rows[0]["plain_deterministic"] and rows[0]["within_spread"]
    assert rows[0]["kernels"] == ["_swiglu_forward_kernel"]
    assert tp.gpu_summary("liger", rows) == ("liger: 1 cases on the GPU, plain Triton 1 pass, bwtriton.enable() 1 "
                                             "pass, 1 bitwise equal, 0 within plain Triton's own run-to-run spread")


def test_run_to_run_spread_of_atomics_is_not_a_difference():
    def out(*values: float) -> list:
        return [tp.Check("y", torch.tensor(values), None, 0, 0)]
    plain, again = out(1.0, 2.0), out(1.0, 2.5)  # two plain runs differ by 0.5 (atomics' order)
    assert not tp.same_outputs(plain, again)
    assert tp.within_spread(plain, again, out(1.0, 2.75)) and not tp.within_spread(plain, again, out(1.0, 4.0))


def test_outputs_that_differ_from_the_same_ptx_are_a_run_to_run_difference():
    """Two plain runs of an atomic-add kernel can agree by chance; bwtriton's run of the byte-identical PTX
    that then differs is not a disagreement. With different PTX the same outputs are one."""
    c = tp.Case("gemlite", "gemv_atomics", lambda: [])
    plain, ours = [tp.Check("y", torch.tensor([1.0, 2.0]), None, 0, 0)], [tp.Check("y", torch.tensor([1.0, 2.5]),
                                                                                 None, 0, 0)]
    same = tp.gpu_row(c, (True, "", plain), plain, (True, "", ours), ["k"], 0.0, same_ptx=True)
    assert same["plain_deterministic"] and not same["equal"] and same["within_spread"]
    assert tp._verdict(same) == "same PTX as plain Triton, run-to-run difference"
    other = tp.gpu_row(c, (True, "", plain), plain, (True, "", ours), ["k"], 0.0, same_ptx=False)
    assert not other["within_spread"] and tp._verdict(other) == "DIFFERENT"
    failed = tp.gpu_row(c, (True, "", plain), plain, (False, "boom", []), ["k"], 0.0, same_ptx=True)
    assert not failed["within_spread"]


def test_launch_log_hashes_each_distinct_ptx_of_a_kernel():
    """`launched_kernels` keeps per kernel the sha256 of every PTX it ran (two specialisations: two hashes; the
    same launch again: no new one), which is what `same_ptx` compares."""
    import hashlib

    import triton
    import triton.language as tl

    @triton.jit
    def fill(out_ptr, VALUE: tl.constexpr):
        tl.store(out_ptr + tl.arange(0, 16), tl.full([16], VALUE, tl.float32))

    with emu.emulated_gpu("sm_100a"), tp.launched_kernels() as launched:
        out = torch.empty(16, device="cuda")
        compiled = [fill[(1,)](out, VALUE=v) for v in (1.0, 1.0, 2.0)]
    assert launched.names == ["fill"] and out.cpu().eq(2.0).all()
    want = sorted({hashlib.sha256(k.asm["ptx"].encode()).hexdigest() for k in compiled})
    assert len(want) == 2 and launched.code() == {"fill": want}
    assert tp.same_code(launched.code(), {"fill": list(want)}) and not tp.same_code({}, {})
    assert not tp.same_code(launched.take_code(), {"fill": want[:1]}) and launched.code() == {}


def test_parallel_gpu_mode_survives_a_plain_triton_abort(tmp_path, monkeypatch):
    """`--gpu --jobs`: each (case, mode) is a process of its own; a plain run whose process died is a failed
    plain run with its exit status, the bwtriton run of the same case still counts, rows keep case order."""
    cases = tp.select_cases(["liger"], ["rms_norm", "swiglu"], sample=False)
    y = [("y", torch.tensor([1.0, 2.0]))]

    def worker(c, mode, folder, timeout_s, all_configs):
        assert folder == tmp_path / "gpu_outputs" and not all_configs
        if c.name == "swiglu" and mode == "plain":
            return {"ok": False, "msg": "process exited with status -6: LLVM ERROR", "checks": [], "again": [],
                    "kernels": []}
        return {"ok": True, "msg": "", "checks": y, "again": y if mode == "plain" else [], "kernels": [c.name]}

    monkeypatch.setattr(tp, "_worker_result", worker)
    monkeypatch.setattr(tp, "_need_cuda", lambda: None)
    rows = tp.run_gpu_parallel(cases, 2, tmp_path, log=lambda line: None)
    assert [r["case"] for r in rows] == ["rms_norm", "swiglu"]
    assert rows[0]["plain_pass"] and rows[0]["bwtriton_pass"] and rows[0]["equal"]
    assert not rows[1]["plain_pass"] and "status -6" in rows[1]["plain_message"] and rows[1]["bwtriton_pass"]
    assert not rows[1]["equal"] and rows[1]["kernels"] == ["swiglu"]
    assert (tmp_path / "gpu.json").exists()
    assert tp.main(["run", "--gpu", "--jobs", "4", "--case", "liger:rms_norm"]) == 2  # --jobs needs --out
