"""The emulator's run-time protocol checks: each test breaks one rule in real Triton sm_100a PTX (a textual
mutation of the Gluon one-MMA kernel or the tl.dot matmul) and asserts the matching EmulationError, with the
PTX line of the offending instruction."""
from __future__ import annotations

import re

import pytest

import bwtriton.emu as emu
import emu_cases as ec

pytestmark = pytest.mark.emulated


@pytest.fixture(scope="module")
def one_mma():
    case = ec.case_gluon_one_mma()
    return case, case.kernel.asm["ptx"], case.kernel.metadata._asdict()


def _run_text(case, text: str, md: dict):
    args, out, ref, tol = case.make()
    emu.run(text, case.grid, *args, num_warps=md["num_warps"], shared=md["shared"])
    return out, ref, tol


def _mutate(text: str, pattern: str, repl: str, count: int = 0) -> str:
    new, n = re.subn(pattern, repl, text, count=count)
    assert n, f"mutation pattern {pattern!r} not found: the kernel's PTX changed shape"
    return new


def test_unmutated_kernel_passes_all_checks(one_mma):
    case, text, md = one_mma
    out, ref, tol = _run_text(case, text, md)
    assert float((out.double() - ref).abs().max()) <= tol


def test_register_reads_before_wait_ld_are_allowed(one_mma):
    """P9: the hardware respects true register dependencies, so using tcgen05.ld results before
    tcgen05.wait::ld is legal; the wait only has to come before TMEM is overwritten (here: the dealloc)."""
    case, text, md = one_mma
    moved = _mutate(text, r"\n\s*tcgen05\.wait::ld\.sync\.aligned;", "\n")
    # before the bar.sync that precedes the dealloc: every warp's wait must happen before warp 0 deallocates
    moved = _mutate(moved, r"(\n\s*bar\.sync\s+0;(?:\s*// begin inline asm)?\s*@%p\d+ tcgen05\.dealloc)",
                    r"\n\ttcgen05.wait::ld.sync.aligned;\1")
    out, ref, tol = _run_text(case, moved, md)
    assert float((out.double() - ref).abs().max()) <= tol


def test_dealloc_over_pending_tcgen05_ld(one_mma):
    case, text, md = one_mma
    ld_line = next(i + 1 for i, ln in enumerate(text.splitlines()) if "tcgen05.ld." in ln)
    bad = _mutate(text, r"\n\s*tcgen05\.wait::ld\.sync\.aligned;", "\n")
    with pytest.raises(emu.UnwaitedTmemLoadError,
                       match=rf"PTX line \d+: tcgen05.dealloc writes TMEM column \d+ .*tcgen05.ld at PTX line "
                             rf"{ld_line}.*no tcgen05.wait::ld"):
        _run_text(case, bad, md)


def test_tmem_read_before_mma_completion_observed(one_mma):
    case, text, md = one_mma
    # drop the mbarrier wait loop between tcgen05.commit and tcgen05.ld
    bad = _mutate(text, r"mbarrier\.try_wait\.parity\.shared(?:::cta)?\.b64 complete, \[%r\d+\], %r\d+;\s*@!complete bra\.uni "
                        r"waitLoop;", "")
    with pytest.raises(emu.TmemRaceError, match="tcgen05.ld reads TMEM column"):
        _run_text(case, bad, md)


def test_lane_quarter_violation(one_mma):
    case, text, md = one_mma
    # the per-warp lane offset ((warp_id & 3) << 21 == lane 32*w << 16) masked to 0: warps 1-3 read lanes 0-31
    bad = _mutate(text, r"and\.b32(\s+%r\d+, %r\d+,) 6291456;", r"and.b32\1 0;")
    with pytest.raises(emu.LaneQuarterError, match=r"warp ([1-3]) may only access lanes (32\.\.63|64\.\.95|96\.\.127)"):
        _run_text(case, bad, md)


def test_tmem_leaked_at_exit(one_mma):
    case, text, md = one_mma
    bad = _mutate(text, r"\n[^\n]*tcgen05\.dealloc[^\n]*", "\n")
    with pytest.raises(emu.TmemLeakError, match="still allocated"):
        _run_text(case, bad, md)


def test_deadlock_detected(one_mma):
    case, text, md = one_mma
    # the MMA barrier expects two arrivals; only one tcgen05.commit ever arrives
    bad = _mutate(text, r"(mbarrier\.init\.shared::cta\.b64 \[%r\d+\],) 1;", r"\1 2;", count=1)
    with pytest.raises(emu.DeadlockError, match="mbarrier.try_wait"):
        _run_text(case, bad, md)


def test_missing_wait_ld_in_tl_dot_matmul():
    case = ec.case_example_matmul("fp16")
    text = case.kernel.asm["ptx"]
    bad = _mutate(text, r"\n\s*tcgen05\.wait::ld\.sync\.aligned;", "\n")
    args, *_ = case.make()
    with pytest.raises(emu.UnwaitedTmemLoadError):
        emu.run(bad, case.grid, *args, num_warps=4, shared=case.kernel.metadata["shared"])


def test_too_many_arguments_is_an_input_error():
    from bwtriton.errors import InputError
    case = ec.case_gluon_one_mma()
    args, *_ = case.make()
    with pytest.raises(InputError, match="too many kernel arguments"):
        emu.run(case.kernel, case.grid, *args, 1, 2, 3)
