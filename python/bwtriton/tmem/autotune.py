"""`prune_configs_by_resources`: drop autotune configs whose TMEM or shared memory cannot fit, before Triton
compiles (or, upstream, traps on) them.

Estimates, per config, from its block sizes:
- TMEM columns: `accumulators * acc_buffers` accumulators of BLOCK_M x BLOCK_N at `acc_bits` (fp32: one column
  per N element for BLOCK_M <= 128 rows; BLOCK_M=256 in one CTA takes two 128-row blocks), plus block-scale
  columns for block-scaled kernels (`scale_group`: ceil(BLOCK_M/32)*ceil(BLOCK_K/group/4) for A, same for
  B with BLOCK_N), through the same footprint functions the planner uses.
- Shared memory: `num_stages` copies of the A (BLOCK_M x BLOCK_K) and B (BLOCK_K x BLOCK_N) tiles at
  `operand_bits`, plus `epilogue_bytes`. This is the multi-buffered operand ring of the pipeliner.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable

from bwtriton.errors import InputError
from bwtriton.targets import MAX_SHARED_BYTES

from .plan import TMEM_COLUMNS, accumulator_footprint, round_alloc_size, scales_footprint

#: Largest dynamic shared memory per block on sm_100 (232448 bytes = 227 KiB).
SM100_MAX_SHARED_BYTES = MAX_SHARED_BYTES["sm_100"]


def estimate_tmem_columns(block_m: int, block_n: int, *, accumulators: int = 1, acc_buffers: int = 1,
                          acc_bits: int = 32, block_k: int | None = None, scale_group: int | None = None) -> int:
    """TMEM columns a kernel with these blocks allocates (rounded to a legal tcgen05.alloc size)."""
    block_m_enc = min(block_m, 128)
    shape = [acc_buffers, block_m, block_n] if acc_buffers > 1 else [block_m, block_n]
    one = accumulator_footprint(shape, acc_bits, block_m_enc, min(block_n, 256), 32 // acc_bits
                                if acc_bits < 32 else 1)
    cols = accumulators * one.columns
    if scale_group:
        if not block_k:
            raise InputError("scale_group needs block_k (the K block) to size the scale columns")
        ks = math.ceil(block_k / scale_group)
        cols += scales_footprint([block_m, ks]).columns + scales_footprint([block_n, ks]).columns
    return round_alloc_size(cols)


def estimate_shared_bytes(block_m: int, block_n: int, block_k: int, num_stages: int, *, operand_bits: int = 16,
                          epilogue_bytes: int = 0) -> int:
    """Shared memory of the multi-buffered A/B operand ring plus `epilogue_bytes`."""
    stages = max(1, num_stages)
    return stages * (block_m * block_k + block_k * block_n) * operand_bits // 8 + epilogue_bytes


def prune_configs_by_resources(*, block_m: str = "BLOCK_M", block_n: str = "BLOCK_N", block_k: str = "BLOCK_K",
                               accumulators: "int | str" = 1, acc_buffers: int = 1, acc_bits: int = 32,
                               operand_bits: "int | str" = 16, scale_group: int | None = None,
                               epilogue_bytes: int = 0, tmem_columns: int = TMEM_COLUMNS,
                               shared_bytes: int = SM100_MAX_SHARED_BYTES,
                               on_prune: Callable[[Any, str], None] | None = None
                               ) -> Callable[..., list]:
    """An `early_config_prune` for `triton.autotune(prune_configs_by={"early_config_prune": ...})`.

    `block_m`/`block_n`/`block_k` name the config (or kernel) parameters holding the block sizes;
    `accumulators` is a count or the name of a constexpr holding it; `operand_bits` is a width or the name of
    a tensor argument whose element size gives it. Configs needing more than `tmem_columns` TMEM columns or
    `shared_bytes` of shared memory are dropped (`on_prune(config, reason)` hears about each). If every
    config would be dropped, raises `InputError` listing them, instead of Triton's empty-list error.
    """
    def lookup(config, named_args: dict, kwargs: dict, key: "int | str"):
        if not isinstance(key, str):
            return key
        for src in (config.kwargs, kwargs, named_args):
            if key in src:
                return src[key]
        raise InputError(f"prune_configs_by_resources: no config kwarg or kernel argument named {key!r}; "
                         f"pass the right name (block_m=..., block_n=..., block_k=..., accumulators=...)")

    def bits_of(value) -> int:
        if isinstance(value, int):
            return value
        dtype = getattr(value, "dtype", None)
        if dtype is not None and hasattr(dtype, "itemsize"):
            return 8 * dtype.itemsize
        raise InputError(f"prune_configs_by_resources: cannot get an element width from {value!r}")

    def prune(configs: Iterable, named_args: dict, **kwargs) -> list:
        kept, dropped = [], []
        for config in configs:
            bm, bn, bk = (int(lookup(config, named_args, kwargs, k)) for k in (block_m, block_n, block_k))
            n_acc = int(lookup(config, named_args, kwargs, accumulators))
            tmem = estimate_tmem_columns(bm, bn, accumulators=n_acc, acc_buffers=acc_buffers, acc_bits=acc_bits,
                                         block_k=bk, scale_group=scale_group)
            smem = estimate_shared_bytes(bm, bn, bk, getattr(config, "num_stages", 3),
                                         operand_bits=bits_of(lookup(config, named_args, kwargs, operand_bits)),
                                         epilogue_bytes=epilogue_bytes)
            reasons = []
            if tmem > tmem_columns:
                reasons.append(f"TMEM {tmem} > {tmem_columns} columns")
            if smem > shared_bytes:
                reasons.append(f"shared memory {smem} > {shared_bytes} bytes")
            if reasons:
                dropped.append((config, "; ".join(reasons)))
                if on_prune:
                    on_prune(config, "; ".join(reasons))
            else:
                kept.append(config)
        if not kept:
            listing = "\n".join(f"  {c}: {r}" for c, r in dropped)
            raise InputError(f"every autotune config exceeds the TMEM/shared-memory budget:\n{listing}\n"
                             f"add configs with smaller BLOCK_N/BLOCK_M, fewer accumulators or fewer stages")
        return kept

    return prune
