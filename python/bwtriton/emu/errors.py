"""Errors the emulator raises on purpose. Each names the PTX line and what to fix."""
from __future__ import annotations

from typing import Optional

from ..errors import BwTritonError


def short(text: str, width: int = 90) -> str:
    """An instruction's text for a message (long operand lists elided)."""
    t = " ".join(text.split())
    return t if len(t) <= width else t[:width - 5] + " ...}"


class EmulationError(BwTritonError):
    """A kernel did something the emulator flags (or cannot emulate). `line` is the PTX source line."""

    def __init__(self, message: str, *, line: Optional[int] = None, text: str = "", where: str = ""):
        loc = f"PTX line {line}: " if line else ""
        detail = f"\n    {short(text, 200)}" if text else ""
        ctx = f" [{where}]" if where else ""
        super().__init__(f"{loc}{message}{ctx}{detail}")
        self.line = line
        self.text = text
        self.where = where


class UnsupportedInstructionError(EmulationError):
    """The emulator has no semantics for this instruction (or this form of it)."""


class MemoryFaultError(EmulationError):
    """An address outside every launch buffer, shared memory window or param space."""


class UnwaitedTmemLoadError(EmulationError):
    """A TMEM write (tcgen05.mma / st / cp) or tcgen05.dealloc overwrote columns a tcgen05.ld still reads: the
    load was not followed by tcgen05.wait::ld (an anti-dependency on TMEM; register reads of the load's results
    before the wait are fine -- the hardware respects true register dependencies)."""


class AsyncRaceError(EmulationError):
    """Strict asynchronous model (docs/emulator_async.md): an access raced with an asynchronous operation whose
    completion was not observed, or crossed proxies without fence.proxy.async."""


class PoisonReadError(AsyncRaceError):
    """A read of shared memory that a pending asynchronous write (TMA load, cp.async) still owns: its completion
    (mbarrier wait / cp.async.wait_group) was not observed before the read."""


class MissingProxyFenceError(AsyncRaceError):
    """The async proxy (TMA store, tcgen05.mma/cp operand) read shared memory written through the generic proxy
    (st.shared, stmatrix) with no fence.proxy.async in between."""


class UnorderedGenericStoreError(MissingProxyFenceError):
    """The async proxy read shared memory that another warp of the CTA stored through the generic proxy (and
    perhaps fenced) with no CTA barrier between that warp's store and the issuing thread: the proxy fence orders
    only the fencing thread's own accesses."""


class AsyncOverwriteError(AsyncRaceError):
    """A write to shared memory that a pending asynchronous read (MMA operand, TMA store source) or write still
    uses: the shared-memory stage was reused before that operation's completion was observed."""


class UnobservedWriteReadError(PoisonReadError):
    """A read of shared memory (tcgen05.mma / tcgen05.cp operand, TMA store source, ld.shared, ldmatrix) whose
    newest writer is an asynchronous write (TMA load, bulk copy, cp.async) that the reading thread never observed
    completing (no wait on its mbarrier / wait_group, directly or handed on through an arrive or a barrier): on
    hardware the bytes may still be in flight, whenever the emulator's schedule happened to complete them. The
    hazard of a PoisonReadError, found from the reader's clock rather than from a still-pending write."""


class TmemRaceError(EmulationError):
    """TMEM read (tcgen05.ld) before the completion of the MMA/cp writing it was observed
    (tcgen05.commit -> mbarrier wait), or while it is still in flight."""


class LaneQuarterError(EmulationError):
    """tcgen05.ld/st touched TMEM lanes outside the warp's 32-lane quarter (warp_id % 4)."""


class TmemLeakError(EmulationError):
    """TMEM still allocated when the CTA exited (missing tcgen05.dealloc)."""


class TmemAllocError(EmulationError):
    """Bad tcgen05.alloc/dealloc: out of columns, bad nCols, alloc after relinquish, unknown dealloc."""


class DeadlockError(EmulationError):
    """No warp can make progress: all are blocked on barriers/mbarriers and no asynchronous work is pending."""


class DescriptorError(EmulationError):
    """An instruction or shared-memory descriptor the emulator cannot interpret."""
