// RUN: %triton-opt %s -split-input-file -verify-diagnostics
// RUN: not %triton-opt %s -split-input-file -canonicalize 2>&1 | FileCheck %s --check-prefix=PLAIN

// Parser and verifier errors are matched against expected-* comments at their original line numbers,
// also in the second chunk.

module {
  tt.func @mismatched_types(%arg0: i32) {
    // expected-error @+1 {{use of value '%arg0' expects different type than prior uses: 'i64' vs 'i32'}}
    %0 = arith.addi %arg0, %arg0 : i64
    tt.return
  }
}

// -----

module {
  tt.func @bad_splat(%arg0: i32) {
    // expected-error @below {{'tt.splat' op requires the same element type for all operands and results}}
    %0 = tt.splat %arg0 : i32 -> tensor<4xi64>
    tt.return
  }
}

// PLAIN: verify_diagnostics.mlir":10:{{[0-9]+}}): error: use of value '%arg0' expects different type
// PLAIN: verify_diagnostics.mlir":20:{{[0-9]+}}): error: 'tt.splat' op
