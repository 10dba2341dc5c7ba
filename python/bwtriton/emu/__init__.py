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

import importlib
from typing import Any

from ..emulation import requested_emulation
from .errors import (DeadlockError, DescriptorError, EmulationError, LaneQuarterError, MemoryFaultError,
                     TmemAllocError, TmemLeakError, TmemRaceError, UnsupportedInstructionError,
                     UnwaitedTmemLoadError)

__all__ = ["run", "emulated_gpu", "EmulatedDriver", "EmulationStats", "GridSchedule", "EmulationError",
           "UnsupportedInstructionError", "MemoryFaultError",
           "UnwaitedTmemLoadError", "TmemRaceError", "LaneQuarterError", "TmemLeakError", "TmemAllocError",
           "DeadlockError", "DescriptorError"]

#: Public names and their modules, imported on first use: the driver brings torch and Triton's driver API
#: (seconds), which the CLI's other commands (`bwtriton check`, every lit RUN line) never need.
_LAZY = {"run": ".integration.run", "EmulationStats": ".integration.run", "emulated_gpu": ".integration.driver",
         "EmulatedDriver": ".integration.driver", "activate_from_env": ".integration.driver",
         "GridSchedule": ".machine.grid", "driver": ".driver"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'bwtriton.emu' has no attribute {name!r}")
    loaded = importlib.import_module(module, __name__)
    value = loaded if name == "driver" else getattr(loaded, name)
    globals()[name] = value
    return value


if requested_emulation() is not None:  # BWTRITON_EMULATE: the emulated B200 is active from import on
    __getattr__("activate_from_env")()
