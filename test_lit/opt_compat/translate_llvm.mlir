// RUN: %python -m bwtriton.optcompat.translate -mlir-to-llvmir %s | FileCheck %s
// RUN: %python -m bwtriton.optcompat.translate -mlir-to-llvmir -O1 < %s | FileCheck %s --check-prefix=O1
// RUN: %python -m bwtriton.optcompat.translate -mlir-to-llvmir %s | %python -m bwtriton.optcompat.translate --llc -mtriple nvptx64-nvidia-cuda -mcpu=sm_90 -mattr=+ptx83 | FileCheck %s --check-prefix=PTX
// RUN: not %python -m bwtriton.optcompat.translate -mlir-to-llvmir --bogus %s 2>&1 | FileCheck %s --check-prefix=BAD

// Stand-ins for `mlir-translate -mlir-to-llvmir | opt -S -O1 | llc` built on Triton's LLVM bindings: the
// translation keeps the redundant `add 0`, -O1 folds it, --llc prints PTX for the requested cpu/ptx version.

module {
  llvm.func @add_one(%arg0: i32) -> i32 {
    %one = llvm.mlir.constant(1 : i32) : i32
    %zero = llvm.mlir.constant(0 : i32) : i32
    %0 = llvm.add %arg0, %one : i32
    %1 = llvm.add %0, %zero : i32
    llvm.return %1 : i32
  }
}

// CHECK-LABEL: define i32 @add_one(i32 %0)
// CHECK-NEXT: [[SUM:%[0-9]+]] = add i32 %0, 1
// CHECK-NEXT: add i32 [[SUM]], 0

// O1-LABEL: define i32 @add_one(i32 %0)
// O1-NEXT: [[SUM:%[0-9]+]] = add i32 %0, 1
// O1-NEXT: ret i32 [[SUM]]

// PTX: .version 8.3
// PTX: .target sm_90
// PTX: add.s32

// BAD: --bogus: not supported
