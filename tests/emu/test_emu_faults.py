"""Fault injection: each test removes or corrupts one synchronisation step in real Triton 3.6 sm_100a PTX and
asserts the emulated run fails with the strict-mode error that names the racing instructions and the missing
wait / fence (docs/emulator_async.md). The unmutated kernels pass under both schedules.

Kernels: the pipelined TMA matmul (emu_cases.case_tma_matmul: 3 smem stages, 8 K iterations, TMA-store
epilogue), the warp-specialized TMA matmul, and the Gluon one-MMA kernel (operands stored with st.shared, then
fence.proxy.async, then tcgen05.mma)."""
from __future__ import annotations

import re

import pytest

import bwtriton.emu as emu
import emu_cases as ec
from bwtriton.emu.errors import AsyncOverwriteError, MissingProxyFenceError, PoisonReadError, UnobservedWriteReadError

pytestmark = pytest.mark.emulated

# The blocking wait Triton emits: `mbarrier.try_wait.parity.shared.b64 complete, [%rB], %rP;` in a spin loop
# (Triton 3.9 spells the state space `shared::cta`).
_WAIT = r"mbarrier\.try_wait\.parity\.shared(?:::cta)?\.b64 complete, \[(%r\d+)\], (%r\d+);\s*@!complete bra\.uni waitLoop;"


@pytest.fixture(scope="module")
def tma():
    case = ec.case_tma_matmul()
    return case, case.kernel.asm["ptx"]


@pytest.fixture(scope="module")
def one_mma():
    case = ec.case_gluon_one_mma()
    return case, case.kernel.asm["ptx"]


def _run(case, text: str, schedule: str = "latest"):
    args, out, ref, tol = case.make()
    md = case.kernel.metadata._asdict()
    emu.run(text, case.grid, *args, num_warps=md["num_warps"], shared=md["shared"],
            tensordesc_meta=md.get("tensordesc_meta"), schedule=schedule)
    return float((out.double() - ref).abs().max()), tol


def _line_of(text: str, pattern: str, nth: int = 0) -> int:
    """1-based PTX line of the nth line matching `pattern` (what the error must name)."""
    hits = [i + 1 for i, ln in enumerate(text.splitlines()) if re.search(pattern, ln)]
    assert len(hits) > nth, f"{pattern!r} not in the kernel: its PTX changed shape"
    return hits[nth]


def _waits(text: str) -> list[re.Match]:
    return list(re.finditer(_WAIT, text))


def _mma_waits(text: str) -> list[re.Match]:
    """Waits followed by tcgen05.mma before the next wait: the waits on TMA barriers."""
    out = []
    for m in _waits(text):
        rest = text[m.end():]
        nxt = re.search(_WAIT, rest)
        if "tcgen05.mma" in rest[:nxt.start() if nxt else len(rest)]:
            out.append(m)
    return out


def _loop_tma_wait(text: str) -> re.Match:
    """The TMA-barrier wait inside the K loop (the last one; the first iteration is peeled before the loop)."""
    waits = _mma_waits(text)
    assert len(waits) >= 2, "expected a peeled and an in-loop TMA wait: the kernel's PTX changed shape"
    return waits[-1]


def _stage_reuse_wait(text: str) -> re.Match:
    """The wait on the MMA barrier before a TMA refills a stage: a wait followed by cp.async.bulk.tensor loads
    before any MMA."""
    for m in _waits(text):
        rest = text[m.end():]
        first_tma, first_mma = rest.find("cp.async.bulk.tensor.2d.shared"), rest.find("tcgen05.mma")
        if 0 <= first_tma < (first_mma if first_mma >= 0 else len(rest)):
            return m
    raise AssertionError("no stage-reuse wait before a TMA load: the kernel's PTX changed shape")


def _cut(text: str, m: re.Match, repl: str = "") -> str:
    return text[:m.start()] + repl + text[m.end():]


@pytest.mark.parametrize("schedule", ["latest", "eager"])
def test_unmutated_kernels_pass(tma, one_mma, schedule):
    for case, text in (tma, one_mma):
        err, tol = _run(case, text, schedule)
        assert err <= tol, (case.name, schedule, err, tol)


def test_unmutated_warp_specialized_kernel_passes():
    case = ec.case_ws_matmul()
    err, tol = _run(case, case.kernel.asm["ptx"])
    assert err <= tol


def test_missing_tma_wait_before_mma(tma):
    case, text = tma
    bad = _cut(text, _loop_tma_wait(text))
    with pytest.raises(PoisonReadError, match=r"PTX line \d+: tcgen05\.mma reads shared memory .* TMA load at PTX "
                                              r"line \d+ \(`@%p\d+ cp\.async\.bulk\.tensor.*never observed.*Wait "
                                              r"on its mbarrier"):
        _run(case, bad)


def test_missing_tma_wait_fails_under_the_eager_schedule_too(tma):
    """The optimistic schedule completes the TMA at issue, so no byte is poisoned when the MMA reads it; the
    issuing thread's clock still lacks the load's completion (it never waited on the mbarrier)."""
    case, text = tma
    with pytest.raises(UnobservedWriteReadError, match=r"PTX line \d+: tcgen05\.mma reads shared memory .* the TMA "
                                                       r"load at PTX line \d+ .* never observed that write completing"
                                                       r".*Wait on its mbarrier"):
        _run(case, _cut(text, _loop_tma_wait(text)), schedule="eager")


