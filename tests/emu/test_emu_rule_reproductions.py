"""Every verifier rule family with a runtime meaning, reproduced on the emulator: a violation (a fault planted into
real compiler output) must fail with the error of that rule, and the correct pattern (the same kernel unmutated)
must run to the right result. Hazards on what an asynchronous operation *reads* (a stage refilled, an accumulator
overwritten) fail under both schedules: the emulator decides them from what the writing warp observed, not from
when its schedule completed the read. Hazards on what one *writes* fail under both too, with different errors: the
latest-completion schedule still holds the write pending, so the read hits poison (PoisonReadError); the eager one
completed it at issue (a legal, lucky timing), and the reader's clock shows it never observed that completion
(UnobservedWriteReadError).

Kernels and launches come from tools/tool_agreement.py (its fixtures and the numerics corpus)."""
from __future__ import annotations

import functools
import importlib.util
import pathlib
import re
import sys
from typing import Callable, Optional

import pytest

from bwtriton.emu.errors import (AsyncOverwriteError, AsyncRaceError, EmulationError, MissingProxyFenceError,
                                 PoisonReadError, TmemRaceError, UnobservedWriteReadError, UnwaitedTmemLoadError)

pytestmark = pytest.mark.emulated

_spec = importlib.util.spec_from_file_location(
    "tool_agreement", pathlib.Path(__file__).resolve().parents[2] / "tools" / "tool_agreement.py")
agreement = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("tool_agreement", agreement)   # its dataclasses look their module up by name
_spec.loader.exec_module(agreement)

_WAIT = re.compile(r"^\s*mbarrier\.try_wait\.parity[.\w:]*\s+(\w+),")


def drop_stage_reuse_wait(ptx: str) -> Optional[str]:
    """The wait before a TMA refill inside the loop (the last wait followed by a TMA load before any MMA) becomes a
    fall-through: the refill no longer waits for the MMAs reading the stage."""
    lines = ptx.split("\n")
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i]
        m = _WAIT.match(line)
        if not m:
            continue
        for nxt in lines[i + 1:]:
            if "tcgen05.mma" in nxt or _WAIT.match(nxt):
                break
            if re.search(r"cp\.async\.bulk\.tensor\.\dd\.shared", nxt):
                lines[i] = f"\tmov.pred {m.group(1)}, -1;"
                return "\n".join(lines)
    return None


