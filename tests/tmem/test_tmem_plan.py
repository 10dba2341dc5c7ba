"""TMEM plan numbers: footprints from the TMEM facts, placement, and the plan of real Triton TTGIR checked
against Triton's own `triton-tensor-memory-allocation` (total and per-allocation offsets)."""
from __future__ import annotations

import re

import pytest

import bwtriton
from bwtriton import mlir as mlir_util
from fixtures import tmem_kernels as ex
from bwtriton.passes.plan_tmem.analyze import plan_from_ttgir
from bwtriton.passes.plan_tmem.placement import place
from bwtriton.tmem.plan import (TmemAllocation, accumulator_footprint, ctas_per_sm_for_columns,
                                round_alloc_size, scales_footprint)


# ---------------------------------------------------------------- footprints (hand-derived from §3/§5/§6)

@pytest.mark.parametrize("shape,bits,block_m,block_n,col_stride,columns,lanes", [
    ([128, 256], 32, 128, 256, 1, 256, 128),     # fp32: one 32-bit column per N element
    ([128, 128], 16, 128, 128, 1, 64, 128),      # packed 16-bit: two elements per column word
    ([128, 128], 16, 128, 128, 2, 128, 128),     # unpacked 16-bit (colStride 2): one per word
    ([64, 128], 32, 64, 128, 1, 128, 64),        # M=64 single block: Layout F, half the lanes
    ([128, 128], 32, 64, 128, 1, 128, 128),      # two interleaved blockM=64 blocks fill all lanes: N columns
    ([2, 128, 256], 32, 128, 256, 1, 512, 128),  # double-buffered accumulator
    ([256, 128], 32, 128, 128, 1, 256, 128),     # 256 rows in one CTA: two 128-row blocks
])
def test_accumulator_footprint(shape, bits, block_m, block_n, col_stride, columns, lanes):
    fp = accumulator_footprint(shape, bits, block_m, block_n, col_stride)
    assert (fp.columns, fp.lanes) == (columns, lanes)


def test_accumulator_footprint_rejects_wide_elements():
    with pytest.raises(ValueError, match="exceeds a 32-bit column"):
        accumulator_footprint([128, 128], 16, 128, 128, col_stride=4)


def test_scales_footprint():
    # 128 rows -> 4 column groups of 32 rows; 16 scale bytes per row -> 4 words: 16 columns (NVFP4, BK=256)
    assert scales_footprint([128, 16]).columns == 16
    assert scales_footprint([256, 8]).columns == 16   # MXFP4 B scales for BLOCK_N=256, BK=256
    assert scales_footprint([128, 4]).columns == 4


def test_alloc_sizes_and_occupancy():
    assert [round_alloc_size(c) for c in (0, 1, 32, 33, 160, 257, 512, 768)] == [0, 32, 32, 64, 256, 512, 512, 768]
    assert [ctas_per_sm_for_columns(c) for c in (0, 64, 128, 256, 512, 768)] == [None, 8, 4, 2, 1, 0]


def _alloc(name, columns, lanes, start, end):
    return TmemAllocation(name=name, location="", shape=[1], dtype="f32", kind="acc", buffers=1, columns=columns,
                          lanes=lanes, live_start=start, live_end=end)


def test_place_half_lane_allocations_share_columns():
    allocs = [_alloc("a", 128, 64, 0, 10), _alloc("b", 128, 64, 1, 10), _alloc("c", 128, 64, 2, 10)]
    place(allocs)
    assert [(a.col_offset, a.lane_offset) for a in allocs] == [(0, 0), (0, 16), (128, 0)]


def test_place_reuses_columns_after_live_range_ends():
    allocs = [_alloc("a", 256, 128, 0, 5), _alloc("b", 256, 128, 3, 9), _alloc("c", 256, 128, 6, 12)]
    place(allocs)
    assert [a.col_offset for a in allocs] == [0, 256, 0]


# ---------------------------------------------------------------- parsing

def test_parse_memdesc_and_encoding_through_aliases():
    aliases = {"#tmem": "#ttng.tensor_memory_encoding<blockM = 64, blockN = 128, colStride = 2, CTASplitN = 2>"}
    md = mlir_util.parse_memdesc("!ttg.memdesc<2x64x256xbf16, #tmem, #ttng.tensor_memory, mutable>", aliases)
    assert md.shape == (2, 64, 256) and md.element == "bf16" and md.in_tmem and md.mutable
    assert mlir_util.parse_attr_params(md.encoding) == {"blockM": "64", "blockN": "128", "colStride": "2",
                                                        "CTASplitN": "2"}
    bits = mlir_util.element_bits
    assert bits("f8E4M3FN") == 8 and bits("i8") == 8 and bits("f32") == 32


# ---------------------------------------------------------------- plan vs Triton on real kernels

