"""The benchmark harness's bookkeeping on CPU (GPU timing replaced by a fake): rotation over input copies, ratios,
the copy-bandwidth column, targets, the markdown/JSON outputs, and that a failing row does not stop the run."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def harness(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    for mod in ("_harness", "_timing"):
        sys.modules.pop(mod, None)
    import _harness
    import _timing
    calls = []

    def fake_graph_ms(fns, target_ms=20.0, replays=5):
        for fn in fns:
            calls.append(fn())
        # "ours" returns 'o', the peer 'p': ours takes 2 us, the peer 5 us
        return (0.002 if calls[-1][0] == "o" else 0.005), "graph"

    monkeypatch.setattr(_timing, "graph_ms", fake_graph_ms)
    monkeypatch.setattr(_harness, "CASES", [])
    return _harness, calls


def test_rotation_ratio_copy_fraction_and_outputs(harness, tmp_path):
    h, calls = harness
    states = [{"i": 0}, {"i": 1}, {"i": 2}]
    h.register_case("decode toy", lambda s: ("o", s["i"]), lambda s: ("p", s["i"]), work=3000e3, unit="GB/s",
                    peer_name="peer", group="decode", setup=lambda: states, target_ratio=3.0, bw_target=0.85)
    h.register_case("broken", lambda: 1 / 0, None, work=1.0, group="decode")
    results = h.run_all(tmp_path, name="b", rounds=1, copy_gbs=2000.0, preamble="pre", extra=lambda: {"k": 1})
    ok, broken = results
    assert {c[1] for c in calls if c[0] == "o"} == {0, 1, 2}  # every copy was timed
    assert ok.ms_ours == 0.002 and ok.ms_peer == 0.005
    assert ok.rate_ours == pytest.approx(1500.0) and ok.ratio == pytest.approx(2.5)
    assert broken.error.startswith("ZeroDivisionError")
    md = (tmp_path / "b.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| decode toy"))
    assert ">=3 MISS" in row and "75% (>=85% MISS)" in row and "| 2.0 | 5.0 |" in row
    assert "| broken | TFLOP/s | ERROR" in md and md.index("pre") < md.index("### decode")
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["k"] == 1 and data["copy_gbs"] == 2000.0
    assert data["results"][0]["ratio"] == pytest.approx(2.5) and data["results"][0]["copies"] == 3
    assert data["results"][1]["error"] and (tmp_path / "b_errors.txt").exists()


def test_target_met_reads_ok(harness, tmp_path):
    h, _ = harness
    h.register_case("fast", lambda: ("o",), lambda: ("p",), work=1e9, target_ratio=2.0)
    h.run_all(tmp_path, name="c", rounds=1)
    assert ">=2 ok" in (tmp_path / "c.md").read_text()


def test_run_all_without_gpu_says_so(monkeypatch, capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU path")
    monkeypatch.syspath_prepend(str(BENCH))
    sys.modules.pop("run_all", None)
    import run_all
    assert run_all.main(["--out", "/nonexistent"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_streaming_read_kernel_reads_every_word_under_the_interpreter():
    """The byte floor is only a floor if the read kernel touches every word, the masked tail included."""
    import os
    import subprocess
    code = (
        "import functools, operator, torch\n"
        "from _timing import streaming_read_kernel\n"
        "torch.manual_seed(0)\n"
        "n = 2 * 1024 * 4 + 37\n"
        "src = torch.randint(0, 1 << 30, (n,), dtype=torch.int32)\n"
        "dst = torch.zeros(4, dtype=torch.int32)\n"
        "streaming_read_kernel[(3,)](src, dst, n, BLOCK=1024, ITERS=4)\n"
        "got = functools.reduce(operator.xor, dst[:3].tolist())\n"
        "want = functools.reduce(operator.xor, src.tolist())\n"
        "print('ok' if got == want and int(dst[3]) == 0 else f'bad {got} {want}')\n")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(
        [str(BENCH), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert res.stdout.strip().endswith("ok"), res.stdout + res.stderr


def test_byte_floor_table_and_no_gpu_message(monkeypatch, capsys, tmp_path):
    monkeypatch.syspath_prepend(str(BENCH))
    sys.modules.pop("byte_floor", None)
    import byte_floor
    row = {"n": 4096, "k": 4096, "bytes": 9437184, "read_us": 3.96, "read_GBs": 2383.0, "cublas_us": 13.5,
           "floor_ratio": 13.5 / 3.96}
    table = byte_floor.markdown([row], 0.86)
    assert "| 4096x4096 | 9.4 | 3.96 | 2383 | 13.50 | 3.41x |" in table and "0.86 us" in table
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the no-GPU path, on any machine
    assert byte_floor.main(["--out", str(tmp_path / "out")]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing written before the error


_ABLATION_SASS = """
import json, re, sys
sys.path[:0] = [{bench!r}, {tests!r}, {kernels!r}]
import gluon_ablation
gluon_ablation.apply({variant!r})
import test_kernels_gluon_mixed as t
sass = t._compile(64, 128, 64, 4, True, 4).asm["sass"]
print(json.dumps({{op: len(re.findall(r"\\b" + op + r"\\b", sass)) for op in ("HGMMA", "PRMT", "LDGSTS", "ATOMG")}}))
"""


def _ablation_counts(variant: str) -> dict:
    """sm_90a instruction counts of the 64x128x64 split s4 kernel under an ablation variant (a fresh process:
    the variant replaces module functions before the first compile)."""
    import subprocess
    tests = Path(__file__).resolve().parents[1]
    code = _ABLATION_SASS.format(bench=str(BENCH), tests=str(tests), kernels=str(tests / "kernels"), variant=variant)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_gluon_ablation_variants_take_out_what_they_name():
    """Each part removes its instructions from the compiled kernel and leaves the others: the decode's PRMTs, the
    wgmmas (HGMMA), the x^T cp.asyncs (LDGSTS: 16 per step, the weight's 8 - 10), the split-K arrival (ATOMG)."""
    full = _ablation_counts("full")
    assert full["HGMMA"] and full["PRMT"] > 60 and full["ATOMG"] == 1
    no_decode = _ablation_counts("nodecode")
    assert no_decode["PRMT"] < full["PRMT"] / 2 and no_decode["HGMMA"] == full["HGMMA"]
    memory = _ablation_counts("nodecode+nomma")
    assert memory["HGMMA"] == 0 and memory["LDGSTS"] == full["LDGSTS"] and memory["ATOMG"] == 1
    bare = _ablation_counts("nodecode+nomma+nosum+nox")
    assert bare["ATOMG"] == 0 and 0 < bare["LDGSTS"] < full["LDGSTS"] / 2


def test_gluon_ablation_refuses_unknown_parts_and_runs_only_on_a_gpu(monkeypatch, capsys, tmp_path):
    monkeypatch.syspath_prepend(str(BENCH))
    sys.modules.pop("gluon_ablation", None)
    import gluon_ablation
    assert gluon_ablation.main(["--out", str(tmp_path / "a"), "--variants", "full,nodecode+fast"]) == 2
    assert "unknown ablation parts ['fast'] in 'nodecode+fast'" in capsys.readouterr().err
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gluon_ablation.main(["--out", str(tmp_path / "b")]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    rows = [{"variant": v, "m": 64, "n": 4096, "k": 4096, "config": "c", "us": t, "cublas_us": 11.8}
            for v, t in (("full", 13.46), ("nosum", 10.67))]
    assert "| 64, 4096 | c | 11.80 | 13.46 | 10.67 | - |" in gluon_ablation.markdown(rows, ["full", "nosum", "nox"])
