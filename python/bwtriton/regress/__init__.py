"""Compiler regression snapshots: `bwtriton snapshot` records what a corpus of kernels compiles to, `bwtriton diff`
compares two records. See docs/regression_testing.md (triton-opt compatibility lives in `bwtriton.optcompat`)."""
