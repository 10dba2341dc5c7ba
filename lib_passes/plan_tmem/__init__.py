"""TMEM planning: `tmem-ttir-snapshot` (TTIR) keeps the program text, `plan-tmem` (TTGIR) plans tensor memory and
re-lowers over-budget kernels from that text (`fallback`). `analyze` reads a TTGIR module into a plan,
`placement` places it like Triton's allocator."""
from __future__ import annotations

from .plan_tmem import PlanTmem
from .snapshot import TmemTtirSnapshot

__all__ = ["PlanTmem", "TmemTtirSnapshot"]
