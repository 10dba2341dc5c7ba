"""The corpus of upstream Blackwell miscompiles (corpus/blackwell_bugs/, docs/blackwell_bugs.md) on the installed
Triton: the instruction facts of Triton's own PTX for each PTX-visible case, per Triton minor version, and the
verdict a correct tool must give. Cases our tools get wrong today are strict xfails, so they flip when fixed.

The facts are read from the PTX text (corpus/blackwell_bugs/ptx_facts.py); the verdicts are the bug reports'
symptoms checked against the PTX by hand (docs/blackwell_bugs.md says why each is right)."""
from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

import bwtriton
from bwtriton.compat.versions import installed
from bwtriton.loading import load_kernel
from bwtriton.verify import verify_ptx

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "blackwell_bugs"
MINOR = installed()[:2]
#: Keyed by Triton minor version, so it belongs in the version matrix (tools/run_tests.py runs `-m compat` on
#: every supported release).


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_bwbug_{name}", CORPUS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ptx_facts = _load("ptx_facts").ptx_facts


@functools.lru_cache(maxsize=None)
def _compiled(name: str, passes: str) -> Any:
    """The case's compile for its target, with `passes` ('none': Triton alone; 'default'): result or exception."""
    module = _load(name)
    fn, spec = load_kernel(f"{CORPUS / name}.py:{module.CASE['kernel']}")
    try:
        return bwtriton.compile(fn, target=module.CASE.get("target", "sm_100a"), passes=passes, **spec)
    except bwtriton.BwTritonError as exc:
        return exc


def _triton_ptx(name: str) -> str:
    res = _compiled(name, "none")
    assert not isinstance(res, Exception), f"Triton alone failed to compile {name}: {res}"
    return res.asm["ptx"]


def _errors(ptx: str, target: str = "sm_100a") -> set[str]:
    """'check/rule' of every verifier error."""
    return {f"{f.check}/{f.rule}" for f in verify_ptx(ptx, target=target).errors}


def _on(versions: dict, what: str) -> Any:
    """The entry of `versions` (minor version -> value) for the installed Triton; skip on an unlisted one."""
    if MINOR not in versions:
        pytest.skip(f"no {what} recorded for Triton {MINOR[0]}.{MINOR[1]}")
    return versions[MINOR]


def _xfail_on(minors: tuple, reason: str):
    """A strict xfail where the installed Triton is one of `minors` (minor version tuples)."""
    return pytest.mark.xfail(MINOR in minors, reason=reason, strict=True)


ALL = ((3, 6), (3, 7), (3, 8), (3, 9))

# ---- instruction facts of Triton's own PTX, per case and Triton minor version ------------------------------------

#: triton#10590: generic-proxy st.shared of the bf16 tile reaching the in-loop tcgen05.mma with no fence.proxy.async.
#: 3.6 hoists the fence above the loop (the peeled first iteration has it); 3.7+ fence inside the loop.
FWD_H_UNFENCED_MMAS = {(3, 6): 8, (3, 7): 0, (3, 8): 0, (3, 9): 0}
#: fla#1228 (8 warps): a tcgen05.st zeroing the reused accumulator columns after another warp's tcgen05.ld of
#: them, with no CTA barrier between (warps w and w+4 share a lane quarter). 3.8+ separate the two.
CHUNK_O_ST_AFTER_LD = {(3, 6): 1, (3, 7): 1, (3, 8): 0, (3, 9): 0}
#: Liger#1435: tcgen05.mma count of the two-dots-per-step kernel; 3.9 lowers it differently (and correctly).
TWO_DOTS_MMAS = {(3, 6): 20, (3, 7): 20, (3, 8): 20, (3, 9): 16}
#: triton#11733 on sm_120a: the MN-packed mxfp4 dot goes to the native block-scaled mma.sync on 3.6-3.8 (the form
#: 3.8.0 computes wrongly on the board); 3.9 decomposes it to bf16 mma.sync (the fix, #10726).
MN_PACKED_NATIVE = {(3, 6): True, (3, 7): True, (3, 8): True, (3, 9): False}


def test_fwd_h_fence_placement():
    """3.6's PTX feeds the loop's state-update MMAs from st.shared with no fence.proxy.async; 3.7+ fence them."""
    facts = ptx_facts(_triton_ptx("triton_10590_fwd_h_recurrence"))
    assert len(facts.unfenced_mma_in_loop) == _on(FWD_H_UNFENCED_MMAS, "fence fact")
    assert facts.loops >= 1 and facts.mma >= 16


def test_chunk_o_cross_warp_tmem_reuse():
    """With 8 warps, 3.6/3.7 zero the reused accumulator with tcgen05.st right after another warp's tcgen05.ld."""
    facts = ptx_facts(_triton_ptx("fla_1228_chunk_o"))
    assert len(facts.tmem_st_after_ld_unsynced) == _on(CHUNK_O_ST_AFTER_LD, "TMEM reuse fact")


