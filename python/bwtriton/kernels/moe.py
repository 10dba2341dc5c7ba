"""Mixture-of-experts expert GEMMs with NVFP4 or MXFP4 weights: routing, permutation by expert, one grouped GEMM
over the ragged expert groups per projection, and the weighted un-permute.

    plan = plan_routing(top_k_index, top_k_weights, num_experts, block_m)     # torch ops on the device, no sync
    h = moe_gate_up(x, plan, weights)        # [T*k, I] bf16: act(x @ gate^T) * (x @ up^T), rows in expert order
    y = moe_down(h, plan, weights)           # [T*k, H] fp32: (h @ down^T) * routing weight, rows in expert order
    out = unpermute(y, plan)                 # [T, H]: the k expert outputs of each token summed

`moe_experts(x, top_k_index, top_k_weights, weights)` runs all four. Routing: token-expert pairs are sorted by
expert (stable), each expert's rows are cut into BLOCK_M tiles, and a tile -> (expert, first row) table is built
on the device with a static length (at most min(T*k, T*k // BLOCK_M + E) tiles), so the grid never depends on the
routing and the whole layer replays in a CUDA graph. Programs past the last tile, and rows past their expert's
last row, do nothing; an expert with no tokens has no tile.

One kernel does both projections (`moe_gemm_kernel`); per projection it gathers its A rows (tokens for gate/up,
expert-ordered rows of h for down), runs the K loop against expert e's weight rows and finishes in the epilogue:
gate/up keep two accumulators (gate rows n, up rows n + I of the same expert) so the activation (SiLU, or
gpt-oss's clamped SwiGLU) is applied before h is written once; down multiplies by the routing weight.

Two paths (`path`):
* 'block_scaled' (sm_100a): A tiles are quantized in registers (NVFP4 with a per-tensor encode scale for NVFP4
  weights, MXFP8 e4m3 for MXFP4 weights; `bwtriton.language.quant`) and multiplied with `tl.dot_scaled`, which
  sm_100a runs as tcgen05 block-scaled MMAs (kind::mxf4nvf4 / kind::mxf8f6f4).
* 'dequant' (Hopper and others): A stays bf16, the weight tile is dequantized exactly to bf16 in registers
  (e2m1 * block scale fits bf16; NVFP4's per-tensor scale goes on the fp32 accumulator) and `tl.dot` runs on the
  bf16 tensor cores.
* 'grouped_mm' (a prefill option where torch has `torch._grouped_mm`): the whole layer's weights dequantized
  exactly to bf16 once per call (transient memory: the bf16 weight size), then torch's bf16 grouped GEMM on the
  expert-sorted rows; per-expert scales, biases, activation and routing weights applied in torch. The dequant
  costs O(weights) against the GEMM's O(T k weights), so it only pays with many rows per expert.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl

from ..errors import InputError
from ..language.quant import dequantize_mxfp4_tile, quantize_mxfp8_tile, quantize_nvfp4_tile
from ._common import dequant_nvfp4_bf16, tcgen05_block_scaled
from ._launcher import CachedLauncher

__all__ = ["pad_k", "MoEWeights", "RoutingPlan", "route_topk", "plan_routing", "moe_gate_up", "moe_down", "unpermute",
           "moe_experts", "moe_experts_grouped_mm", "default_path", "ACTIVATIONS", "PATHS"]

ACTIVATIONS = ("silu", "swiglu_oai")
PATHS = ("block_scaled", "dequant", "grouped_mm")
_FMT_VEC = {"nvfp4": 16, "mxfp4": 32}
#: The kernel's K tile: expert weights are stored with K (their input features) padded with zero bytes and zero
#: scales to a multiple of it (`pad_k`), and activation loads are masked at the real width, so sizes like gpt-oss's
#: 2880 work; padded elements contribute exact zeros.
K_TILE = 128
#: Output features (hidden, intermediate) must be multiples of the smallest N block.
N_MULTIPLE = 64


def pad_k(data: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(data [..., K/2], scales [..., K/vec]) with K padded to a multiple of `K_TILE` by zero bytes (E2M1 zeros,
    scale 0 / 2^-127); returned unchanged when K already is one."""
    k_half = data.shape[-1]
    pad_bytes = (-2 * k_half) % K_TILE // 2
    if pad_bytes == 0:
        return data, scales
    vec = 2 * k_half // scales.shape[-1]
    raw = scales.view(torch.uint8)
    data = torch.nn.functional.pad(data, (0, pad_bytes))
    raw = torch.nn.functional.pad(raw, (0, 2 * pad_bytes // vec))
    return data.contiguous(), raw.contiguous().view(scales.dtype)


@dataclass(frozen=True)
class MoEWeights:
    """The expert weights of one MoE layer, as the kernels read them.

    gate_up_data uint8 [E, 2I, Hp/2] (gate rows first, then up rows), gate_up_scales [E, 2I, Hp/vec] (nvfp4:
    float8_e4m3fn, vec 16; mxfp4: uint8 UE8M0, vec 32), gate_up_global fp32 [E, 2] (nvfp4 decode scales of the
    gate and up halves; ones for mxfp4); down_data [E, H, Ip/2], down_scales [E, H, Ip/vec], down_global fp32 [E].
    Hp, Ip: H and I padded to a multiple of `K_TILE` (`pad_k`).
    Biases fp32 [E, 2I] / [E, H] or None. activation: 'silu' (silu(gate) * up) or 'swiglu_oai' (gpt-oss:
    gate clamped above at `limit`, up to [-limit, limit], gate * sigmoid(alpha * gate) * (up + 1))."""

    fmt: str
    gate_up_data: torch.Tensor
    gate_up_scales: torch.Tensor
    gate_up_global: torch.Tensor
    down_data: torch.Tensor
    down_scales: torch.Tensor
    down_global: torch.Tensor
    gate_up_bias: Optional[torch.Tensor] = None
    down_bias: Optional[torch.Tensor] = None
    activation: str = "silu"
    swiglu_alpha: float = 1.702
    swiglu_limit: float = 7.0

    @property
    def num_experts(self) -> int:
        return self.gate_up_data.shape[0]

    @property
    def hidden(self) -> int:
        return self.down_data.shape[1]

    @property
    def intermediate(self) -> int:
        return self.gate_up_data.shape[1] // 2


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


# --------------------------------------------------------------------------------------------------- routing

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


#: Largest (pairs, experts) block, BLOCK * EB (both padded to powers of two), that the one-launch routing kernel
#: builds its one-hot table for: 64 Ki int32 cells over 8 warps is ~64 registers per thread. Decode routings
#: (T <= 64 tokens, k <= 8, E <= 128) fit; bigger ones use the torch ops, whose ~30 launches are noise next to a
#: prefill GEMM but would cost more than the expert GEMMs themselves at decode.
ROUTING_KERNEL_MAX_CELLS = 1 << 16


def plan_routing(top_k_index: torch.Tensor, top_k_weights: torch.Tensor, num_experts: int, block_m: int, *,
                 method: str = "auto") -> RoutingPlan:
    """Sort the (token, expert) pairs by expert (stable) and build the tile table on the routing's device, with no
    host synchronisation (the plan's shapes depend only on T, k, E and block_m). method: 'torch' (torch ops),
    'kernel' (one Triton launch, `routing_plan_kernel`) or 'auto' (the kernel on a GPU when the routing is small
    enough, `ROUTING_KERNEL_MAX_CELLS`)."""
    if top_k_index.dim() != 2 or top_k_weights.shape != top_k_index.shape:
        raise InputError(f"moe routing: top_k_index and top_k_weights must both be [tokens, k], got "
                         f"{tuple(top_k_index.shape)} and {tuple(top_k_weights.shape)}")
    if method not in ("auto", "torch", "kernel"):
        raise InputError(f"plan_routing: method must be 'auto', 'torch' or 'kernel', got {method!r}")
    fits = triton.next_power_of_2(max(1, top_k_index.numel())) * triton.next_power_of_2(num_experts) \
        <= ROUTING_KERNEL_MAX_CELLS
    if method == "kernel" and not fits:
        raise InputError(f"plan_routing: {top_k_index.numel()} pairs over {num_experts} experts exceed the routing "
                         f"kernel's table ({ROUTING_KERNEL_MAX_CELLS} cells); use method='torch'")
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
    block = max(16, triton.next_power_of_2(max(1, pairs)))
    eb = max(16, triton.next_power_of_2(num_experts))
    tb = max(16, triton.next_power_of_2(n_tiles))
    _PLAN.launch(("plan", pairs, k, num_experts, block_m, idx.dtype, wts.dtype), (1,), device,
                 (idx, wts, plan.sorted_token, plan.sorted_weight, plan.inverse, plan.expert_end, plan.tile_expert,
                  plan.tile_row, pairs, n_tiles),
                 dict(TOP_K=k, E=num_experts, BLOCK=block, EB=eb, TB=tb, BLOCK_M=block_m,
                      num_warps=8 if block * eb > 8192 else 4))
    return plan


def unpermute(y: torch.Tensor, plan: RoutingPlan, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """[T*k, H] rows in expert order -> [T, H]: each token's k (already weighted) expert outputs summed in fp32."""
    return y[plan.inverse].view(plan.num_tokens, plan.top_k, -1).float().sum(1).to(dtype)


# ---------------------------------------------------------------------------------------------------- kernel

@triton.jit
def _a_tile(a_ptr, a_rows, row_ok, stride_a, k0, K_A, BLOCK_K: tl.constexpr):
    """A[a_rows, k0:k0+BLOCK_K], zeros past the real width K_A (the weights' K is padded to BLOCK_K)."""
    rk = k0 + tl.arange(0, BLOCK_K)
    return tl.load(a_ptr + a_rows[:, None].to(tl.int64) * stride_a + rk[None, :],
                   mask=row_ok[:, None] & (rk[None, :] < K_A), other=0.0)


@triton.jit
def _w_dot(acc, a_q, a_s, a, w_data, w_scales, w_rows, k0, K, FMT: tl.constexpr, PATH_SCALED: tl.constexpr,
           BLOCK_K: tl.constexpr):
    """acc += A_tile @ W[w_rows, k0:k0+BLOCK_K]^T (W in its stored format)."""
    VEC: tl.constexpr = 16 if FMT == "nvfp4" else 32
    rkh = k0 // 2 + tl.arange(0, BLOCK_K // 2)
    rkb = k0 // VEC + tl.arange(0, BLOCK_K // VEC)
    wq = tl.load(w_data + w_rows[:, None].to(tl.int64) * (K // 2) + rkh[None, :])
    ws = tl.load(w_scales + w_rows[:, None].to(tl.int64) * (K // VEC) + rkb[None, :])
    if PATH_SCALED:
        if FMT == "nvfp4":
            acc = tl.dot_scaled(a_q, a_s, "e2m1", wq.T, ws, "e2m1", acc)
        else:
            acc = tl.dot_scaled(a_q, a_s, "e4m3", wq.T, ws, "e2m1", acc)
    else:
        if FMT == "nvfp4":
            wb = dequant_nvfp4_bf16(wq, ws)
        else:
            wb = dequantize_mxfp4_tile(wq, ws).to(tl.bfloat16)
        acc = tl.dot(a, wb.T, acc)
    return acc


@triton.jit
def _quantize_a(a, s_enc, FMT: tl.constexpr, PATH_SCALED: tl.constexpr):
    """A tile quantized to the format its dot_scaled partner takes (nothing on the dequant path)."""
    if PATH_SCALED:
        if FMT == "nvfp4":
            a_q, a_s = quantize_nvfp4_tile(a, s_enc)
        else:
            a_q, a_s = quantize_mxfp8_tile(a)
    else:
        a_q, a_s = a, a
    return a_q, a_s


@triton.jit
def _activation(g, u, ACT: tl.constexpr, alpha, limit):
    if ACT == "silu":
        h = g / (1.0 + tl.exp(-g)) * u
    else:
        g = tl.minimum(g, limit)
        u = tl.minimum(tl.maximum(u, -limit), limit)
        h = g / (1.0 + tl.exp(-alpha * g)) * (u + 1.0)
    return h


@triton.jit
def moe_gemm_kernel(a_ptr, stride_a, sorted_token, sorted_weight, expert_end, tile_expert, tile_row,
                    w_data, w_scales, w_global, bias_ptr, s_enc_ptr, out_ptr, N, K, K_A, act_alpha, act_limit,
                    FMT: tl.constexpr, PATH_SCALED: tl.constexpr, GATED: tl.constexpr, HAS_BIAS: tl.constexpr,
                    ACT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One (tile, N block) of a grouped expert GEMM. GATED: gate/up, A = tokens (gathered through sorted_token),
    weight [E, 2N, K], out = bf16 h [rows, N]. Otherwise down: A = rows of h, weight [E, N, K],
    out = fp32 [rows, N] times the row's routing weight. K is the weights' padded width, K_A <= K the A width."""
    tile = tl.program_id(0)
    e = tl.load(tile_expert + tile)
    row0 = tl.load(tile_row + tile)
    row_end = tl.load(expert_end + e)
    if row0 < row_end:
        rows = row0 + tl.arange(0, BLOCK_M)
        row_ok = rows < row_end
        if GATED:
            a_rows = tl.load(sorted_token + rows, mask=row_ok, other=0)
        else:
            a_rows = rows
        n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        # Gate/up: one [BM, 2 BN] accumulator over gate rows n and up rows N + n (one MMA of twice the width,
        # and one TMEM accumulator: Triton 3.6's warp specialization asserts on two).
        W_COLS: tl.constexpr = 2 * BLOCK_N if GATED else BLOCK_N
        c = tl.arange(0, W_COLS)
        if GATED:
            w_rows = tl.program_id(1) * BLOCK_N + c % BLOCK_N + (c // BLOCK_N) * N
        else:
            w_rows = tl.program_id(1) * BLOCK_N + c
        w_n_total = 2 * N if GATED else N
        VEC: tl.constexpr = 16 if FMT == "nvfp4" else 32
        w_d = w_data + e.to(tl.int64) * w_n_total * (K // 2)
        w_s = w_scales + e.to(tl.int64) * w_n_total * (K // VEC)
        s_enc = 1.0
        if PATH_SCALED:
            if FMT == "nvfp4":
                s_enc = tl.load(s_enc_ptr)
        acc = tl.zeros((BLOCK_M, W_COLS), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            a = _a_tile(a_ptr, a_rows, row_ok, stride_a, k0, K_A, BLOCK_K)
            a_q, a_s = _quantize_a(a, s_enc, FMT, PATH_SCALED)
            acc = _w_dot(acc, a_q, a_s, a, w_d, w_s, w_rows, k0, K, FMT, PATH_SCALED, BLOCK_K)
        x_dec = 1.0
        if PATH_SCALED:
            if FMT == "nvfp4":
                x_dec = tl.math.div_rn(1.0, s_enc)
        if GATED:
            g, u = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N)), (0, 2, 1)))
            g = g * (tl.load(w_global + e * 2) * x_dec)
            u = u * (tl.load(w_global + e * 2 + 1) * x_dec)
            if HAS_BIAS:
                g += tl.load(bias_ptr + e * (2 * N) + n)[None, :]
                u += tl.load(bias_ptr + e * (2 * N) + N + n)[None, :]
            h = _activation(g, u, ACT, act_alpha, act_limit)
            tl.store(out_ptr + rows[:, None].to(tl.int64) * N + n[None, :], h.to(tl.bfloat16), mask=row_ok[:, None])
        else:
            y = acc * (tl.load(w_global + e) * x_dec)
            if HAS_BIAS:
                y += tl.load(bias_ptr + e * N + n)[None, :]
            y = y * tl.load(sorted_weight + rows, mask=row_ok, other=0.0)[:, None]
            tl.store(out_ptr + rows[:, None].to(tl.int64) * N + n[None, :], y, mask=row_ok[:, None])


_GEMM = CachedLauncher(moe_gemm_kernel)


# ------------------------------------------------------------------------------------------------ host side

def default_path(device: torch.device) -> str:
    """'block_scaled' where the device has tcgen05 block-scaled MMAs (sm_100a / sm_103a), else 'dequant'."""
    return "block_scaled" if tcgen05_block_scaled(device) else "dequant"


def pick_block_m(num_pairs: int, num_experts: int, path: str) -> int:
    """Rows per tile: Triton 3.6 emits the block-scaled tcgen05 MMA only for 128-row tiles (at 64 it upcasts the
    operands to bf16 and runs kind::f16), so the block-scaled path always takes 128; the bf16 mma path goes down
    to 16 for decode, where an expert holds a handful of rows and a 128-row tile would be mostly padding."""
    per_expert = num_pairs / max(1, num_experts)
    if path == "block_scaled":
        return 128
    return 16 if per_expert <= 16 else (32 if per_expert <= 32 else 64)


def _block_n(n: int, block_m: int, n_tiles: int, device: torch.device, path: str) -> int:
    """Output columns per program. Decode's down projection has few tiles and a small N (the hidden size), so
    BLOCK_N 64 would leave one program per SM streaming a long K with a handful of warps: halve it on the dequant
    path when the grid would hold fewer than two programs per SM."""
    if n % 128 == 0 and block_m >= 64:
        return 128
    if path == "dequant" and device.type == "cuda":
        from ._device import sm_count  # CUDA-only fact; CPU (emulated) launches keep 64
        if n_tiles * (n // 64) < 2 * sm_count(device):
            return 32
    return 64


_UNUSED_SCALE: dict[torch.device, torch.Tensor] = {}


def _encode_scale(a: torch.Tensor, w: MoEWeights, path: str) -> torch.Tensor:
    """The activations' NVFP4 encode scale (fp32 [1], from amax(a) on the device); the other paths never read
    it, so they get one cached tensor per device instead of a fill kernel per call."""
    if path == "block_scaled" and w.fmt == "nvfp4":
        from ..formats import nvfp4_global_encode_scale  # the formats package's recipe, kept in one home
        return nvfp4_global_encode_scale(a).reshape(1)
    if a.device not in _UNUSED_SCALE:
        _UNUSED_SCALE[a.device] = torch.ones(1, dtype=torch.float32, device=a.device)
    return _UNUSED_SCALE[a.device]


def _launch(a: torch.Tensor, plan: RoutingPlan, w: MoEWeights, gated: bool, path: str) -> torch.Tensor:
    n = w.intermediate if gated else w.hidden
    k_a = a.shape[1]
    data, scales, glob, bias = ((w.gate_up_data, w.gate_up_scales, w.gate_up_global, w.gate_up_bias) if gated
                                else (w.down_data, w.down_scales, w.down_global, w.down_bias))
    rows = plan.sorted_token.numel()
    out = torch.empty(rows, n, dtype=torch.bfloat16 if gated else torch.float32, device=a.device)
    s_enc = _encode_scale(a, w, path)
    block_m = plan.block_m
    block_n = _block_n(n, block_m, plan.tile_expert.numel(), a.device, path)
    k = 2 * data.shape[-1]
    block_k = 128
    grid = (plan.tile_expert.numel(), n // block_n)
    scale_arg = scales if w.fmt == "nvfp4" else scales.view(torch.uint8)
    bias_arg = bias if bias is not None else glob
    key = ("moe", w.fmt, path, gated, bias is not None, w.activation, n, k, k_a, a.stride(0), block_m, block_n)
    _GEMM.launch(key, grid, a.device,
                 (a, a.stride(0), plan.sorted_token, plan.sorted_weight, plan.expert_end, plan.tile_expert,
                  plan.tile_row, data, scale_arg, glob, bias_arg, s_enc, out, n, k, k_a, float(w.swiglu_alpha),
                  float(w.swiglu_limit)),
                 dict(FMT=w.fmt, PATH_SCALED=path == "block_scaled", GATED=gated, HAS_BIAS=bias is not None,
                      ACT=w.activation, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                      num_warps=4 if block_m <= 32 else 8))
    return out


def _check(x: torch.Tensor, w: MoEWeights, path: str) -> None:
    if w.fmt not in _FMT_VEC:
        raise InputError(f"moe_experts: weight format must be 'nvfp4' or 'mxfp4', got {w.fmt!r}")
    if path not in PATHS:
        raise InputError(f"moe_experts: path must be one of {PATHS} or 'auto', got {path!r}")
    if w.activation not in ACTIVATIONS:
        raise InputError(f"moe_experts: activation must be one of {ACTIVATIONS}, got {w.activation!r}")
    if x.dim() != 2 or x.dtype != torch.bfloat16 or x.shape[1] != w.hidden:
        raise InputError(f"moe_experts: x must be bf16 [tokens, {w.hidden}], got {x.dtype} {tuple(x.shape)}; "
                         f"flatten the batch and convert with .to(torch.bfloat16)")
    for what, size in (("hidden", w.hidden), ("intermediate", w.intermediate)):
        if size % N_MULTIPLE:
            raise InputError(f"moe_experts: the {what} size {size} must be a multiple of {N_MULTIPLE} (the "
                             f"kernel's smallest N block); pad the expert weights with zero rows")
    for what, data, k in (("gate_up", w.gate_up_data, w.hidden), ("down", w.down_data, w.intermediate)):
        if 2 * data.shape[-1] % K_TILE or not k <= 2 * data.shape[-1] < k + K_TILE:
            raise InputError(f"moe_experts: {what}_data holds K={2 * data.shape[-1]} inputs for {k} features; store "
                             f"K padded to a multiple of {K_TILE} (kernels.moe.pad_k)")


def moe_gate_up(x: torch.Tensor, plan: RoutingPlan, w: MoEWeights, path: str) -> torch.Tensor:
    """h [T*k, I] bf16 in expert order: act(x_row @ gate_e^T, x_row @ up_e^T) for each (token, expert) row."""
    return _launch(x.contiguous(), plan, w, True, path)


def moe_down(h: torch.Tensor, plan: RoutingPlan, w: MoEWeights, path: str) -> torch.Tensor:
    """y [T*k, H] fp32 in expert order: (h_row @ down_e^T + bias_e) * routing weight of the row."""
    return _launch(h, plan, w, False, path)


def _bf16_weights(data: torch.Tensor, scales: torch.Tensor, fmt: str) -> torch.Tensor:
    """e2m1 * block scale of expert weights [E, rows, K] as bf16 (exact: at most 6 significant bits)."""
    e, rows, kh = data.shape
    from ..formats import QuantizedTensor  # the container, for its dequantize
    if data.is_cuda and fmt == "nvfp4" and (e * rows) % 64 == 0:
        from .nvfp4_dequant import dequantize_nvfp4_bf16  # GPU kernel; CPU tensors take the torch decode below
        q = QuantizedTensor(data=data.reshape(e * rows, kh), scales=scales.reshape(e * rows, -1),
                            scale_layout="plain", global_scale=None, format="nvfp4", shape=(e * rows, 2 * kh))
        return dequantize_nvfp4_bf16(q).view(e, rows, 2 * kh)
    s = scales if fmt == "nvfp4" else scales.view(torch.float8_e8m0fnu)
    q = QuantizedTensor(data=data, scales=s, scale_layout="plain", global_scale=None, format=fmt,
                        shape=(e, rows, 2 * kh))
    return q.dequantize(torch.float32).to(torch.bfloat16)


def _activation_torch(g: torch.Tensor, u: torch.Tensor, w: MoEWeights) -> torch.Tensor:
    if w.activation == "silu":
        return torch.nn.functional.silu(g) * u
    g, u = g.clamp(max=w.swiglu_limit), u.clamp(-w.swiglu_limit, w.swiglu_limit)
    return g * torch.sigmoid(w.swiglu_alpha * g) * (u + 1)


def moe_experts_grouped_mm(x: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
                           w: MoEWeights) -> torch.Tensor:
    """The 'grouped_mm' path (see the module doc): bf16 [T, H] -> bf16 [T, H]."""
    if not hasattr(torch, "_grouped_mm"):
        raise InputError(f"moe_experts: path='grouped_mm' needs torch._grouped_mm, which torch {torch.__version__} "
                         f"lacks; use path='dequant'")
    plan = plan_routing(top_k_index, top_k_weights, w.num_experts, 1)
    rows = plan.sorted_token.numel()
    expert = torch.searchsorted(plan.expert_end, torch.arange(rows, device=x.device, dtype=torch.int32), right=True)
    i = w.intermediate
    w_gu = _bf16_weights(w.gate_up_data, w.gate_up_scales, w.fmt)[..., :w.hidden].contiguous()
    gu = torch._grouped_mm(x[plan.sorted_token.long()], w_gu.transpose(1, 2), offs=plan.expert_end)
    gu = gu.float().view(rows, 2, i) * w.gate_up_global[expert].view(rows, 2, 1)
    if w.gate_up_bias is not None:
        gu = gu + w.gate_up_bias[expert].view(rows, 2, i)
    h = _activation_torch(gu[:, 0], gu[:, 1], w).to(torch.bfloat16)
    w_dn = _bf16_weights(w.down_data, w.down_scales, w.fmt)[..., :i].contiguous()
    y = torch._grouped_mm(h, w_dn.transpose(1, 2), offs=plan.expert_end)
    y = y.float() * w.down_global[expert].unsqueeze(1)
    if w.down_bias is not None:
        y = y + w.down_bias[expert]
    return unpermute(y * plan.sorted_weight.unsqueeze(1), plan, x.dtype)


def moe_experts(x: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor, w: MoEWeights, *,
                path: str = "auto") -> torch.Tensor:
    """The expert part of an MoE layer: out[t] = sum_j top_k_weights[t, j] * expert_{top_k_index[t, j]}(x[t]),
    x bf16 [T, H] -> bf16 [T, H]. path: 'block_scaled', 'dequant', 'grouped_mm' or 'auto' (`default_path`)."""
    path = default_path(x.device) if path == "auto" else path
    _check(x, w, path)
    if path == "grouped_mm":
        return moe_experts_grouped_mm(x, top_k_index, top_k_weights, w)
    block_m = pick_block_m(top_k_index.numel(), w.num_experts, path)
    plan = plan_routing(top_k_index, top_k_weights, w.num_experts, block_m)
    h = moe_gate_up(x, plan, w, path)
    return unpermute(moe_down(h, plan, w, path), plan, x.dtype)