def short_expect_tx(ptx: str) -> Optional[str]:
    """The first expect_tx announces half the bytes: its phase completes before the stage's last TMA lands."""
    m = re.search(r"(expect_tx[^;\n]*,\s*)(\d+);", ptx)
    return None if m is None else ptx[:m.start(2)] + str(int(m.group(2)) // 2) + ptx[m.end(2):]


def cp_async_wait_plus_one(ptx: str) -> Optional[str]:
    """The first `cp.async.wait_group N` lets one more group stay in flight than the pipeline allows."""
    m = re.search(r"(cp\.async\.wait_group\s+)(\d+);", ptx)
    return None if m is None else ptx[:m.start(2)] + str(int(m.group(2)) + 1) + ptx[m.end(2):]


def _ws(fault: str) -> Callable[[str], Optional[str]]:
    from fixtures import ws_mutants as wm  # noqa: PLC0415 - the fixtures are on PYTHONPATH (tests/) only
    return wm.FAULTS[fault]


BOTH = ("latest", "eager")

#: (rule family, kernel, fault (None: the correct pattern), error it must raise, schedules it must fail/pass under)
ROWS = [
    ("stage-reuse/P16", "t09_persistent_desc_ws_3tiles", "mma_after_commit", AsyncOverwriteError, BOTH),
    ("stage-reuse/P16", "emu:tma_pipelined_matmul", drop_stage_reuse_wait, AsyncOverwriteError, BOTH),
    # eager: the loader's parity wait misses the phase the early commit completed, a deadlock (also a failure)
    ("stage-reuse/P16 (stale phase)", "gluon_ws", "freeze_ready_phase", AsyncOverwriteError, ("latest",)),
    ("stage-reuse/P16", "t09_persistent_desc_ws_3tiles", None, None, BOTH),
    # the block-scaled tutorial shape: scales copied with tcgen05.cp, one commit per stage tracks cp and MMA
    ("completion: tcgen05.cp by tcgen05.commit", "t10_nvfp4", None, None, BOTH),
    ("mma-data-unwaited/P13", "gluon_ws", "drop_last_mma_wait", PoisonReadError, ("latest",)),
    ("mma-data-unwaited/P13", "gluon_ws", "drop_last_mma_wait", UnobservedWriteReadError, ("eager",)),
    ("mma-data-unwaited/P13", "emu:tma_pipelined_matmul", "drop_last_mma_wait", PoisonReadError, ("latest",)),
    ("mma-data-unwaited/P13", "emu:tma_pipelined_matmul", "drop_last_mma_wait", UnobservedWriteReadError,
     ("eager",)),
    ("mma-data-unwaited/P13", "gluon_ws", None, None, BOTH),
    ("acc-wait-missing", "t09_ws_tile", "drop_acc_wait", TmemRaceError, BOTH),
    ("acc-wait-missing", "t09_ws_tile", None, None, BOTH),
    ("acc-reuse-unwaited", "t09_persistent_desc_ws_3tiles", "drop_acc_empty_wait", UnwaitedTmemLoadError, BOTH),
    # the epilogue's named barrier before the acc-empty arrive removed: only a CTA that reuses a buffer (3 tiles,
    # 2 buffers) can show it; the numerics launch (2 tiles per CTA) cannot
    ("acc-release-early", "t09_persistent_desc_ws_3tiles", "drop_release_barrier", UnwaitedTmemLoadError, BOTH),
    ("acc-release-early", "emu~:t09_persistent_warp_specialized_3tiles", "drop_release_barrier",
     UnwaitedTmemLoadError, BOTH),
    ("acc-release-early", "emu~:t09_persistent_warp_specialized_3tiles", None, None, BOTH),
    ("parity/T6", "t09_ws_tile", "flip_acc_parity", TmemRaceError, ("latest",)),
    ("parity/T6", "gluon_ws", None, None, BOTH),
    ("missing-proxy-fence/P15", "t09_ws_tile", "drop_mma_proxy_fence", MissingProxyFenceError, BOTH),
    ("missing-proxy-fence/P15", "emu:gluon_one_mma", "drop_mma_proxy_fence", MissingProxyFenceError, BOTH),
    ("missing-proxy-fence/P15", "emu:gluon_one_mma", None, None, BOTH),
    ("cta-pair-unsynced (peer stores)", "emu:gluon_two_ctas_m128", "drop_cluster_barrier", AsyncRaceError, BOTH),
    ("cta-pair-unsynced (peer stores)", "emu:gluon_two_ctas_m128", None, None, BOTH),
    # eager: the stage's refill overwrites what the MMA read (AsyncOverwriteError); latest: the MMA reads poison
    ("completion: TMA by complete_tx bytes", "t09_ws_tile", short_expect_tx, AsyncRaceError, BOTH),
    ("completion: cp.async by group", "emu:example_matmul_fp16", cp_async_wait_plus_one, PoisonReadError,
     ("latest",)),
    ("completion: cp.async by group", "emu:example_matmul_fp16", cp_async_wait_plus_one, UnobservedWriteReadError,
     ("eager",)),
    ("completion: cp.async by group", "emu:example_matmul_fp16", None, None, BOTH),
]


def _local_cases() -> dict:
    """Launches the agreement corpus lacks ("emu~:" names): the persistent warp-specialized GEMM at 3 tiles per CTA
    (M = 384 over 2 programs), so its 2 accumulator buffers are reused."""
    import emu_cases as ec  # noqa: PLC0415 - tests/ is on PYTHONPATH only when the tests run
    return {"emu~:t09_persistent_warp_specialized_3tiles":
            agreement._emu_case(lambda: ec.case_persistent_tma(ws=True, M=384))}


@functools.lru_cache(maxsize=None)
def _case(name: str):
    cases = _local_cases() if name.startswith("emu~:") else agreement.all_cases()
    return cases[name]()


def _params():
    out = []
    for rule, kernel, fault, error, schedules in ROWS:
        label = fault if isinstance(fault, str) or fault is None else fault.__name__
        for schedule in schedules:
            out.append(pytest.param(kernel, fault, error, schedule,
                                    id=f"{rule}-{kernel}-{label or 'correct'}-{schedule}"))
    return out


@pytest.mark.parametrize("kernel,fault,error,schedule", _params())
def test_rule_reproduction(kernel, fault, error, schedule):
    case = _case(kernel)
    ptx = case.compiled.asm["ptx"]
    if fault is not None:
        plant = _ws(fault) if isinstance(fault, str) else fault
        mutated = plant(ptx)
        assert mutated is not None and mutated != ptx, "the fault found no place: the kernel's PTX changed shape"
        ptx = mutated
    go = case.launch(agreement._with_ptx(case.compiled, ptx), schedule)
    if error is None:
        assert go(), "the correct pattern must give the right result"
    else:
        with pytest.raises(error):
            go()


def test_tcgen05_under_an_sm90_target_is_refused():
    """T2: a module whose `.target` has no tcgen05 is refused (ptxas would), naming the instruction's line."""
    case = _case("emu:gluon_one_mma")
    ptx = case.compiled.asm["ptx"]
    assert ".target sm_100a" in ptx
    bad = ptx.replace(".target sm_100a", ".target sm_90a")
    first = next(i for i, line in enumerate(bad.split("\n"), 1) if re.match(r"\s*(@%p\d+\s+)?tcgen05\.", line))
    with pytest.raises(EmulationError, match=rf"PTX line {first}: tcgen05\.\w+ under `\.target sm_90a`"):
        case.launch(agreement._with_ptx(case.compiled, bad))()
    assert case.launch(case.compiled)()
