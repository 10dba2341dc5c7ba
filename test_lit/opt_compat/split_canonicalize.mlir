// RUN: %triton-opt %s -split-input-file -canonicalize | FileCheck %s
// RUN: %triton-opt %s -split-input-file --pass-pipeline='builtin.module(tt.func(canonicalize))' | FileCheck %s

// Each `// -----` chunk is its own module; outputs are joined with the same marker and printed without loc().

// CHECK-LABEL: tt.func @fold_add_zero
// CHECK-NOT:     arith.addi
// CHECK:         tt.return %arg0 : i32
// CHECK-NOT:   loc(
// CHECK:       // -----
// CHECK-LABEL: tt.func @keep_mul
// CHECK:         arith.muli %arg0, %arg0 : i32
module attributes {"ttg.num-warps" = 4 : i32, "ttg.num-ctas" = 1 : i32} {
  tt.func @fold_add_zero(%arg0: i32) -> i32 {
    %c0 = arith.constant 0 : i32
    %0 = arith.addi %arg0, %c0 : i32
    tt.return %0 : i32
  }
}

// -----

module attributes {"ttg.num-warps" = 4 : i32, "ttg.num-ctas" = 1 : i32} {
  tt.func @keep_mul(%arg0: i32) -> i32 {
    %0 = arith.muli %arg0, %arg0 : i32
    tt.return %0 : i32
  }
}
