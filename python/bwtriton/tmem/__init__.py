"""TMEM facts and reports: the data model of a kernel's tensor-memory plan (`TmemPlan`, footprints), its report
table and map picture, and an autotune pruning helper. The `plan-tmem` pass (lib_passes/plan_tmem/) builds the
plan during compiles; `compiled.reports["plan-tmem"]` holds it."""
from __future__ import annotations

from .autotune import estimate_shared_bytes, estimate_tmem_columns, prune_configs_by_resources
from .plan import TmemAllocation, TmemPlan, round_alloc_size
from .render import render_svg, render_table, write_tmem_map

__all__ = ["TmemAllocation", "TmemPlan", "round_alloc_size", "render_svg", "render_table",
           "write_tmem_map", "prune_configs_by_resources", "estimate_tmem_columns", "estimate_shared_bytes"]
