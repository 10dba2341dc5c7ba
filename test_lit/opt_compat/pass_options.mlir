// RUN: %triton-opt %s '--tritongpu-hoist-tmem-alloc=%if triton-3.8 || triton-3.9 %{post-pipeline%} %else %{hoist-out-of-if%}=true' | FileCheck %s --check-prefix=APPLIED
// RUN: %if triton-3.8 || triton-3.9 %{ not %triton-opt %s '--tritongpu-hoist-tmem-alloc=hoist-out-of-if=true' 2>&1 | FileCheck %s --check-prefix=RENAMED %}
// RUN: not %triton-opt %s '--canonicalize=region-simplify=disabled' 2>&1 | FileCheck %s --check-prefix=REFUSED
// RUN: not %triton-opt %s --tritongpu-test-pipeline-lower-loop 2>&1 | FileCheck %s --check-prefix=UNREACHABLE
// RUN: not %triton-opt %s %S/Inputs/unregistered.mlir -cse 2>&1 | FileCheck %s --check-prefix=ARGS

// An option given to a Triton pass is applied through its Python adder, or refused with the reason.

// APPLIED-LABEL: tt.func @noop
// Triton 3.8 replaced hoist-tmem-alloc's hoist-out-of-if option with post-pipeline: the old name is refused.
// RENAMED: bwtriton-opt: error: pass tritongpu-hoist-tmem-alloc has no option 'hoist-out-of-if'. Its options: post-pipeline.
// REFUSED: bwtriton-opt: error: pass canonicalize: option region-simplify=disabled cannot be applied
// REFUSED-SAME: passes.common.add_canonicalizer() does not take it
// UNREACHABLE: unknown pass or flag 'tritongpu-test-pipeline-lower-loop'
// UNREACHABLE-SAME: not reachable from Python
// ARGS: one input file expected
module attributes {"ttg.num-warps" = 4 : i32, "ttg.num-ctas" = 1 : i32, "ttg.target" = "cuda:100"} {
  tt.func @noop() {
    tt.return
  }
}
