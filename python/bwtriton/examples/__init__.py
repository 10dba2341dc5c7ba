"""Small reference kernels used by the demo, the tutorials and the tests (one source of truth)."""
