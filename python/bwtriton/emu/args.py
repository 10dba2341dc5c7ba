"""Kernel arguments as the launcher hands them to the runner (launcher.py encodes, runner.py stores): their own
module, so the runner does not import the launcher that calls it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Raw:
    """A parameter value already encoded as the bit pattern the kernel reads (the runner stores it as is)."""

    bits: int


@dataclass
class TmaArg:
    """A host TensorDescriptor bound to a tensor-map parameter, with the compile's tensordesc_meta entry."""

    desc: Any
    meta: dict
