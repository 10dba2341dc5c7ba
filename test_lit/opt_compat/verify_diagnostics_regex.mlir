// RUN: %triton-opt %s -split-input-file --gluon-resolve-auto-encodings -verify-diagnostics
// RUN: not %triton-opt %S/Inputs/verify_regex_mismatch.mlir --gluon-resolve-auto-encodings -verify-diagnostics 2>&1 | FileCheck %s --check-prefix=MISMATCH

// expected-error-re: literal text with {{regex}} fragments; `.` crosses the newlines of a multi-line message,
// whose continuation lines keep their indentation ("value:\n  #ttg.blocked<...>").

#one = #ttg.blocked<{sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [2], order = [0]}>
#four = #ttg.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [2], order = [0]}>
module attributes {"ttg.target" = "cuda:100", "ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 2 : i32, "ttg.threads-per-warp" = 32 : i32} {
  tt.func public @two_layouts_for_one_value() -> (tensor<256xf32, #one>, tensor<256xf32, #four>) {
    // expected-error-re @+1 {{conflicting encodings for value:{{.}}  #ttg.blocked<{sizePerThread = [1]{{.*}}and{{.*}}[4]}}
    %zero = arith.constant dense<0.0> : tensor<256xf32, #gluon.auto_encoding>
    %a = gluon.set_auto_layout %zero : tensor<256xf32, #gluon.auto_encoding> -> tensor<256xf32, #one>
    %b = gluon.set_auto_layout %zero : tensor<256xf32, #gluon.auto_encoding> -> tensor<256xf32, #four>
    tt.return %a, %b : tensor<256xf32, #one>, tensor<256xf32, #four>
  }
}

// -----

// Without -re the text is a literal substring: `[1]` is not a regex class here.
#one = #ttg.blocked<{sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [2], order = [0]}>
#two = #ttg.blocked<{sizePerThread = [2], threadsPerWarp = [32], warpsPerCTA = [2], order = [0]}>
module attributes {"ttg.target" = "cuda:100", "ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 2 : i32, "ttg.threads-per-warp" = 32 : i32} {
  tt.func public @literal_brackets() -> (tensor<64xi32, #one>, tensor<64xi32, #two>) {
    // expected-error @+1 {{#ttg.blocked<{sizePerThread = [1], threadsPerWarp = [32]}}
    %c = arith.constant dense<3> : tensor<64xi32, #gluon.auto_encoding>
    %a = gluon.set_auto_layout %c : tensor<64xi32, #gluon.auto_encoding> -> tensor<64xi32, #one>
    %b = gluon.set_auto_layout %c : tensor<64xi32, #gluon.auto_encoding> -> tensor<64xi32, #two>
    tt.return %a, %b : tensor<64xi32, #one>, tensor<64xi32, #two>
  }
}

// MISMATCH: verify_regex_mismatch.mlir: line 7: unexpected error: 'arith.constant' op found conflicting encodings
// MISMATCH: verify_regex_mismatch.mlir: line 6: expected error "{{.*}}sizePerThread = [8]{{.*}}" at line 7 was not produced
