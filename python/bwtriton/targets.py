"""Compilation targets by name (sm_100a, sm_90a, ...), what each one can do, and the figures of the GPU the
emulator models for it: the one home of the tree's hardware facts."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from .errors import UnknownTargetError, suggest


#: Most shared memory one CTA may use (static + dynamic, opt-in maximum), bytes, per architecture: CUDA C++
#: Programming Guide, "Technical Specifications per Compute Capability" (227 KiB on 9.0/10.x/11.0, 99 KiB on
#: 12.x, 163 KiB on 8.0).
MAX_SHARED_BYTES = {"sm_80": 166912, "sm_90": 232448, "sm_100": 232448, "sm_101": 232448, "sm_103": 232448,
                    "sm_110": 232448, "sm_120": 101376, "sm_121": 101376}
#: Tensor Memory per CTA on tcgen05 targets (PTX ISA #tensor-memory): 128 lanes x 512 columns of 32 bits.
TMEM_LANES = 128
TMEM_COLUMNS = 512
#: Column counts `tcgen05.alloc` accepts: a power of two in [32, TMEM_COLUMNS]
TMEM_ALLOC_COLUMNS = (32, 64, 128, 256, 512)
#: Streaming multiprocessors of a B200 (sm_100a; the emulated B300, sm_103a, reports the same)
B200_SM_COUNT = 148
#: Streaming multiprocessors of an H100 / H200 SXM (sm_90a): what the Hopper kernels' configs assume without a device
H100_SM_COUNT = 132


@dataclass(frozen=True)
class Device:
    """A GPU's figures as its CUDA driver reports them; the emulator answers these for its target's device."""

    name: str
    sm_count: int
    #: shared memory bytes: per block without opt-in, per block with opt-in (MAX_SHARED_BYTES), per SM
    shared_bytes_per_block: int
    shared_bytes_per_block_optin: int
    shared_bytes_per_sm: int
    registers_per_sm: int
    max_threads_per_sm: int
    sm_clock_khz: int
    mem_clock_khz: int
    mem_bus_width_bits: int
    memory_bytes: int
    l2_bytes: int
    warp_size: int = 32


#: B200 (NVIDIA Blackwell datasheet; CUDA Programming Guide, compute capability 10.0): 148 SMs at 1965 MHz,
#: 228 KiB shared memory per SM, 64 K registers per SM, 192 GB HBM3e (8192-bit bus, 3996 MHz), 126 MiB L2.
B200 = Device("NVIDIA B200", sm_count=B200_SM_COUNT, shared_bytes_per_block=48 * 1024,
              shared_bytes_per_block_optin=MAX_SHARED_BYTES["sm_100"], shared_bytes_per_sm=228 * 1024,
              registers_per_sm=65536, max_threads_per_sm=2048, sm_clock_khz=1965000, mem_clock_khz=3996000,
              mem_bus_width_bits=8192, memory_bytes=192 * 2 ** 30, l2_bytes=126 * 2 ** 20)
#: The emulated B300 (sm_103a) reports a B200's figures under its own name.
B300 = replace(B200, name="NVIDIA B300")
#: H200 SXM (NVIDIA H200 datasheet; CUDA Programming Guide, compute capability 9.0): 132 SMs at 1980 MHz, 228 KiB
#: shared memory per SM, 64 K registers per SM, 141 GB HBM3e at 4.8 TB/s (6144-bit bus, 3201 MHz), 50 MiB L2.
H200 = Device("NVIDIA H200", sm_count=H100_SM_COUNT, shared_bytes_per_block=48 * 1024,
              shared_bytes_per_block_optin=MAX_SHARED_BYTES["sm_90"], shared_bytes_per_sm=228 * 1024,
              registers_per_sm=65536, max_threads_per_sm=2048, sm_clock_khz=1980000, mem_clock_khz=3201000,
              mem_bus_width_bits=6144, memory_bytes=141 * 10 ** 9, l2_bytes=50 * 2 ** 20)


def max_shared_bytes(arch: str) -> "int | None":
    """The per-CTA shared memory limit of `arch` ("sm_100", "sm_100a", "sm_90a", ...), or None when unknown."""
    base = arch[:-1] if arch[-1:] in ("a", "f") else arch
    return MAX_SHARED_BYTES.get(base)


@dataclass(frozen=True)
class Target:
    """A CUDA compilation target. `capability` is what Triton's `GPUTarget` takes (100 -> sm_100a)."""

    name: str
    capability: int
    has_tcgen05: bool = False          # Blackwell datacenter: tcgen05.mma + TMEM
    has_wgmma: bool = False            # Hopper warpgroup MMA
    native_block_scaled: bool = False  # hardware block-scaled MMA (kind::mxf4nvf4 etc.) that Triton 3.6 lowers to
    #: Most shared memory one CTA may use (opt-in maximum, bytes): MAX_SHARED_BYTES of its architecture.
    max_shared_bytes: int = MAX_SHARED_BYTES["sm_100"]
    #: Tensor Memory columns and lanes per CTA (none on targets without tcgen05).
    tmem_columns: int = 0
    tmem_lanes: int = 0
    #: The GPU the emulator models for this target (None: not emulated)
    device: Optional[Device] = None

    @property
    def sm_count(self) -> int:
        """SMs of the device the emulator models for this target (0: not emulated)."""
        return self.device.sm_count if self.device is not None else 0

    @property
    def family(self) -> str:
        return {10: "blackwell", 12: "blackwell-consumer", 9: "hopper", 8: "ampere"}[self.capability // 10]

    def gpu_target(self):
        """The `triton.backends.compiler.GPUTarget` for this target."""
        from triton.backends.compiler import GPUTarget
        return GPUTarget("cuda", self.capability, 32)


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("sm_100a", 100, has_tcgen05=True, native_block_scaled=True, tmem_columns=TMEM_COLUMNS,
           tmem_lanes=TMEM_LANES, device=B200),
    Target("sm_103a", 103, has_tcgen05=True, native_block_scaled=True, tmem_columns=TMEM_COLUMNS,
           tmem_lanes=TMEM_LANES, device=B300),
    # sm_120a (consumer Blackwell) has no tcgen05/TMEM; Triton 3.6 lowers dots to mma.sync there, including
    # block-scaled ones (mma.sync ... kind::mxf4nvf4.block_scale.scale_vec::4X, measured).
    Target("sm_120a", 120, native_block_scaled=True, max_shared_bytes=MAX_SHARED_BYTES["sm_120"]),
    Target("sm_90a", 90, has_wgmma=True, max_shared_bytes=MAX_SHARED_BYTES["sm_90"], device=H200),
    Target("sm_80", 80, max_shared_bytes=MAX_SHARED_BYTES["sm_80"]),
)}


