"""`pair-ctas` (TTGIR): 2-CTA ``cta_group::2`` tcgen05 MMAs for 256-row tiles. `eligibility` decides whether a
compiled tile may pair, `layouts` holds the text rewrites; `handoff` (pair-ctas-handoff, PTX) replaces the cluster
barrier per K step by the mbarrier handoff; `scaled` (pair-ctas-scaled, PTX) pairs 1-CTA block-scaled kernels."""
from __future__ import annotations

from .handoff import PairCtasHandoff
from .pair_ctas import PairCtas
from .scaled import PairCtasScaled

__all__ = ["PairCtas", "PairCtasHandoff", "PairCtasScaled"]
