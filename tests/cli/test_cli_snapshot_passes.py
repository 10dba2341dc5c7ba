"""The pass-spec grammar on the command line: `--passes -NAME` parses, an option-only spelling keeps the other
passes, and every --passes example the --help texts show works as written."""
from __future__ import annotations

import json
import re

import pytest

from bwtriton.cli import build_parser, glue_option_values, main
from bwtriton.pipeline import PASSES_EXAMPLES, resolve_passes

KERNEL = "python/bwtriton/examples/tma_matmul.py:matmul_tma_bt_kernel"
EXAMPLES = re.findall(r"'([^']+)'", PASSES_EXAMPLES)
DEFAULTS = resolve_passes("default", "sm_100a").names


def _help(command: str) -> str:
    sub = next(a for a in build_parser()._actions if a.choices and command in a.choices).choices[command]
    return re.sub(r"\s+", "", sub.format_help())


@pytest.mark.parametrize("command", ["compile", "snapshot"])
def test_help_shows_the_tested_examples(command):
    assert len(EXAMPLES) == 3
    assert all(re.sub(r"\s+", "", ex) in _help(command) for ex in EXAMPLES)


@pytest.mark.parametrize("example", EXAMPLES)
def test_each_help_example_resolves_as_its_words_say(example):
    names = resolve_passes(example, "sm_100a").names
    if example.startswith("-"):
        assert names == [n for n in DEFAULTS if n != example[1:]]
    else:  # an option, or an added pass with an option: every default still runs
        assert set(DEFAULTS) <= set(names) and re.match(r"\+?([\w-]+)", example)[1] in names
    assert "verify-tcgen05" in names or example == "-verify-tcgen05"


def test_an_option_only_spec_keeps_the_verifier():
    sel = resolve_passes("plan-tmem{max_columns=256}", "sm_100a")
    assert sel.names == DEFAULTS and sel.options_for("plan-tmem")["max_columns"] == 256
    assert resolve_passes("verify-tcgen05", "sm_100a").names == ["verify-tcgen05"]  # a bare name: exact list


def test_a_dash_value_is_glued_to_its_option():
    assert glue_option_values(["compile", "k.py:k", "--passes", "-verify-tcgen05", "--json"]) == [
        "compile", "k.py:k", "--passes=-verify-tcgen05", "--json"]
    assert glue_option_values(["snapshot", "--passes", "--json"]) == ["snapshot", "--passes", "--json"]


@pytest.mark.parametrize("example", EXAMPLES)
def test_compile_runs_each_help_example_as_written(example, capsys):
    assert main(["compile", KERNEL, "--passes", example, "--json"]) == 0, capsys.readouterr().err
    passes = json.loads(capsys.readouterr().out)["summary"]["passes"]
    assert passes == resolve_passes(example, "sm_100a").names


def test_snapshot_takes_a_dash_spec(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main(["snapshot", KERNEL, "--passes", "-verify-tcgen05", "-o", str(out), "-q", "--no-cache"]) == 0
    (record,) = json.loads(out.read_text())["records"].values()
    assert record["passes"] == "-verify-tcgen05" and "error" not in record
    assert any(k.startswith("tcgen05.mma") for k in record["census"]["tcgen05"])
