"""Errors the emulator raises on purpose. Each names the PTX line and what to fix."""
from __future__ import annotations

from typing import Optional

from ..errors import BwTritonError


class EmulationError(BwTritonError):
    """A kernel did something the emulator flags (or cannot emulate). `line` is the PTX source line."""

    def __init__(self, message: str, *, line: Optional[int] = None, text: str = "", where: str = ""):
        loc = f"PTX line {line}: " if line else ""
        detail = f"\n    {text.strip()}" if text else ""
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
    """A register written by tcgen05.ld was read before tcgen05.wait::ld."""


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
