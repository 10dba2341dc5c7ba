"""Placement of TMEM allocations, mirroring Triton's `triton-tensor-memory-allocation` (docs/tmem.md)."""
from __future__ import annotations

from bwtriton.tmem.plan import ROW_HALVES, TMEM_LANES, TmemAllocation


def place(allocations: list[TmemAllocation], row_constraints: dict[str, str] | None = None) -> None:
    """Assign `col_offset`/`lane_offset` to each allocation, in order, by linear-scan first fit.

    Follows Triton's allocator: before placing an allocation, chunks whose live range ended at or before its
    start are freed; the chunk is the first (column, row half) where it fits. `row_constraints` maps an
    allocation name to another whose row half it must share (an M=64 TMEM operand and its accumulator).
    """
    used: dict[tuple[int, int], bool] = {}
    live: list[TmemAllocation] = []
    placed_half: dict[str, int] = {}
    row_constraints = row_constraints or {}
    for alloc in allocations:
        for other in list(live):
            if other.live_end <= alloc.live_start:
                _mark(used, other, False)
                live.remove(other)
        halves_needed = ROW_HALVES if alloc.lanes == TMEM_LANES else 1
        want = placed_half.get(row_constraints.get(alloc.name, ""), None)
        col = 0
        while True:
            found = None
            for half in range(ROW_HALVES - halves_needed + 1):
                if want is not None and half != want:
                    continue
                if all(not used.get((half + h, col + c), False)
                       for c in range(alloc.columns) for h in range(halves_needed)):
                    found = half
                    break
            if found is not None:
                break
            col += 1
        alloc.col_offset = col
        alloc.lane_offset = 16 * found
        placed_half[alloc.name] = found
        _mark(used, alloc, True)
        live.append(alloc)


def _mark(used: dict, alloc: TmemAllocation, value: bool) -> None:
    halves = ROW_HALVES if alloc.lanes == TMEM_LANES else 1
    for c in range(alloc.columns):
        for h in range(halves):
            used[(alloc.row_half + h, alloc.col_offset + c)] = value
