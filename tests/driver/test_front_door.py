"""What a newcomer sees is what runs: asm["ptx"] is the PTX the cubin is built from (and every consumer uses it),
divisibility is specialised for the shapes given, and resources over the target's limits fail the compile."""
from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest

import bwtriton
from bwtriton.cli import main
from bwtriton.errors import CompileError, InputError
from bwtriton.examples.matmul import matmul_constexprs, matmul_kernel, matmul_signature
from fixtures.tmem_kernels import MULTI_ACC_SIGNATURE, multi_acc_kernel

TWO_ACC = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, NUM_ACC=2)
KERNELS = Path(__file__).resolve().parents[2] / "python" / "bwtriton" / "examples"
MATMUL = f"{KERNELS / 'matmul.py'}:matmul_kernel"


@pytest.fixture(scope="module")
def two_acc():
    """The kernel whose PTX bwtriton's insert-tcgen05-wait-ld pass rewrites (Triton's text has the P9 hazard)."""
    return bwtriton.compile(multi_acc_kernel, signature=MULTI_ACC_SIGNATURE, constexprs=TWO_ACC, num_warps=4,
                            num_stages=2)


def _sass_of(ptx: str) -> str:
    """SASS of `ptx` assembled by Triton's bundled ptxas-blackwell with the flags Triton's make_cubin passes."""
    from triton.tools.disasm import get_sass

    from bwtriton.compat.ptxas import triton_ptxas_flags
    from bwtriton.regress.census import ptxas_path
    with tempfile.TemporaryDirectory() as tmp:
        src, obj = Path(tmp) / "k.ptx", Path(tmp) / "k.o"
        src.write_text(ptx)
        subprocess.run([ptxas_path(100), "-lineinfo", *triton_ptxas_flags(), "--gpu-name=sm_100a", str(src), "-o",
                        str(obj)], check=True, capture_output=True)
        return get_sass(obj.read_bytes())


