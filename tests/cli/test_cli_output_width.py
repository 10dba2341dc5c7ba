"""What the commands print fits 100 columns: tables are wrapped or abbreviated (`passes --wide` prints full rows),
prose is wrapped. Error lines are exempt (one line each, by the CLI's contract), and so are `check`'s
`FILE:LINE: severity: ...` findings (one per line, for editors and grep)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bwtriton.cli import main

REPO = Path(__file__).resolve().parents[2]
MATMUL = f"{REPO / 'python' / 'bwtriton' / 'examples' / 'matmul.py'}:matmul_kernel"


def _out(capsys, *argv) -> str:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


def _too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > 100]


@pytest.mark.parametrize("argv", [["passes"], ["passes", "--triton"], ["compile", MATMUL],
                                  ["compile", MATMUL, "--report", "all"], ["demo"]],
                         ids=["passes", "passes-triton", "compile-summary", "compile-report-all", "demo"])
def test_command_output_fits_100_columns(capsys, argv):
    out = _out(capsys, *argv)
    assert out.strip() and not _too_wide(out), _too_wide(out)


def test_passes_wide_keeps_full_rows_and_names_the_default_of_a_required_pass(capsys):
    wide = _out(capsys, "passes", "--wide")
    rows = {line.split()[0]: line for line in wide.splitlines()[2:] if line and not line.startswith(" ")}
    assert "[options: max_columns=512, fallback=True]" in rows["plan-tmem"]  # the purpose on the pass's row
    # tmem-ttir-snapshot is not on by itself, but plan-tmem (on by default) requires it, so it runs by default
    assert rows["tmem-ttir-snapshot"].split()[2:4] == ["with", "plan-tmem"]
    assert "opt-in" not in rows["tmem-ttir-snapshot"]
    assert rows["pair-ctas"].split()[2] == "opt-in"
    narrow = _out(capsys, "passes")
    assert "tmem-ttir-snapshot         ttir   with plan-tmem" in narrow


def test_compile_summary_wraps_long_values_under_their_column(capsys):
    out = _out(capsys, "compile", MATMUL).splitlines()
    i = next(n for n, line in enumerate(out) if line.startswith("divisible_by_16"))
    column = out[i].index("a_ptr")
    assert out[i + 1].startswith(" " * column) and out[i + 1].strip()  # continued under the value, not wrapped
    assert "give example= / --example for your shapes" in " ".join(l.strip() for l in out[i:i + 3])


def test_diff_markdown_puts_over_wide_rows_in_wrapped_bullets(tmp_path, capsys):
    desc = {"base_offset": 0, "known_mask": "0xFFFFFFFFFFFFC000", "lbo": 8192, "lbo_mode": 0, "operand": "B",
            "sbo": 1024, "swizzle": "128B", "version": 1}

    def snap(smem, regs):
        rec = {"census": {}, "sass": {}, "descriptors": {"idesc": [], "smem_desc": smem},
               "resources": {"registers": regs}, "findings": {"by_check": {}}, "hashes": {}, "ptx_version": "8.8"}
        return {"triton": "3.6.0", "passes": "none", "targets": ["sm_100a"], "records": {"k.py:k[default]": rec}}
    (tmp_path / "a.json").write_text(json.dumps(snap([desc], 150)))
    (tmp_path / "b.json").write_text(json.dumps(snap([{**desc, "lbo": 0, "operand": "A"}], 158)))
    out = _out(capsys, "diff", tmp_path / "a.json", tmp_path / "b.json")
    assert not _too_wide(out), _too_wide(out)
    assert "| registers | 150 | 158 | +8 |" in out
    bullets = [line for line in out.splitlines() if line.startswith("- smem_desc")]
    assert len(bullets) == 2 and any("known_mask=0xFFFFFFFFFFFFC000" in b for b in bullets + out.splitlines())


@pytest.mark.emulated
def test_emulate_and_check_explain_fit_100_columns(tmp_path, capsys, monkeypatch):
    kernel = tmp_path / "add_one.py"
    kernel.write_text("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
                      "def add_one(x_ptr, BLOCK: tl.constexpr):\n    offs = tl.arange(0, BLOCK)\n"
                      "    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)\n\n\n"
                      "BWTRITON_SPECS = {'add_one': {'signature': {'x_ptr': '*fp32'}, 'constexprs': {'BLOCK': 128}}}\n")
    out = _out(capsys, "emulate", f"{kernel}:add_one", "--arg", "randn:fp32:128")
    assert "arg 0: float32 128  sum=" in out and not _too_wide(out), _too_wide(out)
    ptx = _out(capsys, "compile", MATMUL, "--emit", "ptx")
    (tmp_path / "k.ptx").write_text(ptx)
    monkeypatch.chdir(tmp_path)
    explained = _out(capsys, "check", "k.ptx", "--explain")
    kept = "\n".join(line for line in explained.splitlines()
                     if not re.match(r"k\.ptx:\d+: (error|warning|note): ", line))  # findings: one line each
    assert "tcgen05.mma" in kept and "k.ptx: 0 error(s)" in kept and not _too_wide(kept), _too_wide(kept)


@pytest.mark.parametrize("command", ["compile", "passes", "demo", "check", "emulate", "opt", "snapshot", "diff"])
def test_help_fits_100_columns(capsys, monkeypatch, command):
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps its own text to the terminal; docstrings are ours
    rc = main([command, "--help"])
    out, _ = capsys.readouterr()
    assert rc == 0 and command in out and not _too_wide(out), _too_wide(out)
