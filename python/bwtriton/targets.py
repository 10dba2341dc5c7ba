"""Compilation targets by name (sm_100a, sm_90a, ...) and what each one can do."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import UnknownTargetError, suggest


@dataclass(frozen=True)
class Target:
    """A CUDA compilation target. `capability` is what Triton's `GPUTarget` takes (100 -> sm_100a)."""

    name: str
    capability: int
    has_tcgen05: bool = False          # Blackwell datacenter: tcgen05.mma + TMEM
    has_wgmma: bool = False            # Hopper warpgroup MMA
    native_block_scaled: bool = False  # hardware block-scaled MMA (kind::mxf4nvf4 etc.) that Triton 3.6 lowers to

    @property
    def family(self) -> str:
        return {10: "blackwell", 12: "blackwell-consumer", 9: "hopper", 8: "ampere"}[self.capability // 10]

    def gpu_target(self):
        """The `triton.backends.compiler.GPUTarget` for this target."""
        from triton.backends.compiler import GPUTarget
        return GPUTarget("cuda", self.capability, 32)


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("sm_100a", 100, has_tcgen05=True, native_block_scaled=True),
    Target("sm_103a", 103, has_tcgen05=True, native_block_scaled=True),
    # sm_120a (consumer Blackwell) has no tcgen05/TMEM; Triton 3.6 lowers dots to mma.sync there, including
    # block-scaled ones (mma.sync ... kind::mxf4nvf4.block_scale.scale_vec::4X, measured).
    Target("sm_120a", 120, native_block_scaled=True),
    Target("sm_90a", 90, has_wgmma=True),
    Target("sm_80", 80),
)}


def get_target(name: "str | Target") -> Target:
    """Look a target up by name; unknown names raise `UnknownTargetError` listing the valid ones."""
    if isinstance(name, Target):
        return name
    key = str(name).strip().lower()
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
