"""What differs between Triton releases for 2-CTA (``cta_group::2``) pairing of `tl.dot` tiles (`pair-ctas`).

Measured on sm_100a with the pointer and TMA matmuls of `bwtriton.examples` at num_ctas=2, BLOCK_M=256
(docs/two_cta.md, "Triton versions"):

- 3.6: make_ttgir splits B along N.
- 3.7+: B is broadcast to both CTAs (the pass splits it, version-independent code: it acts on the layouts).
- 3.7+: the lowering no longer puts a cluster barrier before every MMA issue (the pass adds it).
- 3.9 replaced ``ttng.cluster_arrive`` / ``ttng.cluster_wait`` by one ``ttng.cluster_barrier`` op.
"""
from __future__ import annotations

from .versions import installed


def exit_cluster_barrier() -> tuple[str, ...]:
    """TTGIR ops (one per line) of a full cluster barrier (release/acquire, not relaxed) on this Triton."""
    if installed()[:2] >= (3, 9):
        return ("ttng.cluster_barrier",)
    return ("ttng.cluster_arrive {relaxed = false}", "ttng.cluster_wait")


def lowering_syncs_pair_operands() -> bool:
    """Whether Triton's lowering of a 2-CTA ``tc_gen5_mma`` puts a cluster barrier before every MMA issue, so the
    leader reads the peer's operand tiles only after the peer saw them land. 3.6 does; 3.7 and 3.8 put none, 3.9
    one (relaxed) before the first MMA only: there the emulator catches the leader's MMA reading a peer tile whose
    cp.async the peer has not waited for (K = 640, 3 stages)."""
    return installed()[:2] <= (3, 6)


def tma_bt_num_ctas2_compiles() -> bool:
    """Whether Triton's own make_ttgir compiles the TMA matmul with B read as ``b.T`` at num_ctas=2, BLOCK_M=256
    (3.8's accelerate-matmul rejects it: "'ttng.tc_gen5_mma' op expected block basis 128, 64 ... but got 128, 0",
    before any bwtriton pass can run)."""
    return installed()[:2] != (3, 8)


def tma_emulation_supported() -> bool:
    """Whether bwtriton's emulator runs Triton's TMA kernels on this release (on 3.9 the emulated launch finds no
    tensor map at the descriptor's address, also for 1-CTA kernels: a general 3.9 emulator gap, not pairing's)."""
    return installed()[:2] != (3, 9)


def lowering_syncs_pair_exit() -> bool:
    """Whether Triton's lowering of a 2-CTA kernel puts a cluster barrier before the ``tcgen05.dealloc.cta_group::2``
    at exit (3.7+ do; 3.6 does not, and `pair-ctas` adds its exit handshake there)."""
    return installed()[:2] >= (3, 7)


def triton_pairs_kn_dot() -> bool:
    """Whether make_ttgir itself marks a 256-row `tl.dot` with B stored [K, N] 2-CTA at num_ctas=2 (3.6 only)."""
    return installed()[:2] <= (3, 6)


def unpaired_tma_bt_aborts() -> bool:
    """Whether Triton aborts the process ('LLVM ERROR: Failed to find a valid layout') lowering the TMA b.T matmul
    at num_ctas=2 without pairing (3.6; 3.7 and 3.8 fail with an error, 3.9 lowers it as two 1-CTA MMAs)."""
    return installed()[:2] <= (3, 6)
