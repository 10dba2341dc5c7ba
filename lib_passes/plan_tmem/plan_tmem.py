"""`plan-tmem`: plan tensor memory (TMEM) before Triton allocates it, and keep over-budget kernels correct.

Runs on Triton's TTGIR, before `make_llir`'s `triton-tensor-memory-allocation`. It lists every
`ttng.tmem_alloc` (accumulators with their multi-buffering, block-scale tensors, TMEM A operands), sizes them
in columns and lanes, times them (walk-order live ranges), places them like Triton's allocator does, and
reports the total against the 512 columns of a CTA and the CTAs per SM that TMEM allows.

Why a fallback: upstream Triton 3.6 lets a kernel whose plan exceeds 512 columns "compile" to a body of
`trap;` (tmem_size > 512 in the metadata, no diagnostic). Here, when the plan does not fit, the pass re-lowers
the kernel's TTIR (provided by the `tmem-ttir-snapshot` pass it requires) with correctness-preserving rewrites
from `fallback` (one accumulator buffer instead of two; one K loop per accumulator) until the plan fits,
and records which one it applied. If none fits, the compile fails with a message that names the
allocations, their sizes and what to change.
"""
from __future__ import annotations

from typing import Any

from bwtriton.targets import TMEM_COLUMNS
from bwtriton.tmem.render import render_table

from ..base import Pass, PassContext, PassOption, Stage, register_pass
from . import fallback as fb
from .analyze import plan_from_ttgir
from .snapshot import TmemTtirSnapshot


@register_pass
class PlanTmem(Pass):
    name = "plan-tmem"
    stage = Stage.TTGIR
    purpose = "plan TMEM columns/lanes per allocation; re-lower over-budget kernels instead of a trap kernel"
    options = (
        PassOption("max_columns", int, TMEM_COLUMNS, "TMEM column budget per CTA (512 on sm_100a)"),
        PassOption("fallback", bool, True, "when over budget, try correctness-preserving rewrites before failing"),
    )
    default_enabled = True
    requires = (TmemTtirSnapshot.name,)  # the TTIR its fallback re-lowers

    def applies_to(self, target) -> bool:
        return bool(target.has_tcgen05)

    def run(self, module: Any, ctx: PassContext) -> Any:
        budget = int(ctx.options.get("max_columns", TMEM_COLUMNS))
        ttir = ctx.required(TmemTtirSnapshot.name)
        plan = plan_from_ttgir(str(module), budget=budget)
        ctx.report.update(plan.to_report())
        ctx.report["upstream"] = {"used_columns": plan.used_columns, "alloc_columns": plan.demand_columns}
        for conflict in plan.conflicts():   # lanes x columns: M=64 tiles at +0/+16 sharing columns are not one
            ctx.warn(f"TMEM placement conflict: {conflict}")
        if plan.fits:
            return None
        if not ctx.options.get("fallback", True):
            ctx.error(_over_budget_message(plan, budget, "fallback disabled (plan-tmem{fallback=false})"))
        if ttir is None:
            ctx.error(_over_budget_message(
                plan, budget, "no TTIR to re-lower (Gluon kernels and .ttgir inputs start after TTIR)"))
        new_module, new_plan, attempts = _try_fallbacks(ttir, module, plan, ctx, budget)
        ctx.report["fallback_attempts"] = attempts
        if new_module is None:
            ctx.error(_over_budget_message(plan, budget, "; ".join(
                f"{a['rewrite']}: {a['result']}" for a in attempts) or "no rewrite applies to this kernel"))
        new_plan.fallbacks = [a for a in attempts if a["result"] == "applied"]
        report = new_plan.to_report()
        ctx.report.update(report)
        ctx.warn(f"TMEM demand {plan.used_columns} columns exceeded {budget}; applied "
                 f"{', '.join(a['rewrite'] for a in new_plan.fallbacks)} -> {new_plan.used_columns} columns")
        return new_module

    @classmethod
    def render_report(cls, report: dict) -> str:
        return render_table(report)


