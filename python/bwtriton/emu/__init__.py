"""A functional CPU emulator for the sm_100a PTX that Triton 3.6 (and bwtriton) emit: SIMT warps over numpy,
shared memory, TMEM, mbarriers, tcgen05 (alloc/ld/st/mma/commit/cp), TMA, with run-time protocol checks.

    import bwtriton, bwtriton.emu as emu
    k = bwtriton.compile(matmul_kernel, signature=..., constexprs=..., target="sm_100a")
    stats = emu.run(k, (M // 128, N // 128), a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0))

Or as a Triton driver (an emulated B200): ordinary launches with CPU tensors run here.

    with emu.emulated_gpu("sm_100a"):
        matmul_kernel[grid](a, b, c, M, N, K, ...)      # a, b, c: CPU torch tensors

`BWTRITON_EMULATE=sm_100a` activates it on import, `pytest --emulate sm_100a` for a test session.

Layout: `machine/` (the state -- launch, clusters, CTAs, warps, memories, the asynchronous engine, schedulers,
gangs), `isa/` (instruction semantics per family, the state each family declares, and the opcode -> handler
table), `integration/` (the Triton driver and launcher, `run` and its argument packer, the device's properties,
the device remap, the pytest plugin), `timing/` (the optional timing model). See docs/emulator.md.
"""
from __future__ import annotations

from . import driver  # noqa: F401 - `bwtriton.emu.driver`, the public module name
from .errors import (DeadlockError, DescriptorError, EmulationError, LaneQuarterError, MemoryFaultError,
                     TmemAllocError, TmemLeakError, TmemRaceError, UnsupportedInstructionError,
                     UnwaitedTmemLoadError)
from .integration.driver import EmulatedDriver, activate_from_env, emulated_gpu
from .integration.run import EmulationStats, run
from .machine.grid import GridSchedule

__all__ = ["run", "emulated_gpu", "EmulatedDriver", "EmulationStats", "GridSchedule", "EmulationError",
           "UnsupportedInstructionError", "MemoryFaultError",
           "UnwaitedTmemLoadError", "TmemRaceError", "LaneQuarterError", "TmemLeakError", "TmemAllocError",
           "DeadlockError", "DescriptorError"]

activate_from_env()
