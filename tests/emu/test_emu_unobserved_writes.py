"""A read of shared memory whose newest writer is an asynchronous write (bulk copy, cp.async) the reading thread
never observed completing is an UnobservedWriteReadError, whichever schedule completed the write
(docs/emulator_async.md, "Observed by whom"). Observation travels through the writer's wait and a barrier after
it (bar.sync / bar.arrive, an mbarrier arrive + wait) or the reader's own wait on the write's mbarrier.

Each row is one two-warp kernel: warp 0 starts an asynchronous copy of 128 bytes into shared memory and hands
them to warp 1, which reads them with ld.shared and stores them to global memory. The violation hands them on
before warp 0 observed the copy; the correct pattern after (or warp 1 waits itself)."""
from __future__ import annotations

import pytest
import torch

import bwtriton.emu as emu
from bwtriton.emu.errors import AsyncRaceError, PoisonReadError, UnobservedWriteReadError

pytestmark = pytest.mark.emulated

_KERNEL = """
.version 8.8
.target sm_100a
.address_size 64
.extern .shared .align 128 .b8 global_smem[];
.visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1)
.reqntid 64
{
  .reg .pred %p<8>;
  .reg .b32 %r<32>;
  .reg .b64 %rd<16>;
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u64 %rd2, [k_param_1];
  mov.u32 %r1, %tid.x;
  and.b32 %r2, %r1, 31;
  mov.u32 %r10, global_smem;
  add.u32 %r11, %r10, 128;
  add.u32 %r13, %r10, 8;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared::cta.b64 [%r10], 1;
  @%p1 mbarrier.init.shared::cta.b64 [%r13], 1;
  bar.sync 0;
  setp.ge.u32 %p3, %r1, 32;
  @%p3 bra READER;
{WRITER}
  ret;
READER:
{OBSERVE}
  mul.wide.u32 %rd3, %r2, 4;
  shl.b32 %r14, %r2, 2;
  add.u32 %r12, %r11, %r14;
  ld.shared.b32 %r4, [%r12];
  add.s64 %rd5, %rd2, %rd3;
  st.global.b32 [%rd5], %r4;
  ret;
}
"""

_BULK = """
  @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r10], 128;
  @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r11], [%rd1], 128, [%r10];
"""
_CP_ASYNC = """
  shl.b32 %r5, %r2, 2;
  add.u32 %r6, %r11, %r5;
  mul.wide.u32 %rd6, %r2, 4;
  add.s64 %rd7, %rd1, %rd6;
  cp.async.ca.shared.global [%r6], [%rd7], 4;
  cp.async.commit_group;
"""
_WAIT_BULK = """
WAIT0:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r10], 0;
  @!%p2 bra WAIT0;
"""
_WAIT_CP = "  cp.async.wait_group 0;\n"
_HANDOFF_BAR = "  bar.arrive 1, 64;\n"
_HANDOFF_MBAR = "  @%p1 mbarrier.arrive.shared::cta.b64 _, [%r13];\n"
_RECEIVE_BAR = "  bar.sync 1, 64;\n"
_RECEIVE_MBAR = """
WAIT1:
  mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r13], 0;
  @!%p4 bra WAIT1;
"""

#: (pattern, warp 0 after the copy is issued, warp 1 before its read, whether it is a violation)
ROWS = [
    ("bulk copy, wait then bar.arrive", _BULK + _WAIT_BULK + _HANDOFF_BAR, _RECEIVE_BAR, False),
    ("bulk copy, bar.arrive before the wait", _BULK + _HANDOFF_BAR + _WAIT_BULK, _RECEIVE_BAR, True),
    ("bulk copy, reader waits on its mbarrier", _BULK, _WAIT_BULK, False),
    ("bulk copy, wait then mbarrier handoff", _BULK + _WAIT_BULK + _HANDOFF_MBAR, _RECEIVE_MBAR, False),
    ("bulk copy, mbarrier handoff before the wait", _BULK + _HANDOFF_MBAR + _WAIT_BULK, _RECEIVE_MBAR, True),
    ("cp.async, wait_group then bar.arrive", _CP_ASYNC + _WAIT_CP + _HANDOFF_BAR, _RECEIVE_BAR, False),
    ("cp.async, bar.arrive before wait_group", _CP_ASYNC + _HANDOFF_BAR + _WAIT_CP, _RECEIVE_BAR, True),
]


def _run(writer: str, observe: str, schedule: str, ctas: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    inp = torch.arange(32, dtype=torch.int32) * 7 + 3
    out = torch.zeros(32, dtype=torch.int32)  # every CTA stores the same values
    emu.run(_KERNEL.replace("{WRITER}", writer).replace("{OBSERVE}", observe), (ctas,), inp, out,
            schedule=schedule)
    return inp, out


@pytest.mark.parametrize("ctas", [1, 8], ids=["1cta", "8ctas"])  # 8: CTAs emulated together (a gang)
@pytest.mark.parametrize("schedule", ["latest", "eager"])
@pytest.mark.parametrize("pattern,writer,observe,violation", ROWS, ids=[r[0] for r in ROWS])
def test_read_of_an_unobserved_asynchronous_write(pattern, writer, observe, violation, schedule, ctas):
    if not violation:
        inp, out = _run(writer, observe, schedule, ctas)
        assert torch.equal(out, inp)
        return
    # eager completed the copy at issue: no poison, only the clock tells; latest leaves it pending until warp
    # 0's wait, so warp 1 reads poison or (after that wait) a completion it did not observe
    expected = UnobservedWriteReadError if schedule == "eager" else (UnobservedWriteReadError, PoisonReadError)
    with pytest.raises(expected) as exc:
        _run(writer, observe, schedule, ctas)
    assert isinstance(exc.value, AsyncRaceError) and "ld reads shared memory" in str(exc.value)


def test_message_names_the_reader_the_writer_and_the_wait():
    writer = _BULK + _HANDOFF_BAR + _WAIT_BULK
    with pytest.raises(UnobservedWriteReadError) as exc:
        _run(writer, _RECEIVE_BAR, "eager")
    text = str(exc.value)
    copy_line = _KERNEL.replace("{WRITER}", writer).split("\n").index(
        "  @%p1 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r11], [%rd1], 128, [%r10];") + 1
    assert text.startswith("PTX line ") and "ld reads shared memory (offset 0x80 of CTA 0)" in text
    assert f"the bulk copy at PTX line {copy_line}" in text
    assert "never observed that write completing" in text and "Wait on its mbarrier (shared 0x" in text