CORPUS = {
    "mm128x128": (ex.matmul_kernel, ex.MATMUL_SIGNATURE, dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64), 4, 3),
    "mm64x256": (ex.matmul_kernel, ex.MATMUL_SIGNATURE, dict(BLOCK_M=64, BLOCK_N=256, BLOCK_K=64), 4, 3),
    "mm256x128": (ex.matmul_kernel, ex.MATMUL_SIGNATURE, dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64), 8, 2),
    "multi3_64x128": (ex.multi_acc_kernel, ex.MULTI_ACC_SIGNATURE,
                      dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, NUM_ACC=3), 4, 3),
    "multi3_128x256": (ex.multi_acc_kernel, ex.MULTI_ACC_SIGNATURE,
                       dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, NUM_ACC=3), 8, 2),
    "chain128": (ex.chained_dot_kernel, ex.CHAINED_DOT_SIGNATURE, dict(BLOCK_M=128, BLOCK_N=128, HEAD_DIM=64), 4, 3),
    "chain64": (ex.chained_dot_kernel, ex.CHAINED_DOT_SIGNATURE, dict(BLOCK_M=64, BLOCK_N=64, HEAD_DIM=64), 4, 3),
    "nvfp4": (ex.scaled_matmul_kernel, ex.scaled_matmul_signature(True),
              dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=256, GROUP=16), 4, 3),
    "mxfp4_256": (ex.scaled_matmul_kernel, ex.scaled_matmul_signature(False),
                  dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=256, GROUP=32), 4, 3),
    "ws128x256": (ex.ws_matmul_kernel, ex.WS_MATMUL_SIGNATURE,
                  dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, NUM_SMS=148), 4, 3),
    "ws256x256": (ex.ws_matmul_kernel, ex.WS_MATMUL_SIGNATURE,
                  dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=64, NUM_SMS=148), 4, 3),
}


@pytest.fixture(scope="module")
def upstream():
    """Each corpus kernel compiled by plain Triton (no bwtriton passes): TTGIR and metadata tmem_size."""
    out = {}
    for name, (fn, sig, cx, nw, ns) in CORPUS.items():
        r = bwtriton.compile(fn, signature=sig, constexprs=cx, num_warps=nw, num_stages=ns, passes="none",
                             check_limits=False)
        out[name] = (r.asm["ttgir"], r.metadata["tmem_size"])
    return out


def _triton_allocation(ttgir: str):
    """Run Triton's own shared + tensor memory allocation on a copy: (tmem size, [(col, row offset)])."""
    from triton._C.libtriton import ir, nvidia
    ctx = mlir_util.new_context()
    mod = mlir_util.reparse(ttgir, ctx)
    pm = ir.pass_manager(ctx)
    nvidia.passes.ttgpuir.add_allocate_shared_memory_nv(pm, 100, 88)
    nvidia.passes.ttnvgpuir.add_allocate_tensor_memory(pm)
    pm.run(mod, "tmem-check")
    offsets = re.findall(r"ttng\.tmem_alloc.*?tensor_memory_col_offset = (\d+) : i32, "
                         r"tensor_memory_row_offset = (\d+) : i32", str(mod))
    return mod.get_int_attr("ttg.tensor_memory_size"), [(int(c), int(r)) for c, r in offsets]


@pytest.mark.parametrize("name", list(CORPUS))
def test_plan_matches_triton_allocator(upstream, name):
    ttgir, md_tmem = upstream[name]
    plan = plan_from_ttgir(ttgir)
    total, offsets = _triton_allocation(ttgir)
    assert plan.demand_columns == md_tmem == total
    assert [(a.col_offset, a.lane_offset) for a in plan.allocations] == offsets


def test_plan_kinds_and_lanes(upstream):
    kinds = {n: [(a.kind, a.lanes, a.buffers) for a in plan_from_ttgir(upstream[n][0]).allocations]
             for n in ("chain128", "nvfp4", "ws128x256", "multi3_64x128")}
    assert kinds["chain128"] == [("acc", 128, 1), ("acc", 128, 1), ("operand", 128, 1)]
    assert kinds["nvfp4"] == [("acc", 128, 1), ("scales", 128, 1), ("scales", 128, 1)]
    assert kinds["ws128x256"] == [("acc", 128, 2)]
    assert kinds["multi3_64x128"] == [("acc", 64, 1)] * 3
    # the three 128x256 accumulators are live together: 768 columns, over the budget
    plan = plan_from_ttgir(upstream["multi3_128x256"][0])
    assert (plan.used_columns, plan.fits, plan.ctas_per_sm) == (768, False, 0)
    starts_ends = [(a.live_start, a.live_end) for a in plan.allocations]
    assert all(s < e for s, e in starts_ends) and max(s for s, _ in starts_ends) < min(e for _, e in starts_ends)
