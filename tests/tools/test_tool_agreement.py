"""tools/tool_agreement.py's CI sample: the verifier and the emulator agree on every sampled (kernel, fault) row --
the clean warp-specialized, Gluon and persistent kernels pass both, each planted fault (one per rule family) is
rejected by both -- except rows of the tool's KNOWN list, each of which carries the reason it stands."""
from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

pytest.importorskip("torch")

_spec = importlib.util.spec_from_file_location(
    "tool_agreement", pathlib.Path(__file__).resolve().parents[2] / "tools" / "tool_agreement.py")
agreement = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("tool_agreement", agreement)   # its dataclasses look their module up by name
_spec.loader.exec_module(agreement)

pytestmark = pytest.mark.emulated


@pytest.fixture(scope="module")
def sample_rows():
    return agreement.run(sample=True)


def test_sample_has_no_open_disagreement(sample_rows):
    bad = agreement.open_disagreements(sample_rows)
    assert not bad, "\n".join(f"{r.kernel} / {r.fault}: {r.kind()} (verifier {r.verifier}, emulator {r.emulator})"
                              for r in bad)


def test_sample_covers_clean_kernels_and_faults(sample_rows):
    """Every SAMPLE row ran (none lost to a fault that found no place), clean kernels pass both tools and every
    fault row (and every kernel racy as written) is rejected by the emulator."""
    assert len(sample_rows) == len(agreement.SAMPLE)
    for row in sample_rows:
        if row.fault == "(none)" and row.kernel not in agreement.RACY:
            assert (row.verifier, row.emulator) == ("clean", "ok"), row
        else:
            assert row.emulator != "ok", row


def test_known_disagreements_carry_reasons():
    for key, reason in agreement.KNOWN.items():
        assert len(reason.split()) >= 8, f"{key}: say which tool is wrong and why"


def test_a_verifier_error_the_emulator_runs_is_a_disagreement():
    row = agreement.Row("k", "f", "stage-reuse", "ok")
    assert not row.agree and row.kind() == "verifier error, emulator ok"
    assert agreement.open_disagreements([row]) == [row]
    assert agreement.Row("k", "f", "clean", "PoisonReadError").kind() == "emulator protocol error, verifier silent"
    assert agreement.Row("k", "f", "clean", "wrong").kind() == "emulator wrong result, verifier silent"
