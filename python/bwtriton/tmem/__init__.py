"""TMEM planning: the per-kernel plan of tensor-memory allocations, its report table and map picture, and
an autotune pruning helper. The `plan-tmem` pass (bwtriton.passes.plan_tmem) fills the plan during compiles."""
from __future__ import annotations

from .plan import TmemAllocation, TmemPlan, round_alloc_size
from .analyze import plan_from_ttgir

__all__ = ["TmemAllocation", "TmemPlan", "round_alloc_size", "plan_from_ttgir"]
