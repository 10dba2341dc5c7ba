"""`clc_schedule_kernel`: a persistent kernel that does no math and records, for every tile, which program
processed it. The schedule probe of the CLC tests and the tutorial: under CLC, `owner[t]` is the program that
started on some SM and stole tile t; under the static schedule it is ``t % num_programs``."""
from __future__ import annotations

import triton
import triton.language as tl

from bwtriton.language import clc


@triton.jit
def clc_schedule_kernel(owner_ptr, visits_ptr, num_tiles, USE_CLC: tl.constexpr, NUM_CTAS: tl.constexpr):
    """owner[t] = 1 + the program id that processed tile t; visits[t] counts how often t was processed (must be
    1: a tile stolen twice, or both stolen and run by its own program, would show as 2)."""
    tile = tl.program_id(0)
    while tile < num_tiles:
        tl.store(owner_ptr + tile, tl.program_id(0) + 1)
        tl.atomic_add(visits_ptr + tile, 1)
        tile = clc.next_tile(tile, num_tiles, USE_CLC, NUM_CTAS)


SIGNATURE = {"owner_ptr": "*i32", "visits_ptr": "*i32", "num_tiles": "i32"}
BWTRITON_SPECS = {"clc_schedule_kernel": {"signature": SIGNATURE,
                                          "constexprs": {"USE_CLC": True, "NUM_CTAS": 1}, "num_warps": 4}}
