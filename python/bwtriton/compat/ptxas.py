"""How each Triton release runs ptxas, so that a SASS or register count we take ourselves (snapshots, tests)
matches the cubin Triton builds."""
from __future__ import annotations

from .versions import at_least


def triton_ptxas_flags() -> list[str]:
    """Flags Triton's `make_cubin` passes to ptxas beyond `-v`, `--gpu-name` and the fp-fusion switch: 3.7 and later
    add ``--regAllocOptLevel=2`` (their workaround for a ptxas 13 register-allocation bug), which changes the
    register allocation and so the SASS and the register counts."""
    return ["--regAllocOptLevel=2"] if at_least(3, 7) else []
