"""Which bwtriton features the installed Triton can run, and what upstream now does itself: one row per feature
that depends on the Triton release (`bwtriton doctor` prints the table; docs/triton_versions.md explains it).

A feature that a release cannot support is refused by name on that release (`require`), never a traceback.
"""
from __future__ import annotations

from dataclasses import dataclass
from ..errors import CompileError
from .versions import installed


@dataclass(frozen=True)
class Feature:
    """A bwtriton feature whose availability depends on the Triton release."""

    name: str
    #: (major, minor) ranges [first, last] of the releases it runs on; None: no bound on that side
    first: "tuple[int, int] | None" = None
    last: "tuple[int, int] | None" = None
    #: what upstream Triton does itself on the releases where it matters, and what bwtriton adds there
    upstream: str = ""
    #: what to use instead where the feature is unavailable
    instead: str = ""

    def available(self) -> bool:
        version = installed()[:2]
        return (self.first is None or version >= self.first) and (self.last is None or version <= self.last)


FEATURES: dict[str, Feature] = {f.name: f for f in (
    Feature("compile driver, enable(), stage hook"),
    Feature("verifier (bwtriton check) and emulator (bwtriton emulate, emulated_gpu)"),
    Feature("plan-tmem, insert-ld-wait, verify-tcgen05 passes"),
    Feature("lower-dot-scaled-portable (tl.dot_scaled on Hopper and Blackwell)"),
    Feature("pair-ctas (two_cta=True for tl.dot)"),
    Feature("pair-ctas-scaled (2-CTA block-scaled MMAs from the PTX)"),
    Feature("Cluster Launch Control (bwtriton.language.clc, compile(clc=True))",
            upstream="Triton 3.9 has its own clc=True option (ttnvgpuir to-clc / lower-clc passes)"),
    Feature("Gluon kernels of the library (Hopper mixed-input GEMM, dq_wgmma)"),
)}


def table() -> list[tuple[Feature, bool, str]]:
    """(feature, available on the installed Triton, note) for every row."""
    rows = []
    for feature in FEATURES.values():
        ok = feature.available()
        note = feature.upstream if ok else f"not on this Triton; {feature.instead}"
        rows.append((feature, ok, note))
    return rows


def require(name: str) -> None:
    """Refuse feature `name` by name when the installed Triton cannot run it, saying what to use instead."""
    feature = FEATURES[name]
    if not feature.available():
        version = ".".join(map(str, installed()))
        raise CompileError(f"{feature.name} is not available on Triton {version}; {feature.instead}")

