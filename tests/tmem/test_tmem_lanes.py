"""plan-tmem's map and report treat TMEM as lanes x columns: two M=64 accumulators at lane offsets 0 and 16 share
columns while both live (lane packing, what Triton emits for two 64-row tl.dot accumulators), which is neither
reuse nor a conflict; cells that really overlap while both live are reported as a conflict."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

import bwtriton
from bwtriton.passes.plan_tmem import PlanTmem
from bwtriton.tmem import TmemAllocation, TmemPlan, render_svg
from bwtriton.tmem.region import TmemRegion, d_tile_lanes, describe_lanes
from fixtures import recurrence_kernels as rk

NS = "{http://www.w3.org/2000/svg}"


def _acc(name: str, lanes: int, lane_offset: int, col: int, live: tuple[int, int]) -> TmemAllocation:
    return TmemAllocation(name=name, location="", shape=[lanes, 64], dtype="f32", kind="acc", buffers=1,
                          columns=64, lanes=lanes, block_m=lanes, block_n=64, live_start=live[0], live_end=live[1],
                          col_offset=col, lane_offset=lane_offset)


def test_layout_f_lanes_are_four_16_lane_stripes():
    assert describe_lanes(d_tile_lanes(64, 1, False, 0)) == "lanes 0-15, 32-47, 64-79, 96-111"
    assert describe_lanes(d_tile_lanes(64, 1, False, 16)) == "lanes 16-31, 48-63, 80-95, 112-127"
    assert describe_lanes(d_tile_lanes(128, 1, False, 0)) == "all lanes"
    assert describe_lanes(d_tile_lanes(64, 1, True, 0)) == "all lanes"   # .ws M=64 (Layout E) folds N into lanes
    lo = TmemRegion(d_tile_lanes(64, 1, False, 0), 0, 64)
    hi = TmemRegion(d_tile_lanes(64, 1, False, 16), 0, 64)
    assert lo.shares_columns(hi) and not lo.overlaps(hi)
    assert lo.overlaps(TmemRegion(d_tile_lanes(64, 1, False, 0), 63, 65))


def test_lane_packed_pair_is_neither_conflict_nor_reuse():
    plan = TmemPlan([_acc("h1", 64, 0, 0, (0, 100)), _acc("h2", 64, 16, 0, (0, 100))])
    assert plan.lane_packed() == [("h1", "h2")]
    assert plan.conflicts() == []
    assert plan.sum_columns == 64   # two half-lane tiles fill one 64-column range: nothing was reused
    report = plan.to_report()
    assert report["allocations"][1]["region"] == "lanes 16-31, 48-63, 80-95, 112-127, columns 0-63"
    text = PlanTmem.render_report(report)
    assert "lane-packed: %h1 and %h2 share columns at disjoint lanes" in text
    assert "conflict" not in text


def test_overlapping_cells_live_together_are_a_conflict_naming_lanes_and_columns():
    plan = TmemPlan([_acc("h1", 64, 0, 0, (0, 100)), _acc("g", 64, 0, 32, (50, 150))])
    assert plan.lane_packed() == []
    [conflict] = plan.conflicts()
    assert conflict.startswith("%h1 (lanes 0-15, 32-47, 64-79, 96-111, columns 0-63) and %g")
    assert conflict.endswith("share lanes 0-15, 32-47, 64-79, 96-111, columns 32-63")
    assert "warning: placement conflict: %h1" in PlanTmem.render_report(plan.to_report())
    # the same cells at disjoint live ranges are reuse: no conflict
    assert TmemPlan([_acc("h1", 64, 0, 0, (0, 100)), _acc("g", 64, 0, 32, (100, 150))]).conflicts() == []


def test_map_draws_lane_packed_tiles_as_whole_disjoint_stripes():
    report = TmemPlan([_acc("h1", 64, 0, 0, (0, 100)), _acc("h2", 64, 16, 0, (0, 100))]).to_report()
    root = ET.fromstring(render_svg(report))
    rects = [r for r in root.iter(f"{NS}rect") if r.find(f"{NS}title") is not None]
    assert len(rects) == 8 and {float(r.get("height")) for r in rects} == {16 * 3.0}   # 16 lanes each, unsplit
    ys = sorted(float(r.get("y")) for r in rects)
    assert ys == sorted(40 + 3.0 * (32 * q + off) for q in range(4) for off in (0, 16))


@pytest.fixture(scope="module")
def recurrence_report():
    spec = rk.BWTRITON_SPECS["delta_state_kernel"]
    r = bwtriton.compile(rk.delta_state_kernel, signature=spec["signature"], constexprs=spec["constexprs"],
                         num_warps=spec["num_warps"], num_stages=spec["num_stages"])
    return r.reports["plan-tmem"]


def test_recurrence_kernel_plan_packs_the_state_halves(recurrence_report):
    """The state's two 64-row accumulators share columns at lanes +0 / +16, both live across the whole loop."""
    allocs = {a["name"]: a for a in recurrence_report["allocations"]}
    h1, h2 = allocs["h1"], allocs["h2"]
    assert h1["column_range"] == h2["column_range"] and {h1["lane_offset"], h2["lane_offset"]} == {0, 16}
    assert ["h1", "h2"] in recurrence_report["lane_packed"]
    assert recurrence_report["conflicts"] == []
    # everything is live across the loop: no reuse, and the packed halves fill 64 columns together (a column-only
    # count says 192 or 256)
    assert recurrence_report["totals"]["sum_columns"] == recurrence_report["totals"]["used_columns"] == 128
