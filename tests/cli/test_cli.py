"""The `bwtriton` command line: outputs and short, actionable error messages (exit 1, no traceback)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from bwtriton.cli import main

KERNELS = Path(__file__).resolve().parents[2] / "python" / "bwtriton" / "examples"
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
    assert err.startswith(f"bwtriton {argv[0]}: error: ")


@pytest.mark.parametrize("command", [["compile", MATMUL], ["opt", "{tmp}/k.ttgir", "--passes", "cse"], ["demo"]])
def test_unknown_target_is_an_error_listing_the_valid_ones(capsys, tmp_path, command):
    (tmp_path / "k.ttgir").write_text("module {\n}\n")
    rc, out, err = run(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in command], "--target", "sm_101")
    # compile/demo validate through argparse (exit 2); opt parses triton-opt's command line itself (exit 1)
    assert rc in (1, 2) and "unknown target 'sm_101'" in err and "Traceback" not in err
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


def _demo_blocks(out: str) -> dict[str, dict[str, str]]:
    """The demo's output as {kernel: {field: text}} (a block is a name line, then indented field lines)."""
    blocks: dict[str, dict[str, str]] = {}
    current = None
    for line in out.splitlines():
        if line and not line.startswith(" "):
            current = blocks.setdefault(line.strip(), {})
        elif line.startswith("  ") and line[2] != " " and current is not None:
            key, _, text = line.strip().partition(" ")
            current[key] = text.strip()
        elif line.strip() and current is not None:  # a wrapped continuation line
            current[key] += " " + line.strip()
    return blocks


@pytest.fixture(scope="module")
def demo_output():
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["demo", "--no-gpu"])
    return rc, buf.getvalue()


def test_demo_fits_100_columns_with_a_legend_and_spaced_counts(demo_output):
    rc, out = demo_output
    assert rc == 0 and max(len(line) for line in out.splitlines()) <= 100
    blocks = _demo_blocks(out)
    assert set(blocks["legend:"]) == {"tcgen05", "mma", "tmem", "sass", "verifier"}
    bf16 = blocks["tl.dot bf16"]
    assert set(bf16) == set(blocks["legend:"])
    assert re.search(r"\bmma 8\b", bf16["tcgen05"]) and "mmax8" not in out and "x1 " not in out
    assert "UTCHMMA 8" in bf16["sass"] and "kind f16" in bf16["mma"] and bf16["tmem"] == "128 columns"
    nvfp4 = blocks["tl.dot_scaled nvfp4"]
    assert "kind mxf4nvf4" in nvfp4["mma"] and "scale_vec 4X" in nvfp4["mma"] and "UTCOMMA.4X 2" in nvfp4["sass"]
    assert "kind mxf4," in blocks["tl.dot_scaled mxfp4"]["mma"]


def test_demo_shows_the_two_cta_block(demo_output):
    two = _demo_blocks(demo_output[1])["tl.dot fp16 two_cta"]
    assert "MxNxK 256x128x16" in two["mma"] and "cta_group 2" in two["mma"] and "UTCHMMA.2CTA 8" in two["sass"]


def test_console_entry_point_and_module_agree():
    proc = subprocess.run([sys.executable, "-m", "bwtriton", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("bwtriton ")


def test_tmem_report_and_map(capsys, tmp_path):
    svg = tmp_path / "map.svg"
    rc, out, err = run(capsys, "compile", MATMUL, "--report", "tmem", "--tmem-map", str(svg))
    assert rc == 0, err
    assert "== plan-tmem" in out and "128" in out
    text = svg.read_text()
    assert text.lstrip().startswith("<svg") or "<svg" in text[:200]
    rc, out, err = run(capsys, "compile", MATMUL, "--target", "sm_90a", "--tmem-map", str(svg))
    assert rc == 1 and "no TMEM plan" in err