#: The targets the emulator models (those with a device): sm_100a, sm_103a, sm_90a.
EMULATED_TARGETS = tuple(name for name, t in TARGETS.items() if t.device is not None)


def get_target(name: "str | Target") -> Target:
    """Look a target up by name; unknown names raise `UnknownTargetError` listing the valid ones."""
    if isinstance(name, Target):
        return name
    if not isinstance(name, str):
        raise UnknownTargetError(f"target must be a name such as 'sm_100a' (or a bwtriton Target), got "
                                 f"{type(name).__name__} {name!r}. Valid targets: {', '.join(TARGETS)}.")
    key = name.strip().lower()
    if key in TARGETS:
        return TARGETS[key]
    raise UnknownTargetError(
        f"unknown target {name!r}.{suggest(key, TARGETS)} Valid targets: {', '.join(TARGETS)}.")


def target_for_capability(capability: int) -> Target:
    """The target matching a GPU's compute capability (major*10+minor), e.g. 90 -> sm_90a."""
    for t in TARGETS.values():
        if t.capability == capability:
            return t
    if capability // 10 == 8:
        return TARGETS["sm_80"]
    raise UnknownTargetError(f"no bwtriton target for compute capability {capability}; "
                             f"valid targets: {', '.join(TARGETS)}.")


def target_name(text: str) -> str:
    """argparse `type=` for every `--target` option: the canonical target name, or a usage error that lists the
    valid targets (argparse prints it as ``error: argument --target: ...`` and exits 2)."""
    import argparse
    try:
        return get_target(text).name
    except UnknownTargetError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