def test_missing_fence_before_tma_store(tma):
    case, text = tma
    fence = _line_of(text, r"fence\.proxy\.async")
    bad = re.sub(r"\n\s*fence\.proxy\.async\.shared::cta;", "\n", text)
    st_line = _line_of(text, r"st\.shared\.v4")
    with pytest.raises(MissingProxyFenceError, match=r"PTX line \d+: the TMA store reads shared memory written through the generic proxy "
                                                     r"at PTX line (\d+) with no fence\.proxy\.async") as exc:
        _run(case, bad)
    written_at = int(re.search(r"generic proxy at PTX line (\d+)", str(exc.value)).group(1))
    assert st_line <= written_at < fence  # one of the epilogue's st.shared, all before the dropped fence


def test_missing_fence_before_mma_reading_generic_stores(one_mma):
    case, text = one_mma
    bad = re.sub(r"\n\s*fence\.proxy\.async\.shared::cta;", "\n", text, count=1)
    assert bad != text
    with pytest.raises(MissingProxyFenceError, match=r"PTX line \d+: tcgen05\.mma reads shared memory written through the generic proxy at PTX line \d+ "
                                                     r"with no fence\.proxy\.async"):
        _run(case, bad)


def test_smem_stage_reused_before_mma_completed(tma):
    case, text = tma
    bad = _cut(text, _stage_reuse_wait(text))
    with pytest.raises(AsyncOverwriteError, match=r"TMA load at PTX line \d+ .* overwrites shared memory .* "
                                                  r"tcgen05\.mma at PTX line \d+ .* still reads.*tcgen05\.commit"):
        _run(case, bad)


def test_wait_on_the_wrong_mbarrier(tma):
    """The in-loop MMA waits on the MMA-completion barrier instead of the stage's TMA barrier."""
    case, text = tma
    m = _loop_tma_wait(text)
    mma_bar = _stage_reuse_wait(text).group(1)
    assert mma_bar != m.group(1)
    bad = text[:m.start(1)] + mma_bar + text[m.end(1):]
    with pytest.raises(PoisonReadError, match=r"tcgen05\.mma reads shared memory .* TMA load at PTX line \d+"):
        _run(case, bad)


def test_wrong_parity_on_the_first_tma_wait(tma):
    """Waiting for parity 1 on a fresh mbarrier (phase 0) succeeds at once: the MMA reads the tile before the TMA
    that fills it completed."""
    case, text = tma
    first = _waits(text)[0]
    bad = text[:first.start(2)] + "1" + text[first.end(2):]
    with pytest.raises(PoisonReadError, match=r"tcgen05\.mma .* TMA load at PTX line \d+"):
        _run(case, bad)


def test_wrong_tmem_lane_offset(tma):
    """tcgen05.ld's address moved 32 lanes down: warps leave their lane quarter."""
    case, text = tma
    bad, n = re.subn(r"(tcgen05\.ld\.sync\.aligned\.32x32b\.x\d+\.b32 \{[^}]*\}, \[%r\d+) \+ 0\]", r"\1 + 2097152]",
                     text)
    assert n == 1
    with pytest.raises(emu.LaneQuarterError, match=r"warp \d may only access lanes"):
        _run(case, bad)


def test_accumulator_read_without_waiting_for_the_mmas(tma):
    case, text = tma
    acc_wait = [m for m in _waits(text) if "tcgen05.ld" in text[m.end():m.end() + 2500]][-1]
    with pytest.raises(emu.TmemRaceError, match="tcgen05.ld reads TMEM column"):
        _run(case, _cut(text, acc_wait))


def test_unknown_instruction_is_unsupported_with_its_line(tma):
    case, text = tma
    bad = text.replace("tcgen05.wait::ld.sync.aligned;", "tcgen05.wait::ld.sync.aligned;\n\tfrobnicate.b32 %r1, %r1;",
                       1)
    line = _line_of(bad, r"frobnicate")
    with pytest.raises(emu.UnsupportedInstructionError, match=rf"PTX line {line}:.*frobnicate"):
        _run(case, bad)


def test_tma_refill_of_generically_written_bytes_needs_no_fence(tma):
    """Once a TMA load overwrites bytes, their newest writer is the async proxy: an earlier st.shared to them (here
    a scratch store into stage 0 after TMEM allocation, barriers later) must not count as an unfenced generic
    write."""
    case, text = tma
    store = "\n\tst.shared.b32 [global_smem+64], %r1;\n\tst.shared.b32 [global_smem+16384], %r1;"
    at = re.search(r"tcgen05\.relinquish_alloc_permit[^\n]*", text)
    assert at
    err, tol = _run(case, text[:at.end()] + store + text[at.end():])
    assert err <= tol


def test_generic_store_racing_a_pending_tma_load_is_caught(tma):
    """The same stores placed right before the first TMA (no barrier between them and warp 0's issue): another
    warp's st.shared overwrites bytes the pending TMA owns."""
    case, text = tma
    store = "\tst.shared.b32 [global_smem+64], %r1;\n"
    first_tma = re.search(r"\n[^\n]*@%p\d+ cp\.async\.bulk\.tensor", text)
    with pytest.raises(AsyncOverwriteError, match=r"st writes shared memory .* TMA load at PTX line \d+ .* is "
                                                  r"still writing"):
        _run(case, text[:first_tma.start() + 1] + store + text[first_tma.start() + 1:])
