"""When a kernel may (eligibility) and should (the `auto` heuristic) use 2-CTA ``cta_group::2`` MMAs.

Eligibility is a property of the compiled tile: the `pair-ctas` pass summarises every tcgen05 MMA of a TTGIR module
as an `MmaSummary` and `eligibility_problems` says what stops pairing, each problem naming its fix. The heuristic
`should_pair` is a property of the problem size and is for callers that choose `num_ctas` before compiling (a pass
cannot: by TTGIR the CTA split is already decided). See docs/two_cta.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import InputError

#: The pair's tile height: 128 accumulator rows per CTA (one TMEM lane per row) times 2 CTAs.
PAIR_BLOCK_M = 256
#: Smallest pair tile width we pair (each CTA then loads >= 32 columns of B, one 64-byte swizzle atom of fp16).
MIN_BLOCK_N = 64
#: Largest N of one cta_group::2 MMA (PTX: N <= 256, step 16).
MAX_BLOCK_N = 256
PAIR_TARGETS = ("sm_100a", "sm_103a")


@dataclass(frozen=True)
class MmaSummary:
    """What pairing needs to know about one tcgen05 MMA of a TTGIR module (num_ctas = 2)."""

    m: int                                  # accumulator rows of the whole CTA pair (the tile's BLOCK_M)
    n: int                                  # accumulator columns (BLOCK_N)
    acc_split: tuple[int, int] | None       # CTAs splitting (M, N) of the accumulator; (2, 1) = split on M
    a_split: tuple[int, int] | None         # CTAs splitting A's (M, K)
    b_split: tuple[int, int] | None         # CTAs splitting B's (K, N)
    scaled: bool = False                    # tc_gen5_mma_scaled (tl.dot_scaled)
    two_ctas: bool = False                  # Triton already marked it cta_group::2


def eligibility_problems(target_name: str, num_ctas: int, mmas: list[MmaSummary]) -> list[str]:
    """Why this kernel cannot be paired (empty list: it can). Each entry names the problem and the fix."""
    problems: list[str] = []
    if target_name not in PAIR_TARGETS:
        problems.append(f"target {target_name} has no cta_group::2 tcgen05 MMA; pairing needs one of "
                        f"{', '.join(PAIR_TARGETS)} (the pass does nothing on other targets)")
        return problems
    if not mmas:
        problems.append("the kernel has no tcgen05 MMA (no tl.dot/tl.dot_scaled that Triton lowered to tcgen05; "
                        "int8 and tiny dots go to mma.sync): there is nothing to pair; drop two_cta")
        return problems
    if num_ctas != 2:
        problems.append(f"the kernel was compiled with num_ctas={num_ctas}; a CTA pair needs num_ctas=2 "
                        f"(use bwtriton.compile(..., two_cta=True), which sets it)")
        return problems
    for mma in mmas:
        where = f"the {mma.m}x{mma.n} tcgen05 MMA"
        if mma.scaled:
            problems.append(f"{where}: block-scaled tl.dot_scaled cannot be paired with Triton 3.6: its lowering "
                            f"has no 2-CTA scaled MMA (LLVM 'Failed to find a valid layout' even with SFB replicated "
                            f"into both CTAs); compile it with num_ctas=1 (two_cta=False)")
            continue
        if mma.m != PAIR_BLOCK_M:
            problems.append(f"{where}: BLOCK_M is {mma.m}, the pair tile needs BLOCK_M = {PAIR_BLOCK_M} (128 rows "
                            f"per CTA); set BLOCK_M={PAIR_BLOCK_M}")
            continue
        if mma.n < MIN_BLOCK_N or mma.n > MAX_BLOCK_N:
            problems.append(f"{where}: BLOCK_N is {mma.n}; pairing needs {MIN_BLOCK_N} <= BLOCK_N <= "
                            f"{MAX_BLOCK_N}; use a BLOCK_N in that range or two_cta=False")
            continue
        if mma.acc_split != (2, 1):
            problems.append(f"{where}: Triton split the accumulator {mma.acc_split} across the 2 CTAs, not along M "
                            f"(2, 1); only an M split pairs (BLOCK_M = {PAIR_BLOCK_M}, num_warps 4 or 8)")
            continue
        if mma.a_split != (2, 1):
            problems.append(f"{where}: operand A is split {mma.a_split} across the CTAs; cta_group::2 needs each CTA "
                            f"to hold its 128 rows of A (2, 1)")
        if mma.b_split != (1, 2):
            problems.append(f"{where}: operand B is split {mma.b_split} across the CTAs; cta_group::2 needs each CTA "
                            f"to hold half of B's columns (1, 2)")
    return list(dict.fromkeys(problems))  # software pipelining copies an MMA; report each problem once


def crashes_unpaired(num_ctas: int, mmas: list[MmaSummary]) -> bool:
    """True when Triton 3.6's own lowering would abort the process on this TTGIR as it is: an accumulator split
    along M over 2 CTAs that is not marked 2-CTA ('LLVM ERROR: Failed to find a valid layout', measured)."""
    return num_ctas > 1 and any(m.acc_split and m.acc_split[0] > 1 and not m.two_ctas for m in mmas)


# ----------------------------------------------------------------------------------------------------------------
# The `auto` heuristic
# ----------------------------------------------------------------------------------------------------------------

#: Below this K the per-K-step cluster barrier and the pipeline prologue are a large share of a tile's time.
AUTO_MIN_K = 1024
#: Smallest problem: at least this many pair tiles along M and N (small/decode-like shapes stay 1-CTA).
AUTO_MIN_TILES_M = 2
#: Highest share of computed-but-discarded rows/columns in the last tile along M or N.
AUTO_MAX_TAIL_WASTE = 0.125
#: Lowest efficiency of the last wave of clusters when there are few waves (the seeds: tail waves hurt 2-CTA).
AUTO_MIN_LAST_WAVE = 0.75
AUTO_MANY_WAVES = 4
B200_SMS = 148


def tail_waste(size: int, block: int) -> float:
    """Share of the padded extent ceil(size/block)*block that lies past `size`."""
    padded = math.ceil(size / block) * block
    return (padded - size) / padded


def should_pair(M: int, N: int, K: int, block_m: int = PAIR_BLOCK_M, block_n: int = 128, *,
                num_sms: int = B200_SMS) -> bool:
    """The documented `auto` rule: pair (2-CTA, 256-row tiles) only for large, tail-light GEMMs.

    All of these must hold (docs/two_cta.md gives the reasons):
    1. the tile is pairable: block_m == 256 and 64 <= block_n <= 256;
    2. large K (K >= 1024): enough K steps to amortise the per-step cluster barrier and pipeline fill;
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
