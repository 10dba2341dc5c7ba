"""Every snapshot mode compiles with the kernel's own specialisation (its spec's `example`), records it, and a diff
between snapshots of different specialisations says so first and fails."""
from __future__ import annotations

import json
import textwrap

from bwtriton.cli import main

# A masked row copy: with `stride` 16-byte divisible the loads vectorise, with the example's odd stride they
# cannot, so a snapshot that ignored the example would differ from one that honours it in the PTX census/SASS.
KERNEL = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def row_copy(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + offs, mask=offs < n)
        tl.store(y_ptr + row * stride + offs, x * 2, mask=offs < n)


    BWTRITON_SPECS = {"row_copy": {"signature": {"x_ptr": "*fp16", "y_ptr": "*fp16", "n": "i32", "stride": "i32"},
                                   "constexprs": {"BLOCK": 1024}%s}}
''')
KEY = "row_copy.py:row_copy[default]@sm_100a"


def _snapshot(capsys, out: str, *argv: str) -> dict:
    rc = main(["snapshot", "row_copy.py", *argv, "-o", out, "--no-cache", "-q", "--no-timing"])
    _, err = capsys.readouterr()
    assert rc == 0, err
    with open(out) as f:
        return json.load(f)["records"][KEY]


def test_default_and_passes_none_compile_the_same_specialisation(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "row_copy.py").write_text(KERNEL % ', "example": {"n": 1000, "stride": 1001}')
    plain = _snapshot(capsys, "none.json", "--passes", "none")
    ours = _snapshot(capsys, "default.json")
    # No tcgen05 here: bwtriton's passes leave the code alone, so the two modes must emit the same instructions.
    assert plain["census"] == ours["census"] and plain["sass"] == ours["sass"]
    expected = {"divisible_by_16": ["x_ptr", "y_ptr"], "source": "example"}
    assert plain["specialisation"] == ours["specialisation"] == expected
    assert main(["diff", "none.json", "default.json", "--format", "json"]) == 0
    (kernel,) = json.loads(capsys.readouterr().out)["kernels"]
    assert not {"specialisation", "instructions", "resources"} & set(kernel["groups"]), kernel["groups"]


def test_a_diff_across_specialisations_says_so_first_and_fails(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "row_copy.py").write_text(KERNEL % ', "example": {"n": 1000, "stride": 1001}')
    odd = _snapshot(capsys, "odd.json", "--passes", "none")
    (tmp_path / "row_copy.py").write_text(KERNEL % "")  # no example: every pointer and integer assumed aligned
    aligned = _snapshot(capsys, "aligned.json", "--passes", "none")
    assert aligned["specialisation"]["divisible_by_16"] == ["x_ptr", "y_ptr", "n", "stride"]
    assert odd["census"] != aligned["census"] or odd["sass"] != aligned["sass"]  # it matters to the code
    rc = main(["diff", "odd.json", "aligned.json", "--fail-on", "spills,registers>+8,findings,tcgen05"])
    out = capsys.readouterr().out
    assert rc == 1
    first_finding = out.split("\n\n")[1]  # right under the title
    assert first_finding.startswith("**Specialisation differs for 1 kernel config(s)**") and KEY in first_finding
    assert f"{KEY}: specialisation: divisible_by_16" in out