def _opcodes(sass: str) -> list[str]:
    """The SASS instruction sequence by opcode (with modifiers), predicates and operands dropped."""
    return [m.group(2) for m in re.finditer(r"(?m)^\S*\t(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass)]


def test_the_cubin_is_assembled_from_asm_ptx(two_acc):
    """ptxas-blackwell is not deterministic in register numbering on this kernel (measured: 1 run in 3 renames
    a UR register), so the SASS is compared as its opcode sequence (1808 instructions here)."""
    assert two_acc.reports["insert-tcgen05-wait-ld"]["count"] >= 1  # the pass did change the PTX
    assert two_acc.asm["ptx"] != two_acc.asm["ptx_triton"]
    cubin = _opcodes(two_acc.asm["sass"])
    assert len(cubin) > 1000 and _opcodes(_sass_of(two_acc.asm["ptx"])) == cubin
    assert _opcodes(_sass_of(two_acc.asm["ptx_triton"])) != cubin  # the comparison can tell the two apart


def test_rewritten_stages_keep_tritons_text_under_a_name_that_says_so(two_acc):
    raw = two_acc.kernel.asm
    final_ptx = raw["bwptx"] if "bwptx" in raw else raw["ptx"]
    assert two_acc.asm["ptx"] == final_ptx
    assert two_acc.asm["ptx_triton"].count("tcgen05.wait::ld") < two_acc.asm["ptx"].count("tcgen05.wait::ld")
    stages = two_acc.stages
    assert stages[:7] == ["source", "ttir", "ttgir", "llir", "ptx", "cubin", "ttir_triton"]
    assert {"ttgir_triton", "ptx_triton"} <= set(stages) and not any(s.startswith("bw") for s in stages)


def test_the_final_ptx_verifies_clean_and_tritons_does_not(two_acc):
    from bwtriton.verify import verify_ptx
    assert verify_ptx(two_acc.asm["ptx"]).errors == []
    # Triton's own text is what the user saved and checked: there the verifier finds the P9 hazard
    assert verify_ptx(two_acc.asm["ptx_triton"]).findings


def test_cli_emit_out_and_check_use_the_final_ptx(two_acc, tmp_path, capsys):
    spec = tmp_path / "two_acc.py"
    spec.write_text("from test_front_door import MULTI_ACC_SIGNATURE, multi_acc_kernel  # one import to follow\n"
                    "BWTRITON_SPECS = {'multi_acc_kernel': {'signature': MULTI_ACC_SIGNATURE, 'num_stages': 2,\n"
                    "    'constexprs': dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, NUM_ACC=2)}}\n")
    assert main(["compile", f"{spec}:multi_acc_kernel", "--emit", "ptx"]) == 0
    assert capsys.readouterr().out.rstrip("\n") == two_acc.asm["ptx"].rstrip("\n")
    assert main(["compile", f"{spec}:multi_acc_kernel", "-o", str(tmp_path / "out"), "--stages", "ptx,ptx_triton"]) == 0
    written = capsys.readouterr().out
    final, triton_text = tmp_path / "out" / "multi_acc_kernel.ptx", tmp_path / "out" / "multi_acc_kernel.triton.ptx"
    assert final.read_text() == two_acc.asm["ptx"] and triton_text.read_text() == two_acc.asm["ptx_triton"]
    assert str(final) in written
    assert main(["check", str(final)]) == 0, capsys.readouterr().out


def test_emulate_and_emu_run_take_the_final_ptx(two_acc):
    from bwtriton.emu.integration.run import _unpack_compiled
    ptx, md, name = _unpack_compiled(two_acc)
    assert ptx == two_acc.asm["ptx"] and name == "multi_acc_kernel" and md["num_warps"] == 4


# --- divisibility ----------------------------------------------------------------------------------------------

def test_example_values_specialise_like_jit():
    sig, consts = matmul_signature("fp16"), matmul_constexprs()
    res = bwtriton.compile(matmul_kernel, signature=sig, constexprs=consts, passes="none",
                           example=dict(M=200, N=512, K=256, stride_am=256, stride_bk=512, stride_cm=512))
    assert res.specialisation.divisible == ("a_ptr", "b_ptr", "c_ptr", "N", "K", "stride_am", "stride_bk",
                                            "stride_cm")
    assert "M" not in res.summary()["divisible_by_16"] and "from the example values" in res.summary()["divisible_by_16"]
    assert res.asm["ttir"].count("tt.divisibility = 16") == 8  # M = 200 is not a multiple of 16
    default = bwtriton.compile(matmul_kernel, signature=sig, constexprs=consts, passes="none")
    assert default.asm["ttir"].count("tt.divisibility = 16") == 9 and "assumed" in default.summary()["divisible_by_16"]


def test_cli_example_and_divisible_flags_and_the_spec_key(tmp_path, capsys):
    assert main(["compile", MATMUL, "--passes", "none", "--example", "M=200,N=512,K=256", "--json"]) == 0
    import json
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["divisible_by_16"].startswith("a_ptr, b_ptr, c_ptr, N, K (from the example values)")
    assert main(["compile", MATMUL, "--passes", "none", "--divisible-by-16", "a_ptr,b_ptr", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["divisible_by_16"] == "a_ptr, b_ptr (as given)"
    spec = tmp_path / "k.py"
    spec.write_text("from bwtriton.examples.matmul import matmul_kernel, matmul_signature, matmul_constexprs\n"
                    "BWTRITON_SPECS = {'matmul_kernel': {'signature': matmul_signature('fp16'),\n"
                    "    'constexprs': matmul_constexprs(), 'divisible_by_16': ['a_ptr']}}\n")
    assert main(["compile", f"{spec}:matmul_kernel", "--passes", "none", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["divisible_by_16"] == "a_ptr (as given)"


MASKED = '''
import triton
import triton.language as tl

@triton.jit
def scale_rows(x_ptr, y_ptr, M, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)

BWTRITON_SPECS = {"scale_rows": {"signature": {"x_ptr": "*fp32", "y_ptr": "*fp32", "M": "i32"},
                                 "constexprs": {"BLOCK": 512}}}
'''


@pytest.mark.emulated
def test_emulate_specialises_for_its_arguments_so_a_masked_tail_is_exact(tmp_path, capsys):
    """M = 202: assuming M divisible by 16 lets Triton load 4 fp32 per mask bit (ld.global.v4: rows 200..203 read
    from a 202-row buffer, which the emulator faults on); specialised for the given M it is exact."""
    import numpy as np
    kernel = tmp_path / "masked.py"
    kernel.write_text(MASKED)
    x = np.arange(202, dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    args = ["emulate", f"{kernel}:scale_rows", "--arg", str(tmp_path / "x.npy"), "--arg", "zeros:fp32:202",
            "--arg", "202", "--save", f"1={tmp_path / 'y.npy'}"]
    assert main(args) == 0, capsys.readouterr().err
    assert np.array_equal(np.load(tmp_path / "y.npy"), 2 * x)
    # the old default (M assumed divisible) is still reachable explicitly, and it is what went wrong
    rc = main(args + ["--divisible-by-16", "x_ptr,y_ptr,M"])
    err = capsys.readouterr().err
    assert rc == 1 and "outside every launch buffer" in err and "ld.global.v4" in err and "Traceback" not in err


# --- resources -------------------------------------------------------------------------------------------------

def test_shared_memory_over_the_limit_is_a_compile_error_naming_the_knobs():
    with pytest.raises(CompileError, match=r"needs 245792 bytes of shared memory per CTA; sm_100a allows 232448 "
                                           r"\(227 KiB\)\. To fit, lower num_stages \(now 3\) or the BLOCK sizes "
                                           r"\(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64\)"):
        bwtriton.compile(multi_acc_kernel, signature=MULTI_ACC_SIGNATURE, constexprs=TWO_ACC, num_stages=3)


def test_tmem_over_the_limit_is_a_compile_error():
    three = dict(TWO_ACC, NUM_ACC=3)  # 3 x 256 fp32 columns; plan-tmem's fallback is off with passes="none"
    with pytest.raises(CompileError, match=r"allocates 768 TMEM columns per CTA; sm_100a has 512\. To fit, lower "
                                           r"num_stages \(now 2\) or the BLOCK sizes .*fewer accumulators"):
        bwtriton.compile(multi_acc_kernel, signature=MULTI_ACC_SIGNATURE, constexprs=three, num_warps=8,
                         num_stages=2, passes="none")
    kept = bwtriton.compile(multi_acc_kernel, signature=MULTI_ACC_SIGNATURE, constexprs=three, num_warps=8,
                            num_stages=2, passes="none", check_limits=False)
    assert kept.summary()["tmem_columns"] == 768


def test_cli_reports_the_limit_and_can_keep_the_kernel(tmp_path, capsys):
    spec = tmp_path / "three.py"
    spec.write_text("from test_front_door import MULTI_ACC_SIGNATURE, multi_acc_kernel\n"
                    "BWTRITON_SPECS = {'multi_acc_kernel': {'signature': MULTI_ACC_SIGNATURE, 'num_stages': 2,\n"
                    "    'num_warps': 8, 'constexprs': dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, NUM_ACC=3)}}\n")
    argv = ["compile", f"{spec}:multi_acc_kernel", "--passes", "none"]
    assert main(argv) == 1 and "allocates 768 TMEM columns per CTA; sm_100a has 512" in capsys.readouterr().err
    assert main(argv + ["--no-check-limits", "--json"]) == 0
    import json
    assert json.loads(capsys.readouterr().out)["summary"]["tmem_columns"] == 768


def test_limits_come_from_the_target():
    from bwtriton.targets import TARGETS
    assert TARGETS["sm_100a"].max_shared_bytes == 232448 and TARGETS["sm_100a"].tmem_columns == 512
    assert TARGETS["sm_120a"].max_shared_bytes == 101376 and TARGETS["sm_90a"].tmem_columns == 0
    sig, consts = matmul_signature("fp16"), matmul_constexprs(block_k=128)
    # 3 stages of 128x128 + 128x128 fp16 tiles (131072 bytes measured on sm_120a) fit sm_100a's 227 KiB and
    # sm_80's 163 KiB but not sm_120a's 99 KiB
    assert bwtriton.compile(matmul_kernel, signature=sig, constexprs=consts, num_stages=3, passes="none")
    assert bwtriton.compile(matmul_kernel, signature=sig, constexprs=consts, num_stages=3, passes="none",
                            target="sm_80")
    with pytest.raises(CompileError, match=r"needs 131072 bytes .* sm_120a allows 101376 \(99 KiB\)"):
        bwtriton.compile(matmul_kernel, signature=sig, constexprs=consts, num_stages=3, target="sm_120a",
                         passes="none")


# --- TMEM map ---------------------------------------------------------------------------------------------------

def test_tmem_map_labels_lanes_outside_the_frame_and_names_its_units(two_acc):
    import xml.etree.ElementTree as ET

    from bwtriton.tmem.render import render_svg
    root = ET.fromstring(render_svg(two_acc.reports["plan-tmem"]))
    ns = "{http://www.w3.org/2000/svg}"
    frame = next(r for r in root.iter(f"{ns}rect") if r.get("fill") == "#f7f7f7")
    left = float(frame.get("x"))
    texts = list(root.iter(f"{ns}text"))
    lane_labels = [t for t in texts if re.fullmatch(r"\d+-\d+", t.text or "")]
    assert [t.text for t in lane_labels] == ["0-31", "32-63", "64-95", "96-127"]
    # right-aligned at an x left of the frame: the label ends before the boxes begin
    assert all(t.get("text-anchor") == "end" and float(t.get("x")) < left for t in lane_labels)
    assert {"lanes", "columns (32-bit each)"} <= {t.text for t in texts}
    legend = [t.text for t in texts if t.text and re.match(r"acc\d+: ", t.text)]
    assert len(legend) == 2 and all(re.search(r"columns \[\d+, \d+\).*live over IR ops \[\d+, \d+\)", t)
                                    for t in legend)
