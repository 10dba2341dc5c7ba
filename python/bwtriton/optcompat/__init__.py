"""triton-opt compatibility for `bwtriton opt` / `bwtriton-opt` and the upstream lit trees: pass option text,
-verify-diagnostics, local-scope printing, and stand-ins for FileCheck's display flags and mlir-translate/llc.
Nothing here imports `bwtriton.opt` (which builds on these) or `bwtriton.regress` (the snapshot tools)."""
