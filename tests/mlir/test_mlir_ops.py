"""bwtriton.mlir.ops reads the loop-carried values of an scf.for and the block arguments of warp_specialize
partitions from printed TTGIR (what plan-tmem follows to find every name of a TMEM allocation)."""
from __future__ import annotations

from bwtriton.mlir import ops as irt

LOOP = """\
tt.func @k(%lb: i32, %ub: i32, %st: i32, %t: !ttg.memdesc<128x128xf32, #tmem, #ttng.tensor_memory, mutable>) {
  %r:2 = scf.for %i = %lb to %ub step %st iter_args(%acc = %t, %n = %lb) -> (!ttg.memdesc<128x128xf32, #tmem, #ttng.tensor_memory, mutable>, i32)  : i32 {
    scf.yield %acc, %n : !ttg.memdesc<128x128xf32, #tmem, #ttng.tensor_memory, mutable>, i32
  }
  tt.return
}
"""

WARP_SPECIALIZE = """\
tt.func @k(%a: !ttg.memdesc<128x128xf32, #tmem, #ttng.tensor_memory, mutable>, %b: i32) {
  ttg.warp_specialize(%a, %b)
  default {
    ttg.warp_yield
  }
  partition0(%x: !ttg.memdesc<128x128xf32, #tmem, #ttng.tensor_memory, mutable>, %y: i32) num_warps(4) {
    ttg.warp_return
  }
  partition1(%u: !ttg.memdesc<128x128xf32, #tmem, #ttng.tensor_memory, mutable>, %v: i32) num_warps(1) {
    ttg.warp_return
  } : (!ttg.memdesc<128x128xf32, #tmem, #ttng.tensor_memory, mutable>, i32) -> ()
  tt.return
}
"""


def _op(text: str, name: str) -> irt.Op:
    return next(op for op in irt.all_ops(irt.parse_ops(text)) if op.name == name)


def test_iter_args_pairs_each_region_argument_with_its_initial_value():
    assert irt.iter_args(_op(LOOP, "scf.for")) == [("%acc", "%t"), ("%n", "%lb")]


def test_a_loop_without_iter_args_carries_nothing():
    text = "tt.func @k(%lb: i32) {\n  scf.for %i = %lb to %lb step %lb  : i32 {\n  }\n  tt.return\n}\n"
    assert irt.iter_args(_op(text, "scf.for")) == []


def test_partition_arguments_names_each_partitions_block_arguments():
    assert irt.partition_arguments(_op(WARP_SPECIALIZE, "ttg.warp_specialize")) == [["%x", "%y"], ["%u", "%v"]]