def _try_fallbacks(ttir: str, module: Any, plan0: Any, ctx: PassContext, budget: int):
    """Apply the rewrites cumulatively, re-lowering after each, until the plan fits. `plan0` is the plan of
    `module`, Triton's own lowering. Returns (new module, its plan, attempts), or (None, None, attempts)."""
    attempts: list[dict] = []
    current = ttir
    multi_buffered = any(a.kind == "acc" and a.buffers > 1 for a in plan0.allocations)
    best = plan0.used_columns  # columns of the best plan so far (a rewrite is kept only when it lowers the demand)
    for rewrite_name, rewrite in (("single-buffer-accumulators", fb.disallow_acc_multi_buffer),
                                  ("serialize-accumulators", fb.serialize_accumulators)):
        if rewrite_name == "single-buffer-accumulators" and not multi_buffered:
            attempts.append({"rewrite": rewrite_name, "result": "not applicable (no multi-buffered accumulator)"})
            continue
        out = rewrite(current)
        if out is None:
            attempts.append({"rewrite": rewrite_name, "result": "not applicable"})
            continue
        text, what = out
        try:
            new_module = fb.lower_ttir_to_ttgir(text, module.context, ctx.metadata, ctx.target.capability)
        except Exception as exc:  # Triton rejected the rewritten program: keep trying the others
            attempts.append({"rewrite": rewrite_name, "detail": what,
                             "result": f"Triton could not lower it ({type(exc).__name__}: {str(exc)[:200]})"})
            continue
        new_plan = plan_from_ttgir(str(new_module), budget=budget)
        attempt = {"rewrite": rewrite_name, "detail": what, "columns": new_plan.used_columns}
        attempts.append(attempt)
        if new_plan.used_columns >= best:
            attempt["result"] = f"no gain ({new_plan.used_columns} columns); reverted"
            continue
        best = new_plan.used_columns
        current = text
        attempt["result"] = "applied" if new_plan.fits else f"kept, still {new_plan.used_columns} columns"
        if new_plan.fits:
            for a in attempts:  # earlier rewrites kept in `current` are part of the fix
                if a["result"].startswith("kept"):
                    a["result"] = "applied"
            return new_module, new_plan, attempts
    return None, None, attempts


def _over_budget_message(plan, budget: int, why_no_fallback: str) -> str:
    rows = "\n".join(
        f"  - %{a.name} ({a.location or 'unknown location'}): {a.kind} {'x'.join(map(str, a.shape))}x{a.dtype}, "
        f"{a.columns} columns{' x ' + str(a.lanes) + ' lanes' if a.lanes != 128 else ''}"
        f"{f' ({a.buffers} buffers)' if a.buffers > 1 else ''}, live ops [{a.live_start}, {a.live_end})"
        for a in plan.allocations)
    advice = []
    if any(a.buffers > 1 and a.kind == "acc" for a in plan.allocations):
        advice.append("keep one accumulator buffer (tl.range(..., disallow_acc_multi_buffer=True)) or lower "
                      "num_stages")
    accs = [a for a in plan.allocations if a.kind == "acc"]
    if len(accs) > 1:
        advice.append(f"use fewer accumulators per program (this one has {len(accs)} live together)")
    widest = max(plan.allocations, key=lambda a: a.columns)
    advice.append(f"reduce BLOCK_N (e.g. %{widest.name} uses {widest.columns} columns; halving BLOCK_N halves "
                  f"them) or BLOCK_M")
    return (f"kernel needs {plan.used_columns} TMEM columns per CTA but only {budget} exist (upstream Triton would "
            f"emit a trap-only kernel). Allocations:\n{rows}\nNo automatic fallback: {why_no_fallback}.\n"
            f"To fix: {'; '.join(advice)}.")
