// RUN: %triton-opt %s -canonicalize --debug 2>%t.err | %python -m bwtriton.optcompat.filecheck %s --dump-input-context 20
// RUN: FileCheck %s --check-prefix=NOTE --input-file %t.err
// RUN: %triton-opt %s -canonicalize | not %python -m bwtriton.optcompat.filecheck %s --check-prefix=ABSENT --dump-input-context=5 2>&1 | FileCheck %s --check-prefix=STILL-CHECKS

// `--debug` changes only stderr (LLVM_DEBUG, absent from Triton's release wheel): it is ignored with a note.
// `--dump-input-context N` only sizes FileCheck's failure report: the wrapper drops it, matching still happens.

module attributes {"ttg.num-warps" = 4 : i32, "ttg.num-ctas" = 1 : i32} {
  // CHECK-LABEL: tt.func @fold_mul_one
  // CHECK-NEXT: tt.return %arg0 : i32
  // ABSENT: this text is not in the output
  tt.func @fold_mul_one(%arg0: i32) -> i32 {
    %c1 = arith.constant 1 : i32
    %0 = arith.muli %arg0, %c1 : i32
    tt.return %0 : i32
  }
}

// NOTE: bwtriton-opt: note: --debug ignored: Triton's release wheel prints no LLVM_DEBUG output
// STILL-CHECKS: debug_and_filecheck_flags.mlir:11: error: Couldn't match "this text is not in the output"
