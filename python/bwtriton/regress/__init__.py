"""Compiler regression testing: triton-opt compatibility helpers for `bwtriton opt` / `bwtriton-opt`
(pass options, -verify-diagnostics, local-scope printing) and corpus snapshots with `bwtriton snapshot` /
`bwtriton diff`. See docs/regression_testing.md."""
