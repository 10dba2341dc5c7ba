"""The `bwtriton` command line: outputs and short, actionable error messages (exit 1, no traceback)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bwtriton.cli import main

KERNELS = Path(__file__).resolve().parent.parent / "python" / "bwtriton" / "examples"
MATMUL = f"{KERNELS / 'matmul.py'}:matmul_kernel"


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_compile_prints_summary_and_writes_stages(capsys, tmp_path):
    rc, out, err = run(capsys, "compile", MATMUL, "--passes", "none", "-o", str(tmp_path), "--stages", "ptx,sass")
    assert rc == 0, err
    assert "tmem_columns" in out and "128" in out and "sm_100a" in out
    assert (tmp_path / "matmul_kernel.ptx").read_text().count("tcgen05.mma") > 0
    assert "UTCHMMA" in (tmp_path / "matmul_kernel.sass").read_text()


def test_compile_json(capsys):
    import json
    rc, out, _ = run(capsys, "compile", MATMUL, "--passes", "none", "--json")
    data = json.loads(out)
    assert rc == 0 and data["summary"]["tmem_columns"] == 128 and data["summary"]["kernel"] == "matmul_kernel"


@pytest.mark.parametrize("argv,message", [
    (["compile", MATMUL, "--passes", "verfy-tcgen05"], "unknown pass 'verfy-tcgen05'"),
    (["compile", "nope.py:kernel"], "nope.py: no such file"),
    (["compile", f"{KERNELS / 'matmul.py'}:nokernel"], "has no kernel 'nokernel'; kernels there: matmul_kernel"),
    (["compile", "kernel.cu"], "expected FILE.py:KERNEL or a .ttir/.ttgir file"),
    (["compile", MATMUL, "--signature", "a_ptr"], "entries look like name=value"),
    (["compile", MATMUL, "--emit", "cubin"], "is binary; write it with --out"),
    (["opt", "missing.ttgir", "--passes", "cse"], "missing.ttgir: no such file"),
])
def test_errors_are_one_line_with_the_fix(capsys, argv, message):
    rc, out, err = run(capsys, *argv)
    assert rc == 1 and message in err and "Traceback" not in err
    assert err.startswith("bwtriton: error: ")


@pytest.mark.parametrize("command", [["compile", MATMUL], ["opt", "k.ttgir", "--passes", "cse"], ["demo"]])
def test_unknown_target_is_a_usage_error_listing_the_valid_ones(capsys, command):
    rc, out, err = run(capsys, *command, "--target", "sm_101")
    assert rc == 2 and "argument --target: unknown target 'sm_101'" in err and "Traceback" not in err
    assert "Valid targets: sm_100a, sm_103a, sm_120a, sm_90a, sm_80." in err


def test_passes_lists_registry_and_triton_passes(capsys):
    rc, out, _ = run(capsys, "passes", "--triton")
    assert rc == 0 and "pass" in out.splitlines()[0] and "stage" in out.splitlines()[0]
    assert "tritongpu-accelerate-matmul" in out and "triton-tensor-memory-allocation" in out


def test_opt_runs_triton_passes_by_mlir_name(capsys, tmp_path):
    rc, out, err = run(capsys, "compile", MATMUL, "--passes", "none", "-o", str(tmp_path), "--stages", "ttgir")
    assert rc == 0, err
    src = tmp_path / "matmul_kernel.ttgir"
    assert "ttg.tensor_memory_size" not in src.read_text()
    rc, out, err = run(capsys, "opt", str(src), "--passes", "triton-tensor-memory-allocation")
    assert rc == 0, err
    assert "ttg.tensor_memory_size = 128" in out
    rc, out, err = run(capsys, "opt", str(src), "--passes", "tritongpu-acelerate-matmul")
    assert rc == 1 and "Did you mean: tritongpu-accelerate-matmul" in err


def test_demo_without_gpu_prints_the_census_table(capsys):
    rc, out, _ = run(capsys, "demo", "--no-gpu")
    assert rc == 0
    rows = {line.split("  ")[0].strip(): line for line in out.splitlines() if line.startswith("tl.dot")}
    assert "f16" in rows["tl.dot bf16"] and "UTCHMMA" in rows["tl.dot bf16"]
    assert "mxf4nvf4" in rows["tl.dot_scaled nvfp4"] and "4X" in rows["tl.dot_scaled nvfp4"]
    assert "UTCOMMA.4X" in rows["tl.dot_scaled nvfp4"] and "mxf4 " in rows["tl.dot_scaled mxfp4"] + " "


def test_console_entry_point_and_module_agree():
    proc = subprocess.run([sys.executable, "-m", "bwtriton", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("bwtriton ")


def test_demo_shows_the_two_cta_row(capsys):
    rc, out, _ = run(capsys, "demo", "--no-gpu")
    row = next(line for line in out.splitlines() if line.startswith("tl.dot fp16 two_cta"))
    assert rc == 0 and "256x128x16" in row and "UTCHMMA.2CTA" in row and "  2  " in row


def test_tmem_report_and_map(capsys, tmp_path):
    svg = tmp_path / "map.svg"
    rc, out, err = run(capsys, "compile", MATMUL, "--report", "tmem", "--tmem-map", str(svg))
    assert rc == 0, err
    assert "== plan-tmem" in out and "128" in out
    text = svg.read_text()
    assert text.lstrip().startswith("<svg") or "<svg" in text[:200]
    rc, out, err = run(capsys, "compile", MATMUL, "--target", "sm_90a", "--tmem-map", str(svg))
    assert rc == 1 and "no TMEM plan" in err
