"""`tmem-ttir-snapshot`: keep the kernel's TTIR text for `plan-tmem`'s fallback.

`plan-tmem` runs on TTGIR; when a kernel needs more than 512 TMEM columns it re-lowers the TTIR with a
rewrite. Triton's `make_ttgir` mutates the TTIR module in place, so this companion stores its text (in
Triton's metadata dict, popped again by `plan-tmem`, so it never reaches the cached metadata JSON). It runs
only when `plan-tmem` is selected; it must stay the last TTIR pass (registry order is by name).
"""
from __future__ import annotations

from typing import Any

from bwtriton.passes.base import Pass, PassContext, Stage, register_pass


@register_pass
class TmemTtirSnapshot(Pass):
    name = "tmem-ttir-snapshot"
    stage = Stage.TTIR
    purpose = "keep the TTIR text so plan-tmem can re-lower over-budget kernels (companion of plan-tmem)"
    default_enabled = True

    def applies_to(self, target) -> bool:
        return bool(target.has_tcgen05)

    def run(self, module: Any, ctx: PassContext) -> None:
        from bwtriton.passes.plan_tmem import SNAPSHOT_KEY
        selected = (ctx.metadata.get("bwtriton") or {}).get("passes", ["plan-tmem"])
        if "plan-tmem" in selected:
            ctx.metadata[SNAPSHOT_KEY] = str(module)
            ctx.report["kept_chars"] = len(ctx.metadata[SNAPSHOT_KEY])
        return None
