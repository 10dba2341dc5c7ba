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
    """A bwtriton feature whose availability or value depends on the Triton release."""

    name: str
    #: (major, minor) ranges [first, last] of the releases it runs on; None: no bound on that side
    first: "tuple[int, int] | None" = None
    last: "tuple[int, int] | None" = None
    #: per release line ("3.6" ... "3.9"): what upstream does itself there and what bwtriton adds (measured:
    #: docs/triton_versions.md)
    notes: "dict[str, str] | None" = None
    #: what to use instead where the feature is unavailable
    instead: str = ""

    def available(self) -> bool:
        version = installed()[:2]
        return (self.first is None or version >= self.first) and (self.last is None or version <= self.last)

    def note(self) -> str:
        """The note for the installed release line, or ''."""
        return (self.notes or {}).get("{}.{}".format(*installed()[:2]), "")


FEATURES: dict[str, Feature] = {f.name: f for f in (
    Feature("compile driver, enable(), stage hook"),
    Feature("verifier (bwtriton check) and emulator (bwtriton emulate, emulated_gpu)"),
    Feature("plan-tmem, verify-tcgen05 passes"),
    Feature("insert-proxy-fence", notes={
        "3.6": "repairs Triton's missing in-loop fence.proxy.async (the recurrence kernel of triton#10590)",
        "3.7": "Triton fences inside the loop itself: nothing to repair on the corpus",
        "3.8": "Triton fences inside the loop itself: nothing to repair on the corpus",
        "3.9": "Triton fences inside the loop itself: nothing to repair on the corpus"}),
    Feature("insert-tcgen05-wait-ld", notes={
        "3.9": "Triton 3.9 adds tmem_wait_insertion, yet LLVM still reads tcgen05.ld results before the wait in "
               "every tcgen05 example: the pass inserts 1-5 waits per kernel"}),
    Feature("lower-dot-scaled-portable (tl.dot_scaled on Hopper and Blackwell)"),
    Feature("pair-ctas (two_cta=True for tl.dot)", notes={
        "3.6": "Triton splits B and marks [K, N] dots 2-CTA itself; the pass marks the rest and adds the exit "
               "barrier",
        "3.7": "Triton broadcasts B and marks nothing: the pass splits B along N and adds the cluster barrier "
               "before each MMA",
        "3.8": "as 3.7; Triton itself fails the TMA b.T kernel at num_ctas=2 (accelerate-matmul)",
        "3.9": "as 3.7; Triton adds its own exit barrier, which the pass keeps"}),
    Feature("pair-ctas-scaled (2-CTA block-scaled MMAs from the PTX)"),
    Feature("Cluster Launch Control (bwtriton.language.clc, compile(clc=True))", notes={
        "3.9": "Triton 3.9 also has its own clc=True option (to_clc / lower_clc passes); bwtriton's works on "
               "3.6 - 3.9 with a static fallback from the same source"}),
    Feature("Gluon kernels of the library (Hopper mixed-input GEMM, dq_wgmma)", notes={
        "3.9": "written in 3.9's Gluon spellings (reinterpret, gl.barrier), backfilled on 3.6 - 3.8 by "
               "bwtriton.compat.gluon"}),
)}


def table() -> list[tuple[Feature, bool, str]]:
    """(feature, available on the installed Triton, note) for every row."""
    rows = []
    for feature in FEATURES.values():
        ok = feature.available()
        note = feature.note() if ok else f"not on this Triton; {feature.instead}"
        rows.append((feature, ok, note))
    return rows


def require(name: str) -> None:
    """Refuse feature `name` by name when the installed Triton cannot run it, saying what to use instead."""
    feature = FEATURES[name]
    if not feature.available():
        version = ".".join(map(str, installed()))
        raise CompileError(f"{feature.name} is not available on Triton {version}; {feature.instead}")

