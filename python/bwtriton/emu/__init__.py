"""A functional CPU emulator for the sm_100a PTX that Triton 3.6 (and bwtriton) emit: SIMT warps over numpy,
shared memory, TMEM, mbarriers, tcgen05 (alloc/ld/st/mma/commit/cp), TMA, with run-time protocol checks.

    import bwtriton, bwtriton.emu as emu
    k = bwtriton.compile(matmul_kernel, signature=..., constexprs=..., target="sm_100a")
    stats = emu.run(k, (M // 128, N // 128), a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0))

See docs/emulator.md.
"""
from __future__ import annotations

from .errors import (DeadlockError, DescriptorError, EmulationError, LaneQuarterError, MemoryFaultError,
                     TmemAllocError, TmemLeakError, TmemRaceError, UnsupportedInstructionError,
                     UnwaitedTmemLoadError)
from .runner import EmulationStats, run

__all__ = ["run", "EmulationStats", "EmulationError", "UnsupportedInstructionError", "MemoryFaultError",
           "UnwaitedTmemLoadError", "TmemRaceError", "LaneQuarterError", "TmemLeakError", "TmemAllocError",
           "DeadlockError", "DescriptorError"]
