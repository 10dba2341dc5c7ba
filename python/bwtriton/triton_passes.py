"""Triton's own MLIR passes by their MLIR names (e.g. ``tritongpu-accelerate-matmul``), so `bwtriton opt` can run
them next to ours, like triton-opt. The wheel exposes passes only as ``add_*`` functions; we learn each one's
MLIR name by adding it to a scratch pass manager and reading the pipeline string."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class CompileContext:
    """Values some Triton passes take as arguments."""

    capability: int = 100
    num_warps: int = 4
    num_stages: int = 3
    num_ctas: int = 1
    ptx_version: int = 88


# Adders that need arguments, and how to get them from the context (the order Triton's make_ttgir uses).
_ARGS: dict[str, Callable[[CompileContext], tuple]] = {
    "add_assign_latencies": lambda c: (c.num_stages,),
    "add_f32_dot_tc": lambda c: (c.capability // 10 >= 8,),
    "add_hoist_tmem_alloc": lambda c: (False,),
    "add_optimize_dot_operands": lambda c: (c.capability >= 80,),
    "add_pipeline": lambda c: (c.num_stages, False),
    "add_warp_specialize": lambda c: (c.num_stages,),
    "add_convert_to_ttgpuir": lambda c: (f"cuda:{c.capability}", c.num_warps, 32, c.num_ctas),
    "add_hopper_warpspec": lambda c: (c.num_stages, False),
    "add_allocate_shared_memory_nv": lambda c: (c.capability, c.ptx_version),
    "add_to_llvmir": lambda c: (c.capability, c.ptx_version),
    "add_fence_insertion": lambda c: (c.capability,),
    "add_proxy_fence_insertion": lambda c: (c.capability,),
}


def _adders() -> list[tuple[str, Callable]]:
    from triton._C.libtriton import nvidia, passes
    found = []
    for prefix, root in (("passes", passes), ("nvidia.passes", nvidia.passes)):
        for group in sorted(n for n in dir(root) if not n.startswith("_")):
            mod = getattr(root, group)
            for fn in sorted(n for n in dir(mod) if n.startswith("add_")):
                found.append((f"{prefix}.{group}.{fn}", getattr(mod, fn)))
    return found


@functools.lru_cache(maxsize=None)
def triton_pass_table() -> dict[str, tuple[str, Callable, Callable[[CompileContext], tuple]]]:
    """MLIR pass name -> (python adder path, adder, argument factory)."""
    from triton._C.libtriton import ir
    ctx = ir.context()
    table = {}
    for path, fn in _adders():
        args = _ARGS.get(path.rsplit(".", 1)[1], lambda c: ())
        pm = ir.pass_manager(ctx)
        try:
            fn(pm, *args(CompileContext()))
        except TypeError:  # an adder whose arguments we do not know: not offered
            continue
        m = re.match(r"any\(([\w.\-]+)", pm.get_pipeline_str())
        if m:
            table.setdefault(m.group(1), (path, fn, args))
    return table
