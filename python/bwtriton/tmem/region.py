"""TMEM regions as lanes x columns: the one model the verifier, the emulator and plan-tmem compare TMEM with.

A TMEM address is `lane << 16 | column` (128 lanes x 512 columns per CTA). Two accesses conflict only when they
share a lane *and* a column: Triton packs two M=64 accumulators (Layout F: 16 lanes of each 32-lane
sub-partition, at lane offset 0 or 16) into the same columns, and those never touch each other. A region is a
set of lanes (a 128-bit mask, so Layout F's four stripes are exact) times one column interval.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from ..targets import TMEM_LANES

ALL_LANES = (1 << TMEM_LANES) - 1
#: lanes of one sub-partition (the quarter a warp w may access: 32 * (w % 4) ...)
SUBPARTITION_LANES = 32


def lane_span(first: int, count: int) -> int:
    """The lane mask of lanes [first, first + count), clipped to the 128 lanes."""
    first = max(first, 0)
    count = min(count, TMEM_LANES - first)
    return ((1 << count) - 1) << first if count > 0 else 0


@dataclass(frozen=True)
class TmemRegion:
    """Lanes (bit i = lane i) x columns [col_lo, col_hi) of one CTA's TMEM."""

    lanes: int
    col_lo: int
    col_hi: int

    def overlaps(self, other: "TmemRegion") -> bool:
        """Whether some (lane, column) cell lies in both."""
        return bool(self.lanes & other.lanes) and self.col_lo < other.col_hi and other.col_lo < self.col_hi

    def shares_columns(self, other: "TmemRegion") -> bool:
        return self.col_lo < other.col_hi and other.col_lo < self.col_hi

    def intersection(self, other: "TmemRegion") -> "TmemRegion":
        """The cells in both (empty lanes or an empty column range when they do not overlap)."""
        return TmemRegion(self.lanes & other.lanes, max(self.col_lo, other.col_lo), min(self.col_hi, other.col_hi))

    def __str__(self) -> str:
        return f"{describe_lanes(self.lanes)}, {describe_columns(self.col_lo, self.col_hi)}"


def describe_lanes(mask: int) -> str:
    """'lanes 0-15, 32-47, 64-79, 96-111' / 'lane 5' / 'all lanes' / 'no lanes' for a lane mask."""
    if mask & ALL_LANES == ALL_LANES:
        return "all lanes"
    runs = []
    lane = 0
    while lane < TMEM_LANES:
        if mask >> lane & 1:
            end = lane
            while end + 1 < TMEM_LANES and mask >> (end + 1) & 1:
                end += 1
            runs.append(f"{lane}-{end}" if end > lane else str(lane))
            lane = end + 1
        else:
            lane += 1
    if not runs:
        return "no lanes"
    return ("lane " if runs == [runs[0]] and "-" not in runs[0] else "lanes ") + ", ".join(runs)


def describe_columns(lo: int, hi: int) -> str:
    return f"column {lo}" if hi == lo + 1 else f"columns {lo}-{hi - 1}"


def d_tile_lanes(m: int, cta_group: int, ws: bool, lane_base: int) -> int:
    """Lanes one CTA's part of an MMA's D tile occupies (PTX #tcgen05-data-path-layout-organization).

    Only Layout F (M=64, cta_group::1, not .ws) leaves lanes free: rows 16q..16q+15 sit in lanes
    32q + base .. +15 of sub-partition q, base being the D address's lane (0 or 16). Every other layout (D, E,
    G, A, B) spans all 128 lanes of the CTA, its N halves/quarters folded into lanes 64..127 where it has any."""
    if m == 64 and cta_group == 1 and not ws:
        off = lane_base % SUBPARTITION_LANES
        return sum(lane_span(SUBPARTITION_LANES * q + off, 16) for q in range(TMEM_LANES // SUBPARTITION_LANES))
    return lane_span(lane_base, TMEM_LANES)


def d_tile_region(m: int, cta_group: int, ws: bool, lane_base: int, column: int, columns: int) -> TmemRegion:
    """The region of an MMA's D tile at TMEM address (lane_base, column) spanning `columns` columns."""
    return TmemRegion(d_tile_lanes(m, cta_group, ws, lane_base), column, column + columns)


def access_lanes(starts: Optional[Iterable[int]], lanes_per_access: int) -> int:
    """Lanes a warp-collective tcgen05.ld/st/cp touches over every warp that runs it: for each possible start
    lane (one per warp, e.g. 32 * (w % 4) + 16), `lanes_per_access` lanes from there. None: any lane."""
    if starts is None:
        return ALL_LANES
    mask = 0
    for s in starts:
        mask |= lane_span(s, lanes_per_access)
    return mask


def region(lanes: int, col_lo: int, columns: int) -> TmemRegion:
    """A region of `columns` columns from `col_lo` over `lanes`."""
    return TmemRegion(lanes, col_lo, col_lo + max(columns, 1))


__all__ = ["ALL_LANES", "TmemRegion", "lane_span", "describe_lanes", "describe_columns", "d_tile_lanes",
           "d_tile_region", "access_lanes", "region"]
