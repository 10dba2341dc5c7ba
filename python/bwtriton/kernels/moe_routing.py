"""MoE routing: the top-k choice, the plan that puts token-expert pairs in expert order and cuts each expert's
rows into tiles (torch ops or one Triton launch, no host synchronisation), and the weighted un-permute of the
expert outputs (`bwtriton.kernels.moe` runs the expert GEMMs between the two)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..errors import InputError
from ..targets import get_target, target_for_capability
from ._launcher import CachedLauncher

__all__ = ["RoutingPlan", "route_topk", "plan_routing", "unpermute", "max_tiles", "device_target",
           "routing_kernel_blocks", "routing_kernel_shared_bytes", "routing_kernel_fits", "routing_plan_kernel"]


def device_target(device: torch.device):
    """The `targets.Target` kernels on `device` compile for: the GPU's, or the emulated B200 (sm_100a) for CPU
    tensors."""
    if device.type == "cuda":
        from ._device import device_capability  # CUDA-only query; CPU (emulated) launches never make it
        return target_for_capability(device_capability(device))
    return get_target("sm_100a")


@dataclass(frozen=True)
class RoutingPlan:
    """Token-expert pairs in expert order. sorted_token int32 [T*k] (the token of each row), sorted_weight fp32
    [T*k], inverse int64 [T*k] (row of pair t*k + j), expert_end int32 [E] (one past each expert's last row),
    tile_expert / tile_row int32 [max_tiles] (expert and first row of each tile; past the last tile: expert 0 and
    row expert_end[0], i.e. an empty tile), block_m."""

    sorted_token: torch.Tensor
    sorted_weight: torch.Tensor
    inverse: torch.Tensor
    expert_end: torch.Tensor
    tile_expert: torch.Tensor
    tile_row: torch.Tensor
    block_m: int
    num_tokens: int
    top_k: int


def route_topk(router_logits: torch.Tensor, top_k: int, *, renormalize: bool = True) -> tuple[torch.Tensor,
                                                                                             torch.Tensor]:
    """(weights fp32 [T, k], expert index int64 [T, k]): softmax over the experts, the top k, renormalized to sum 1
    when `renormalize` (Mixtral / Qwen-MoE routing)."""
    probs = torch.softmax(router_logits.float(), dim=-1)
    weights, index = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, index


def max_tiles(num_pairs: int, num_experts: int, block_m: int) -> int:
    """Upper bound on the tiles of any routing of `num_pairs` rows over `num_experts` experts: sum_e
    ceil(c_e / BM) < T*k / BM + E, and every tile holds at least one row."""
    return max(1, min(num_pairs, num_pairs // block_m + num_experts))


def routing_kernel_blocks(num_pairs: int, num_experts: int) -> tuple[int, int]:
    """(BLOCK, EB): the pairs and experts axes of `routing_plan_kernel`'s one-hot table, powers of two >= 16."""
    return max(16, triton.next_power_of_2(max(1, num_pairs))), max(16, triton.next_power_of_2(num_experts))


def routing_kernel_shared_bytes(num_pairs: int, num_experts: int) -> int:
    """An upper bound on the routing kernel's shared memory: the column prefix sums and the reductions over the
    [BLOCK, EB] int32 one-hot table (and the [TB <= BLOCK, EB] tile table) exchange at most the whole table
    through shared memory, 4 bytes a cell (checked against Triton's allocation in the MoE tests)."""
    block, eb = routing_kernel_blocks(num_pairs, num_experts)
    return 4 * block * eb


def routing_kernel_fits(num_pairs: int, num_experts: int, limit: int) -> bool:
    """Whether the one-launch routing kernel fits `limit` bytes of shared memory (the target's). Decode routings
    fit (64 tokens x top-8 over 64 experts: 128 KiB); prefill ones take the torch ops, whose ~30 launches are
    noise next to a prefill GEMM but would cost more than the expert GEMMs themselves at decode."""
    return routing_kernel_shared_bytes(num_pairs, num_experts) <= limit


def plan_routing(top_k_index: torch.Tensor, top_k_weights: torch.Tensor, num_experts: int, block_m: int, *,
                 method: str = "auto") -> RoutingPlan:
    """Sort the (token, expert) pairs by expert (stable) and build the tile table on the routing's device, with no
    host synchronisation (the plan's shapes depend only on T, k, E and block_m). method: 'torch' (torch ops),
    'kernel' (one Triton launch, `routing_plan_kernel`) or 'auto' (the kernel on a GPU when its table fits the
    target's shared memory, `routing_kernel_fits`)."""
    if top_k_index.dim() != 2 or top_k_weights.shape != top_k_index.shape:
        raise InputError(f"moe routing: top_k_index and top_k_weights must both be [tokens, k], got "
                         f"{tuple(top_k_index.shape)} and {tuple(top_k_weights.shape)}")
    if method not in ("auto", "torch", "kernel"):
        raise InputError(f"plan_routing: method must be 'auto', 'torch' or 'kernel', got {method!r}")
    limit = device_target(top_k_index.device).max_shared_bytes
    fits = routing_kernel_fits(top_k_index.numel(), num_experts, limit)
    if method == "kernel" and not fits:
        raise InputError(f"plan_routing: {top_k_index.numel()} pairs over {num_experts} experts need "
                         f"{routing_kernel_shared_bytes(top_k_index.numel(), num_experts)} bytes of shared memory "
                         f"in the routing kernel, over the target's {limit}; use method='torch'")
    if method == "kernel" or (method == "auto" and fits and top_k_index.is_cuda):
        return _plan_kernel(top_k_index, top_k_weights, num_experts, block_m)
    return _plan_torch(top_k_index, top_k_weights, num_experts, block_m)


def _plan_torch(top_k_index, top_k_weights, num_experts: int, block_m: int) -> RoutingPlan:
    t, k = top_k_index.shape
    device = top_k_index.device
    flat = top_k_index.reshape(-1).long()
    order = torch.sort(flat, stable=True).indices
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=device)
    counts = torch.zeros(num_experts, dtype=torch.int64, device=device).scatter_add_(0, flat, torch.ones_like(flat))
    ends = torch.cumsum(counts, 0)
    tiles = (counts + block_m - 1) // block_m
    tile_end = torch.cumsum(tiles, 0)
    n_tiles = max_tiles(t * k, num_experts, block_m)
    tile_ids = torch.arange(n_tiles, device=device)
    expert = torch.searchsorted(tile_end, tile_ids, right=True)
    valid = expert < num_experts
    e = expert.clamp(max=num_experts - 1)
    row = (ends - counts)[e] + (tile_ids - (tile_end - tiles)[e]) * block_m
    row = torch.where(valid, row, ends[0].expand_as(row))
    e = torch.where(valid, e, torch.zeros_like(e))
    return RoutingPlan(sorted_token=(order // k).to(torch.int32),
                       sorted_weight=top_k_weights.reshape(-1).float()[order].contiguous(),
                       inverse=inverse, expert_end=ends.to(torch.int32), tile_expert=e.to(torch.int32),
                       tile_row=row.to(torch.int32), block_m=block_m, num_tokens=t, top_k=k)


@triton.jit
def routing_plan_kernel(idx_ptr, w_ptr, sorted_token, sorted_weight, inverse, expert_end, tile_expert, tile_row,
                        num_pairs, num_tiles, TOP_K: tl.constexpr, E: tl.constexpr, BLOCK: tl.constexpr,
                        EB: tl.constexpr, TB: tl.constexpr, BLOCK_M: tl.constexpr):
    """The routing plan of `_plan_torch` in one program: a one-hot [pairs, experts] table gives the counts (column
    sums), each pair's rank among its expert's pairs (inclusive column prefix sums: stable, like the sort) and so
    its row; the tile table comes from the tile counts' prefix sums the same way."""
    i = tl.arange(0, BLOCK)
    ok = i < num_pairs
    e = tl.load(idx_ptr + i, mask=ok, other=EB).to(tl.int32)  # padding pairs match no expert column
    cols = tl.arange(0, EB)
    onehot = (e[:, None] == cols[None, :]).to(tl.int32)
    counts = tl.sum(onehot, axis=0)
    ends = tl.cumsum(counts, axis=0)
    starts = ends - counts
    rank = tl.sum(tl.cumsum(onehot, axis=0) * onehot, axis=1) - 1
    dest = tl.sum(starts[None, :] * onehot, axis=1) + rank
    tl.store(inverse + i, dest.to(tl.int64), mask=ok)
    tl.store(sorted_token + dest, (i // TOP_K).to(tl.int32), mask=ok)
    tl.store(sorted_weight + dest, tl.load(w_ptr + i, mask=ok, other=0.0).to(tl.float32), mask=ok)
    tl.store(expert_end + cols, ends, mask=cols < E)
    tiles = (counts + BLOCK_M - 1) // BLOCK_M
    tile_end = tl.cumsum(tiles, axis=0)
    t = tl.arange(0, TB)
    # expert of tile t = how many experts' tiles end at or before t (padding columns end at the total: counted
    # only for t past the last tile, which makes those tiles' expert >= E, i.e. empty)
    expert = tl.sum((tile_end[None, :] <= t[:, None]).to(tl.int32), axis=1)
    valid = expert < E
    expert = tl.where(valid, expert, 0)
    sel = (expert[:, None] == cols[None, :]).to(tl.int32)
    row = tl.sum(sel * starts[None, :], axis=1) + (t - tl.sum(sel * (tile_end - tiles)[None, :], axis=1)) * BLOCK_M
    row = tl.where(valid, row, tl.sum(tl.where(cols == 0, ends, 0), axis=0))
    tl.store(tile_expert + t, expert, mask=t < num_tiles)
    tl.store(tile_row + t, row, mask=t < num_tiles)


_PLAN = CachedLauncher(routing_plan_kernel)


def _plan_kernel(top_k_index, top_k_weights, num_experts: int, block_m: int) -> RoutingPlan:
    t, k = top_k_index.shape
    device = top_k_index.device
    pairs = t * k
    n_tiles = max_tiles(pairs, num_experts, block_m)
    idx = top_k_index.reshape(-1).contiguous()
    wts = top_k_weights.reshape(-1).contiguous()
    i32 = dict(dtype=torch.int32, device=device)
    plan = RoutingPlan(sorted_token=torch.empty(pairs, **i32), sorted_weight=torch.empty(pairs, dtype=torch.float32,
                                                                                          device=device),
                       inverse=torch.empty(pairs, dtype=torch.int64, device=device),
                       expert_end=torch.empty(num_experts, **i32), tile_expert=torch.empty(n_tiles, **i32),
                       tile_row=torch.empty(n_tiles, **i32), block_m=block_m, num_tokens=t, top_k=k)
    block, eb = routing_kernel_blocks(pairs, num_experts)
    tb = max(16, triton.next_power_of_2(n_tiles))
    _PLAN.launch(("plan", pairs, k, num_experts, block_m, idx.dtype, wts.dtype), (1,), device,
                 (idx, wts, plan.sorted_token, plan.sorted_weight, plan.inverse, plan.expert_end, plan.tile_expert,
                  plan.tile_row, pairs, n_tiles),
                 dict(TOP_K=k, E=num_experts, BLOCK=block, EB=eb, TB=tb, BLOCK_M=block_m,
                      num_warps=8 if block * eb > 8192 else 4))
    return plan


def unpermute(y: torch.Tensor, plan: RoutingPlan, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """[T*k, H] rows in expert order (or [S, T*k, H]: S partial sums of each row) -> [T, H]: each token's k
    (already weighted) expert outputs summed in fp32."""
    if y.dim() == 2:
        return y[plan.inverse].view(plan.num_tokens, plan.top_k, -1).float().sum(1).to(dtype)
    return y[:, plan.inverse].view(y.shape[0], plan.num_tokens, plan.top_k, -1).float().sum((0, 2)).to(dtype)
