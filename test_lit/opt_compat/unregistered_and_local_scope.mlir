// RUN: not %triton-opt %S/Inputs/unregistered.mlir -allow-unregistered-dialect -cse 2>&1 | FileCheck %s --check-prefix=UNREG
// RUN: %triton-opt %s -mlir-print-local-scope -canonicalize | FileCheck %s --check-prefix=LOCAL
// RUN: %triton-opt %s -canonicalize | FileCheck %s --check-prefix=ALIAS

// -allow-unregistered-dialect cannot be honoured through Triton 3.6's Python bindings: a clear error, never a
// fake success.
// UNREG: -allow-unregistered-dialect cannot be honoured
// UNREG-SAME: allowUnregisteredDialects()

// -mlir-print-local-scope prints encodings inline instead of as #aliases.
// LOCAL-NOT: #blocked =
// LOCAL: tensor<128xi32, #ttg.blocked<{sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>>
// ALIAS: #blocked = #ttg.blocked
// ALIAS: tensor<128xi32, #blocked>
#blocked = #ttg.blocked<{sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
module attributes {"ttg.num-warps" = 4 : i32, "ttg.num-ctas" = 1 : i32, "ttg.threads-per-warp" = 32 : i32} {
  tt.func @range() -> tensor<128xi32, #blocked> {
    %0 = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32, #blocked>
    tt.return %0 : tensor<128xi32, #blocked>
  }
}
