"""Whether a compiled tile may be paired: each tcgen05 MMA of the TTGIR summarised as an `MmaSummary`, and
`eligibility_problems` saying what stops pairing, each problem naming its fix (see docs/two_cta.md)."""
from __future__ import annotations

from dataclasses import dataclass

from bwtriton.pairing import MAX_BLOCK_N, MIN_BLOCK_N, PAIR_BLOCK_M, PAIR_TARGETS


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
            problems.append(f"{where}: block-scaled tl.dot_scaled cannot be paired with Triton 3.6's num_ctas=2 "
                            f"lowering (LLVM 'Failed to find a valid layout' even with SFB replicated into both "
                            f"CTAs); compile the 128-row tile with num_ctas=1 and passes=['+pair-ctas-scaled'], "
                            f"which pairs its PTX into cta_group::2 M=256 MMAs (docs/two_cta.md)")
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
        if mma.b_split not in ((1, 2), (1, 1)):  # broadcast B (Triton 3.7+) is split by the pass (b_split)
            problems.append(f"{where}: operand B is split {mma.b_split} across the CTAs; cta_group::2 needs each CTA "
                            f"to hold half of B's columns (1, 2)")
    return list(dict.fromkeys(problems))  # software pipelining copies an MMA; report each problem once


def crashes_unpaired(num_ctas: int, mmas: list[MmaSummary]) -> bool:
    """True when Triton 3.6's own lowering would abort the process on this TTGIR as it is: an accumulator split
    along M over 2 CTAs that is not marked 2-CTA ('LLVM ERROR: Failed to find a valid layout', measured)."""
    return num_ctas > 1 and any(m.acc_split and m.acc_split[0] > 1 and not m.two_ctas for m in mmas)
