"""Tile helpers shared by the GEMM kernels: the tile order (usable inside @triton.jit code) and the swap-AB
mixed-input kernels' activation tile and K split (host side)."""
import triton
import triton.language as tl


@triton.jit
def grouped_tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of a linear tile id in grouped order: GROUP_M rows of tiles share each column of B."""
    tiles_per_group = GROUP_M * num_pid_n
    group = tile_id // tiles_per_group
    first_m = group * GROUP_M
    group_rows = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile_id % tiles_per_group) % group_rows
    pid_n = (tile_id % tiles_per_group) // group_rows
    return pid_m, pid_n


#: The swap-AB mixed-input kernels' activation tile (the wgmma N side): 16 .. 256 rows.
SWAP_AB_MIN_M, SWAP_AB_MAX_M = 16, 256
#: Largest split of K those kernels use.
MAX_SPLIT_K = 16


def swap_ab_block_m(m: int) -> int:
    """Activation rows per CTA (the wgmma N dimension) for M rows: SWAP_AB_MIN_M .. SWAP_AB_MAX_M."""
    return min(SWAP_AB_MAX_M, max(SWAP_AB_MIN_M, triton.next_power_of_2(m)))


def k_split(ctas: int, k: int, block_k: int, min_steps: int, num_sms: int, split_div: int = 1) -> int:
    """Split of K (a power of two up to MAX_SPLIT_K) doubled until `ctas` x split >= 2 CTAs per SM, a doubling
    of `split` taken only while K is a multiple of min_steps x split x block_k (so every slice keeps
    min_steps / 2 whole K steps, or a multiple of them), then divided by `split_div` (fewer, longer slices)."""
    split = 1
    while ctas * split < 2 * num_sms and k % (min_steps * split * block_k) == 0 and split < MAX_SPLIT_K:
        split *= 2
    return max(1, split // split_div)
