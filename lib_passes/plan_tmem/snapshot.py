"""`tmem-ttir-snapshot`: keep the kernel's TTIR text for `plan-tmem`'s fallback, and reject single
accumulators that can never fit in TMEM with a clear message (Triton 3.6 would fail inside `make_ttgir` with a
raw verifier error before `plan-tmem` runs).

`plan-tmem` runs on TTGIR; when a kernel needs more than 512 TMEM columns it re-lowers the TTIR with a
rewrite. Triton's `make_ttgir` mutates the TTIR module in place, so this pass provides its text to
`plan-tmem` (which `requires` it; selecting plan-tmem selects it). It is the last TTIR pass of `PIPELINE`, so
the text includes every TTIR rewrite.
"""
from __future__ import annotations

from typing import Any

from ..base import Pass, PassContext, Stage, register_pass
from .analyze import oversized_dots


@register_pass
class TmemTtirSnapshot(Pass):
    name = "tmem-ttir-snapshot"
    stage = Stage.TTIR
    purpose = "keep the TTIR text so plan-tmem can re-lower over-budget kernels (companion of plan-tmem)"
    default_enabled = False  # selected through plan-tmem's `requires`

    def applies_to(self, target) -> bool:
        return bool(target.has_tcgen05)

    def run(self, module: Any, ctx: PassContext) -> None:
        text = str(module)
        too_big = oversized_dots(text, num_ctas=int(ctx.metadata.get("num_ctas", 1) or 1))
        if too_big:
            listing = "; ".join(f"%{d['name']} ({d['location'] or 'unknown location'}): {d['shape'][0]}x"
                                f"{d['shape'][1]}x{d['dtype']} accumulator = {d['columns']} columns"
                                for d in too_big)
            ctx.error(f"a single MMA accumulator exceeds the 512 TMEM columns of a CTA: {listing}. No rewrite can "
                      f"split one accumulator here: reduce BLOCK_N (columns = N for fp32 with BLOCK_M <= 128) or "
                      f"BLOCK_M (each 128 rows adds N columns), or spread the tile over a 2-CTA cluster.")
        ctx.provide(text)
        ctx.report["kept_chars"] = len(text)
        return None
