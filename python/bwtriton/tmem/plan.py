"""The TMEM plan: what each tensor-memory allocation of a kernel needs, where it goes, and whether it fits.

Facts used (docs/tmem.md "TMEM facts" gives each with its primary source):
- TMEM per CTA is 128 lanes x 512 columns x 32 bit; `tcgen05.alloc` takes a power of two in [32, 512] columns.
- An accumulator element takes `bitwidth * colStride` bits of a 32-bit column word (fp32: one column per
  element of a row; packed 16-bit: two per column; unpacked 16-bit, colStride 2: one per column).
- M=64 single-block layouts (Layout F) use half of the lanes: 16 lanes of each 32-lane sub-partition, at lane
  offset 0 or 16. Triton allocates them in "row halves" (startRow 0/1 -> lane offset 0/16), so two such
  accumulators can share columns.
- Scale factors (`#ttng.tensor_memory_scales_encoding`) are 8-bit, 4 per column word, replicated to all four
  sub-partitions: an [M, K/g] scale tile takes ceil(M/32) * ceil((K/g)/4) columns.
- Placement mirrors Triton's `triton-tensor-memory-allocation`: allocations in walk order, live interval from
  the alloc to the last use (a use inside a region counts as the whole region), first fit over (row half,
  column), total = highest column used, rounded up to the next legal `tcgen05.alloc` size.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ..targets import TMEM_ALLOC_COLUMNS as ALLOC_SIZES, TMEM_COLUMNS, TMEM_LANES
from .region import ALL_LANES, TmemRegion, d_tile_lanes

#: Triton allocates lanes in halves of 64 "rows" (a half is 16 lanes of each 32-lane sub-partition).
ROW_HALVES = 2


@dataclass
class TmemAllocation:
    """One `ttng.tmem_alloc` and what it occupies."""

    name: str                      # SSA result name without '%', e.g. 'acc0'
    location: str                  # 'file.py:line:col' or ''
    shape: list[int]               # full memdesc shape, buffers first
    dtype: str                     # MLIR element type, e.g. 'f32'
    kind: str                      # 'acc' | 'scales' | 'operand' | 'other'
    buffers: int                   # multi-buffering depth (product of leading dims)
    columns: int                   # total columns of the allocation (all buffers)
    lanes: int                     # 128, or 64 for half-lane (M=64 single block) layouts
    block_m: int = 128
    block_n: int = 0
    col_stride: int = 1
    live_start: int = 0            # walk-order op indices: [live_start, live_end)
    live_end: int = 0
    col_offset: int = -1           # planned placement (-1 until placed)
    lane_offset: int = 0           # 0, or 16 for the upper row half
    op_index: int = 0

    @property
    def column_range(self) -> tuple[int, int]:
        return (self.col_offset, self.col_offset + self.columns)

    @property
    def row_half(self) -> int:
        return self.lane_offset // 16

    @property
    def region(self) -> TmemRegion:
        """Its lanes x columns: a half-lane (Layout F) allocation holds 16 lanes of each sub-partition."""
        lanes = d_tile_lanes(64, 1, False, self.lane_offset) if self.lanes < TMEM_LANES else ALL_LANES
        return TmemRegion(lanes, *self.column_range)

    def live_with(self, other: "TmemAllocation") -> bool:
        """Whether the two live ranges overlap (both allocations exist at once)."""
        return self.live_start < other.live_end and other.live_start < self.live_end

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["column_range"] = list(self.column_range)
        d["live_range"] = [self.live_start, self.live_end]
        d["region"] = str(self.region)
        return d


@dataclass
class TmemPlan:
    """All allocations of a kernel, their placement and the totals against the per-CTA budget."""

    allocations: list[TmemAllocation] = field(default_factory=list)
    budget: int = TMEM_COLUMNS
    fallbacks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def used_columns(self) -> int:
        """Highest column any allocation reaches (Triton's `totalMemorySize` before rounding)."""
        return max((a.col_offset + a.columns for a in self.allocations), default=0)

    @property
    def demand_columns(self) -> int:
        """Columns `tcgen05.alloc` must request: the used columns rounded up to a legal size (unchanged when
        over 512, as Triton reports it)."""
        return round_alloc_size(self.used_columns)

    @property
    def sum_columns(self) -> int:
        """Columns if every allocation were live at once (no reuse over time). Half-lane (M=64) allocations
        still pack two to a column range at lanes +0 / +16, which is packing, not reuse: each goes to the row
        half that ends first, a full-lane one after both."""
        ends = [0] * ROW_HALVES
        for a in self.allocations:
            if a.lanes >= TMEM_LANES:
                ends = [max(ends) + a.columns] * ROW_HALVES
            else:
                ends[ends.index(min(ends))] += a.columns
        return max(ends, default=0)

    def lane_packed(self) -> list[tuple[str, str]]:
        """Pairs of allocations live together in the same columns at disjoint lanes (M=64 tiles at +0/+16)."""
        return [(a.name, b.name) for i, a in enumerate(self.allocations) for b in self.allocations[i + 1:]
                if a.live_with(b) and a.region.shares_columns(b.region) and not a.region.overlaps(b.region)]

    def conflicts(self) -> list[str]:
        """Every pair of allocations live together whose lanes x columns overlap: a placement error (empty for
        any plan `place` made; a report edited or built by hand can have them)."""
        return [f"%{a.name} ({a.region}) and %{b.name} ({b.region}) are live together and share "
                f"{a.region.intersection(b.region)}"
                for i, a in enumerate(self.allocations) for b in self.allocations[i + 1:]
                if a.col_offset >= 0 and b.col_offset >= 0 and a.live_with(b) and a.region.overlaps(b.region)]

    @property
    def fits(self) -> bool:
        return self.used_columns <= self.budget

    @property
    def ctas_per_sm(self) -> int | None:
        """Resident CTAs per SM that TMEM allows (None: unlimited, the kernel uses no TMEM; 0: does not fit)."""
        return ctas_per_sm_for_columns(self.demand_columns)

    def to_report(self) -> dict[str, Any]:
        return {
            "allocations": [a.to_dict() for a in self.allocations],
            "totals": {"used_columns": self.used_columns, "alloc_columns": self.demand_columns,
                       "sum_columns": self.sum_columns, "budget_columns": self.budget, "fits": self.fits,
                       "ctas_per_sm": self.ctas_per_sm, "lanes": TMEM_LANES},
            "fallbacks": list(self.fallbacks),
            "lane_packed": [list(p) for p in self.lane_packed()],
            "conflicts": self.conflicts(),
        }


def round_alloc_size(columns: int) -> int:
    """The `tcgen05.alloc` size for `columns` (0 stays 0; above 512 it is returned unchanged)."""
    if columns <= 0:
        return 0
    for size in ALLOC_SIZES:
        if columns <= size:
            return size
    return columns


def ctas_per_sm_for_columns(columns: int) -> int | None:
    if columns <= 0:
        return None
    return TMEM_COLUMNS // columns if columns <= TMEM_COLUMNS else 0


# ----------------------------------------------------------------------------------------------------------
# Footprint of one allocation
# ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Footprint:
    buffers: int
    columns: int
    lanes: int


def accumulator_footprint(shape: list[int], element_bits: int, block_m: int, block_n: int, col_stride: int = 1,
                          cta_split: tuple[int, int] = (1, 1)) -> Footprint:
    """Columns and lanes of a `#ttng.tensor_memory_encoding` allocation of `shape` (leading dims = buffers).

    An element takes `element_bits * col_stride` bits of a 32-bit column word. The per-CTA tile is the last two
    dims divided by the CTA split. An M=64 tile that is a single block uses 64 of the 128 lanes, so its columns
    are counted over 64 lanes.
    """
    if len(shape) < 2:
        raise ValueError(f"TMEM allocation needs a 2-D tile, got shape {shape}")
    bits = element_bits * col_stride
    if bits > 32:
        raise ValueError(f"element of {element_bits} bits with colStride {col_stride} exceeds a 32-bit column")
    m = math.ceil(shape[-2] / cta_split[0])
    n = math.ceil(shape[-1] / cta_split[1])
    buffers = math.prod(shape[:-2]) if len(shape) > 2 else 1
    lanes = TMEM_LANES
    if block_m == 64 and m <= block_m and n <= block_n:
        lanes = 64
    total_bits = buffers * m * n * bits
    return Footprint(buffers=buffers, columns=math.ceil(total_bits / (lanes * 32)), lanes=lanes)


def scales_footprint(shape: list[int], cta_split: tuple[int, int] = (1, 1)) -> Footprint:
    """Columns of a `#ttng.tensor_memory_scales_encoding` allocation: 8-bit scale factors, 4 per column word,
    32 rows per column (replicated over the 4 sub-partitions)."""
    m = math.ceil(shape[-2] / cta_split[0])
    k = shape[-1]
    buffers = math.prod(shape[:-2]) if len(shape) > 2 else 1
    return Footprint(buffers=buffers, columns=buffers * math.ceil(m / 32) * math.ceil(k / 4), lanes=TMEM_LANES)
