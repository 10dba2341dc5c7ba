"""bwtriton's passes (importable as `bwtriton.passes`; python/bwtriton/passes links here).

`PIPELINE` below is the whole order of our passes: for each Triton stage, the passes that run on its output,
top to bottom. The stage hook (`bwtriton.pipeline`) runs the selected ones in this order after Triton's stage
of the same name. A pass with helpers is a package named as the pass; each pass's module says why it runs where
it does. Adding a pass: write its module (or package), import it here and put it in its stage's row.
"""
from __future__ import annotations

from bwtriton.errors import UnknownPassError, suggest

from .base import REGISTRY, Pass, PassContext, PassOption, Stage, register_pass
from .insert_ld_wait import InsertTcgen05WaitLd
from .insert_proxy_fence import InsertProxyFence
from .lower_dot_scaled_portable import LowerDotScaledPortable
from .pair_ctas import PairCtas, PairCtasHandoff, PairCtasScaled
from .plan_tmem import PlanTmem, TmemTtirSnapshot
from .verify_tcgen05 import VerifyTcgen05

PIPELINE: dict[Stage, tuple[type[Pass], ...]] = {
    Stage.TTIR: (
        LowerDotScaledPortable,  # before make_ttgir: accelerate-matmul asserts on UE4M3 scales, fails on M/N-packed fp4
        TmemTtirSnapshot,     # last TTIR pass: the text plan-tmem re-lowers must include every TTIR rewrite
    ),
    Stage.TTGIR: (
        PlanTmem,             # first: its fallback replaces the whole module, later rewrites must see the result
        PairCtas,             # before make_llir, which aborts on a CTA-split accumulator not marked 2-CTA
    ),
    Stage.LLIR: (),
    Stage.PTX: (
        PairCtasScaled,       # first: pairs a 1-CTA block-scaled kernel (then it is a 2-CTA kernel for the rest)
        PairCtasHandoff,      # rewrites the 2-CTA mainloop's synchronisation; later passes see the result
        InsertTcgen05WaitLd,  # a repair of Triton's PTX
        InsertProxyFence,     # a repair of Triton's PTX: the fence Triton 3.6 hoists out of a loop
        VerifyTcgen05,        # last: checks the final PTX, after every rewrite
    ),
}


def all_passes() -> dict[str, type[Pass]]:
    """Every registered pass by name, in pipeline order: stage by stage, `PIPELINE`'s row, then passes
    registered from outside the table (tests, plugins) in registration order."""
    in_table = [cls for stage in Stage for cls in PIPELINE.get(stage, ())]
    extra = [cls for cls in REGISTRY.values() if cls not in in_table]
    stage_index = {s: i for i, s in enumerate(Stage)}
    ordered = sorted(in_table + extra, key=lambda c: (stage_index[c.stage], c not in in_table))
    return {cls.name: cls for cls in ordered}


def get_pass(name: str) -> type[Pass]:
    """The pass class registered as `name`; unknown names raise with the closest valid names."""
    passes = all_passes()
    if name not in passes:
        raise UnknownPassError(f"unknown pass {name!r}.{suggest(name, passes)} "
                               f"Run `bwtriton passes` to list them.")
    return passes[name]


def _check_table() -> None:
    """Each pass sits in its own stage's row, after every pass it requires."""
    order = [cls.name for stage in Stage for cls in PIPELINE.get(stage, ())]
    for stage, row in PIPELINE.items():
        for cls in row:
            if cls.stage is not stage:
                raise TypeError(f"PIPELINE: {cls.name} is a {cls.stage.value} pass, listed under {stage.value}")
            for dep in cls.requires:
                if dep not in order or order.index(dep) > order.index(cls.name):
                    raise TypeError(f"PIPELINE: {cls.name} requires {dep}, which must be listed before it")


_check_table()

__all__ = ["PIPELINE", "Pass", "PassContext", "PassOption", "Stage", "register_pass", "all_passes", "get_pass"]
