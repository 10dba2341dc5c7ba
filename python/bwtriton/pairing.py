"""When a kernel should use 2-CTA ``cta_group::2`` MMAs (the `auto` heuristic), and the pair tile's limits.

`should_pair` is a property of the problem size, for callers that choose `num_ctas` before compiling (a pass
cannot: by TTGIR the CTA split is already decided). Whether a compiled tile *may* be paired is the `pair-ctas`
pass's business (lib_passes/pair_ctas/eligibility.py), which reads the limits below. See docs/two_cta.md.
"""
from __future__ import annotations

import math

from .errors import InputError
from .targets import B200_SM_COUNT

#: The pair's tile height: 128 accumulator rows per CTA (one TMEM lane per row) times 2 CTAs.
PAIR_BLOCK_M = 256
#: Smallest pair tile width we pair (each CTA then loads >= 32 columns of B, one 64-byte swizzle atom of fp16).
MIN_BLOCK_N = 64
#: Largest N of one cta_group::2 MMA (PTX: N <= 256, step 16).
MAX_BLOCK_N = 256
PAIR_TARGETS = ("sm_100a", "sm_103a")


# ----------------------------------------------------------------------------------------------------------------
# The `auto` heuristic
# ----------------------------------------------------------------------------------------------------------------

#: Below this K the pipeline prologue and the pair's setup/exit cluster barriers are a large share of a tile's time.
AUTO_MIN_K = 1024
#: Smallest problem: at least this many pair tiles along M and N (small/decode-like shapes stay 1-CTA).
AUTO_MIN_TILES_M = 2
#: Highest share of computed-but-discarded rows/columns in the last tile along M or N.
AUTO_MAX_TAIL_WASTE = 0.125
#: Lowest efficiency of the last wave of clusters when there are few waves (the seeds: tail waves hurt 2-CTA).
AUTO_MIN_LAST_WAVE = 0.75
AUTO_MANY_WAVES = 4
B200_SMS = B200_SM_COUNT


def tail_waste(size: int, block: int) -> float:
    """Share of the padded extent ceil(size/block)*block that lies past `size`."""
    padded = math.ceil(size / block) * block
    return (padded - size) / padded


def should_pair(M: int, N: int, K: int, block_m: int = PAIR_BLOCK_M, block_n: int = 128, *,
                num_sms: int = B200_SMS) -> bool:
    """The documented `auto` rule: pair (2-CTA, 256-row tiles) only for large, tail-light GEMMs.

    All of these must hold (docs/two_cta.md gives the reasons):
    1. the tile is pairable: block_m == 256 and 64 <= block_n <= 256;
    2. large K (K >= 1024): enough K steps to amortise the pipeline fill and the pair's cluster barriers;
    3. large M and N: at least 2 pair tiles along M and enough clusters to occupy every SM once
       (clusters * 2 >= num_sms); small-M / decode shapes stay 1-CTA;
    4. light tails: at most 12.5% of the last tile along M and along N is padding;
    5. wave quantisation: with fewer than 4 waves of clusters, the last wave is at least 75% full.
    """
    for name, v in (("M", M), ("N", N), ("K", K), ("block_m", block_m), ("block_n", block_n), ("num_sms", num_sms)):
        if not isinstance(v, int) or v <= 0:
            raise InputError(f"should_pair: {name} must be a positive int, got {v!r}")
    if block_m != PAIR_BLOCK_M or not MIN_BLOCK_N <= block_n <= MAX_BLOCK_N:
        return False
    if K < AUTO_MIN_K:
        return False
    tiles_m, tiles_n = math.ceil(M / block_m), math.ceil(N / block_n)
    clusters = tiles_m * tiles_n
    if tiles_m < AUTO_MIN_TILES_M or clusters * 2 < num_sms:
        return False
    if tail_waste(M, block_m) > AUTO_MAX_TAIL_WASTE or tail_waste(N, block_n) > AUTO_MAX_TAIL_WASTE:
        return False
    clusters_per_wave = num_sms // 2
    waves = clusters / clusters_per_wave
    if waves < AUTO_MANY_WAVES and waves / math.ceil(waves) < AUTO_MIN_LAST_WAVE:
        return False
    return True