def test_two_dots_one_accumulator_mma_count():
    facts = ptx_facts(_triton_ptx("liger_1435_two_dots_one_acc"))
    assert facts.mma == _on(TWO_DOTS_MMAS, "MMA count")


def test_mn_packed_mxfp4_sm120_lowering():
    """Triton's sm_120a lowering of the MN-packed mxfp4 dot, and bwtriton's default pipeline's exact replacement."""
    forms = ptx_facts(_triton_ptx("triton_11733_mn_packed_mxfp4_sm120")).mma_sync_forms
    native = any("kind::mxf4nvf4.block_scale" in f for f in forms)
    assert native == _on(MN_PACKED_NATIVE, "sm_120a lowering")
    final = _compiled("triton_11733_mn_packed_mxfp4_sm120", "default")
    assert not isinstance(final, Exception), final
    final_forms = ptx_facts(final.asm["ptx"]).mma_sync_forms
    assert not any("block_scale" in f for f in final_forms)  # the pipeline decomposes it: exact bf16 products
    assert any(f.startswith("m16n8k16") and "bf16" in f for f in final_forms)


def test_dhu_backward_compiles_on_every_version():
    """fla#612's HoistTMEMAlloc abort is gone in 3.6-3.9: the kernel compiles and its fences are in place."""
    facts = ptx_facts(_triton_ptx("fla_612_dhu_backward"))
    assert facts.mma >= 32 and not facts.unfenced_mma_in_loop


# ---- what a correct verifier says about Triton's PTX --------------------------------------------------------------

#: case -> minor version -> the verifier errors ('check/rule') a correct verifier reports; "any" = some error.
VERIFIER_EXPECTED = {
    "triton_10590_fwd_h_recurrence": {(3, 6): {"missing-proxy-fence/P15"}, (3, 7): set(), (3, 8): set(),
                                      (3, 9): set()},
    "fla_1228_chunk_o": {(3, 6): {"ld-overwritten-cross-warp/P9"}, (3, 7): {"ld-overwritten-cross-warp/P9"},
                         (3, 8): set(), (3, 9): set()},
    "liger_1435_two_dots_one_acc": {(3, 6): {"acc-read-unsynced/P11"}, (3, 7): {"acc-read-unsynced/P11"},
                                    (3, 8): {"acc-read-unsynced/P11"}, (3, 9): set()},
    "fla_999_wy_repr_backward": {v: set() for v in ALL},
    "fla_612_dhu_backward": {v: set() for v in ALL},
}
#: case -> (minor versions where our verifier is wrong today, why); none since TMEM is lanes x columns and a proven
#: missing proxy fence is an error
VERIFIER_WRONG: dict = {}


@pytest.mark.parametrize("case", [
    pytest.param(name, marks=_xfail_on(*VERIFIER_WRONG[name]) if name in VERIFIER_WRONG else ())
    for name in VERIFIER_EXPECTED])
def test_verifier_verdict(case):
    expected = _on(VERIFIER_EXPECTED[case], "verifier verdict")
    errors = _errors(_triton_ptx(case))
    if expected == "any":
        assert errors, "the PTX has a race the verifier must report"
    else:
        assert errors == expected


# ---- what the default pipeline and the emulator say --------------------------------------------------------------

def test_fwd_h_goes_through_the_default_pipeline_fenced():
    """A correct pipeline compiles the recurrence on every version and leaves no unfenced MMA in the loop."""
    final = _compiled("triton_10590_fwd_h_recurrence", "default")
    assert not isinstance(final, Exception), final
    assert ptx_facts(final.asm["ptx"]).unfenced_mma_in_loop == []


#: fla#1228 on the emulator: a named failure where the PTX has the cross-warp TMEM reuse (3.6, 3.7), exact on 3.8/3.9.
CHUNK_O_EMULATOR = {(3, 6): "named", (3, 7): "named", (3, 8): "exact", (3, 9): "exact"}


@pytest.mark.emulated
def test_chunk_o_on_the_emulator():
    import bwtriton.emu as emu  # noqa: PLC0415 - the emulator's import is heavy; only this test needs it
    expected = _on(CHUNK_O_EMULATOR, "emulator verdict")
    grid, args, check = _load("fla_1228_chunk_o").emulate_launch()
    if expected == "exact":
        emu.run(_triton_ptx_result("fla_1228_chunk_o"), grid, *args)
        assert check()
    else:
        with pytest.raises(emu.EmulationError, match="tcgen05.st writes TMEM"):
            emu.run(_triton_ptx_result("fla_1228_chunk_o"), grid, *args)


def _triton_ptx_result(name: str) -> Any:
    res = _compiled(name, "none")
    assert not isinstance(res, Exception), res
    return res
