"""plan-tmem report rendering (table, SVG, PNG) and the autotune pruning helper."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

import bwtriton
from bwtriton.errors import InputError
from bwtriton.passes.plan_tmem import PlanTmem
from bwtriton.tmem import (estimate_shared_bytes, estimate_tmem_columns, prune_configs_by_resources, render_svg,
                           write_tmem_map)
from fixtures import tmem_kernels as ex


@pytest.fixture(scope="module")
def lane_half_report():
    r = bwtriton.compile(ex.multi_acc_kernel, signature=ex.MULTI_ACC_SIGNATURE,
                         constexprs=dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, NUM_ACC=3), num_warps=4, num_stages=3)
    return r.reports["plan-tmem"]


def test_table_lists_allocations_and_totals(lane_half_report):
    text = PlanTmem.render_report(lane_half_report)
    lines = text.splitlines()
    assert lines[0].split() == ["name", "kind", "shape", "dtype", "buf", "cols", "lanes", "columns", "lane", "off",
                                "live", "location"]
    rows = [ln.split() for ln in lines[2:5]]
    assert [r[:7] for r in rows] == [["acc0", "acc", "64x128", "f32", "1", "128", "64"],
                                     ["acc1", "acc", "64x128", "f32", "1", "128", "64"],
                                     ["acc2", "acc", "64x128", "f32", "1", "128", "64"]]
    assert "256 of 512 columns used" in text and "CTAs/SM allowed by TMEM: 2" in text


def test_svg_map_draws_lane_halves(lane_half_report):
    svg = render_svg(lane_half_report)
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    titled = [r for r in root.iter(f"{ns}rect") if r.find(f"{ns}title") is not None]
    # three half-lane allocations, each drawn as 4 stripes of 16 lanes (one per 32-lane sub-partition)
    assert len(titled) == 12
    heights = {float(r.get("height")) for r in titled}
    assert heights == {16 * 3.0}
    # acc0 (lane offset 0) and acc1 (offset 16) share columns [0,128) but not lanes
    ys = sorted({float(r.get("y")) for r in titled if float(r.get("x")) == 60.0})
    assert ys == sorted(40 + 3.0 * (32 * q + off) for q in range(4) for off in (0, 16))
    labels = {t.text for t in root.iter(f"{ns}text")}
    assert {"acc0", "acc1", "acc2"} <= labels


def test_write_tmem_map_svg_png_and_bad_extension(lane_half_report, tmp_path):
    svg = write_tmem_map(lane_half_report, tmp_path / "map.svg")
    assert open(svg).read().startswith("<svg")
    pytest.importorskip("matplotlib")
    png = write_tmem_map(lane_half_report, tmp_path / "map.png")
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(InputError, match=r"\.svg or \.png"):
        write_tmem_map(lane_half_report, tmp_path / "map.jpg")
    with pytest.raises(ValueError, match="not a plan-tmem report"):
        render_svg({"foo": 1})


def test_estimates():
    assert estimate_tmem_columns(128, 256) == 256
    assert estimate_tmem_columns(128, 256, accumulators=3) == 768
    assert estimate_tmem_columns(128, 256, acc_buffers=2) == 512
    assert estimate_tmem_columns(64, 128, accumulators=2) == 256     # counted without lane-half sharing
    assert estimate_tmem_columns(128, 128, block_k=256, scale_group=16) == 256   # 128 + 16 + 16 -> 256
    assert estimate_shared_bytes(128, 256, 64, 4) == 4 * (128 * 64 + 64 * 256) * 2


def test_prune_configs_by_resources():
    triton = pytest.importorskip("triton")
    configs = [triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "NUM_ACC": 3}, num_stages=2),
               triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "NUM_ACC": 3}, num_stages=3),
               triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "NUM_ACC": 3}, num_stages=6)]
    dropped = []
    prune = prune_configs_by_resources(accumulators="NUM_ACC", on_prune=lambda c, why: dropped.append(why))
    kept = prune(configs, {"a_ptr": None})
    assert kept == [configs[1]]
    assert dropped[0] == "TMEM 768 > 512 columns"
    assert dropped[1] == f"shared memory {6 * (128 * 128 + 128 * 128) * 2} > 232448 bytes"
    with pytest.raises(InputError, match="every autotune config exceeds"):
        prune([configs[0]], {})
    with pytest.raises(InputError, match="no config kwarg or kernel argument named 'BM'"):
        prune_configs_by_resources(block_m="BM")(configs, {})


def test_prune_helper_plugs_into_triton_autotune():
    triton = pytest.importorskip("triton")
    configs = [triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_stages=2),
               triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_stages=2)]
    tuned = triton.autotune(configs=configs, key=["K"], prune_configs_by={
        "early_config_prune": prune_configs_by_resources(accumulators=3)})(ex.multi_acc_kernel)
    tuned.nargs = {"K": 64}
    assert tuned.prune_configs({}) == [configs[1]]
