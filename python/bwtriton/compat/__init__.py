"""The one home of Triton-version differences.

bwtriton runs on the Triton releases in `SUPPORTED` (each tested). Everything that differs between them -- how
the stage-inspection hook is called, what Triton's pass bindings are named, Gluon's API spellings, text that the
front ends parse -- is answered here, so no other module of the package reads ``triton.__version__``.
"""
from __future__ import annotations

from .versions import (SUPPORTED, SUPPORTED_RANGE, TritonVersion, UnsupportedTritonError, check_supported,
                       installed, parse_version)

__all__ = ["SUPPORTED", "SUPPORTED_RANGE", "TritonVersion", "UnsupportedTritonError", "check_supported",
           "installed", "parse_version"]
