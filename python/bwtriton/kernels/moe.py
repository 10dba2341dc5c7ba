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
  bf16 tensor cores. Decode tiles are swapped (the weight as the MMA's register A operand, the tokens as its N
  side) and the down projection is split along K into partial-sum planes (`gemm_config`).
* 'grouped_mm' (a prefill option where torch has `torch._grouped_mm`): the whole layer's weights dequantized
  exactly to bf16 once per call (transient memory: the bf16 weight size), then torch's bf16 grouped GEMM on the
  expert-sorted rows; per-expert scales, biases, activation and routing weights applied in torch. The dequant
  costs O(weights) against the GEMM's O(T k weights), so it only pays with many rows per expert.

Every launch is checked against the target's shared memory first (`fit_shared`, `routing_kernel_fits`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl

from ..errors import InputError
from ..language.quant import quantize_mxfp8_tile, quantize_nvfp4_tile
from ..targets import B200_SM_COUNT
from ._common import _e2m1x4_to_bf16, dequant_nvfp4_bf16, tcgen05_block_scaled
from ._launcher import CachedLauncher
from .mixed_gemm import _mma_k_order
from .moe_routing import RoutingPlan, device_target, plan_routing, route_topk, unpermute

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


# ---------------------------------------------------------------------------------------------------- kernel

@triton.jit
def _a_tile(a_ptr, a_rows, row_ok, stride_a, k0, K_A, BLOCK_K: tl.constexpr):
    """A[a_rows, k0:k0+BLOCK_K], zeros past the real width K_A (the weights' K is padded to BLOCK_K)."""
    rk = k0 + tl.arange(0, BLOCK_K)
    return tl.load(a_ptr + a_rows[:, None].to(tl.int64) * stride_a + rk[None, :],
                   mask=row_ok[:, None] & (rk[None, :] < K_A), other=0.0)


@triton.jit
def dequant_mxfp4_bf16(packed, scales):
    """uint8 [R, KH] (two E2M1 codes per byte, element 2i low) and uint8 UE8M0 scales [R, 2*KH//32] -> bf16
    [R, 2*KH] equal to e2m1 * 2^(s-127) exactly for s <= 252 (above, the product overflows bf16 as it does fp32).
    The scale's bf16 bits are s << 7 (bf16 has fp32's 8-bit exponent); s = 0 is 2^-127, the subnormal 0x0040.
    The codes go through `_e2m1x4_to_bf16` (~4 instructions per weight) like NVFP4's."""
    R: tl.constexpr = packed.shape[0]
    KH: tl.constexpr = packed.shape[1]
    e = scales.to(tl.int16)
    bits = tl.where(e == 0, 0x40, e << 7).to(tl.int16)
    s = bits.to(tl.bfloat16, bitcast=True)
    s = tl.reshape(tl.broadcast_to(s[:, :, None], (R, KH // 16, 16)), (R, KH))  # one scale per byte (16 per block)
    lo, hi = _e2m1x4_to_bf16(packed, s)
    return tl.reshape(tl.join(lo, hi), (R, 2 * KH))


@triton.jit
def _w_tile(w_data, w_scales, w_rows, k0, K, FMT: tl.constexpr, BLOCK_K: tl.constexpr):
    """(codes uint8 [rows, BLOCK_K/2], block scales [rows, BLOCK_K/vec]) of W[w_rows, k0:k0+BLOCK_K]."""
    VEC: tl.constexpr = 16 if FMT == "nvfp4" else 32
    rkh = k0 // 2 + tl.arange(0, BLOCK_K // 2)
    rkb = k0 // VEC + tl.arange(0, BLOCK_K // VEC)
    wq = tl.load(w_data + w_rows[:, None].to(tl.int64) * (K // 2) + rkh[None, :])
    ws = tl.load(w_scales + w_rows[:, None].to(tl.int64) * (K // VEC) + rkb[None, :])
    return wq, ws


@triton.jit
def _w_bf16(wq, ws, FMT: tl.constexpr):
    """The weight tile dequantized exactly to bf16 (e2m1 * block scale; the per-tensor scale is the epilogue's)."""
    if FMT == "nvfp4":
        wb = dequant_nvfp4_bf16(wq, ws)
    else:
        wb = dequant_mxfp4_bf16(wq, ws)
    return wb


@triton.jit
def _w_dot(acc, a_q, a_s, a, w_data, w_scales, w_rows, k0, K, FMT: tl.constexpr, PATH_SCALED: tl.constexpr,
           SWAP: tl.constexpr, BLOCK_K: tl.constexpr):
    """acc += A_tile @ W[w_rows, k0:k0+BLOCK_K]^T (W in its stored format); SWAP: acc^T += W_tile @ A_tile^T, the
    dequantized weight as the MMA's register A operand (sm_90a: wgmma with A from registers) and the few token
    rows as its N dimension, with K reordered in both operands (`mixed_gemm._mma_k_order`: vector fragment loads,
    no product changes)."""
    wq, ws = _w_tile(w_data, w_scales, w_rows, k0, K, FMT, BLOCK_K)
    if PATH_SCALED:
        if FMT == "nvfp4":
            acc = tl.dot_scaled(a_q, a_s, "e2m1", wq.T, ws, "e2m1", acc)
        else:
            acc = tl.dot_scaled(a_q, a_s, "e4m3", wq.T, ws, "e2m1", acc)
    elif SWAP:
        acc = tl.dot(_mma_k_order(_w_bf16(wq, ws, FMT)), tl.trans(_mma_k_order(a)), acc)
    else:
        acc = tl.dot(a, _w_bf16(wq, ws, FMT).T, acc)
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
                    num_rows, split_blocks, FMT: tl.constexpr, PATH_SCALED: tl.constexpr, SWAP: tl.constexpr,
                    GATED: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One (tile, N block, K slice) of a grouped expert GEMM. GATED: gate/up, A = tokens (gathered through
    sorted_token), weight [E, 2N, K], out = bf16 h [rows, N]. Otherwise down: A = rows of h, weight [E, N, K],
    out = fp32 [S, rows, N] (S = the grid's K slices of `split_blocks` BLOCK_K steps each; gate/up has one) times
    the row's routing weight, the bias added by slice 0. K is the weights' padded width, K_A <= K the A width."""
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
        k_slice = tl.program_id(2)
        k_lo = k_slice * split_blocks * BLOCK_K
        k_hi = tl.minimum(k_lo + split_blocks * BLOCK_K, K)
        if SWAP:
            acc = tl.zeros((W_COLS, BLOCK_M), dtype=tl.float32)
        else:
            acc = tl.zeros((BLOCK_M, W_COLS), dtype=tl.float32)
        for k0 in range(k_lo, k_hi, BLOCK_K):
            a = _a_tile(a_ptr, a_rows, row_ok, stride_a, k0, K_A, BLOCK_K)
            a_q, a_s = _quantize_a(a, s_enc, FMT, PATH_SCALED)
            acc = _w_dot(acc, a_q, a_s, a, w_d, w_s, w_rows, k0, K, FMT, PATH_SCALED, SWAP, BLOCK_K)
        if SWAP:
            acc = tl.trans(acc)
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
                y += tl.load(bias_ptr + e * N + n)[None, :] * (k_slice == 0).to(tl.float32)
            y = y * tl.load(sorted_weight + rows, mask=row_ok, other=0.0)[:, None]
            out = out_ptr + k_slice.to(tl.int64) * num_rows * N
            tl.store(out + rows[:, None].to(tl.int64) * N + n[None, :], y, mask=row_ok[:, None])


_GEMM = CachedLauncher(moe_gemm_kernel)


# ------------------------------------------------------------------------------------------------ host side

def default_path(device: torch.device) -> str:
    """'block_scaled' where the device has tcgen05 block-scaled MMAs (sm_100a / sm_103a), else 'dequant'."""
    return "block_scaled" if tcgen05_block_scaled(device) else "dequant"


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        from ._device import sm_count  # CUDA-only query, as above
        return sm_count(device)
    return B200_SM_COUNT


def pick_block_m(num_pairs: int, num_experts: int, path: str) -> int:
    """Rows per tile: Triton 3.6 emits the block-scaled tcgen05 MMA only for 128-row tiles (at 64 it upcasts the
    operands to bf16 and runs kind::f16), so the block-scaled path always takes 128. The dequant path takes at
    least twice an expert's mean row count (16 .. 64), so that a ragged routing's busier experts still fit one
    tile: each extra tile of an expert streams its whole weight again, which is what decode pays for."""
    per_expert = num_pairs / max(1, num_experts)
    if path == "block_scaled":
        return 128
    return 16 if per_expert <= 8 else (32 if per_expert <= 16 else 64)


@dataclass(frozen=True)
class GemmConfig:
    """How one projection launches: tile (block_m token rows x block_n output features x block_k), pipeline depth,
    warps, `swap` (dequant path: weight as the MMA's M side, tokens as its N side) and `split_k` K slices (down
    projection only: the partial sums go to separate [S, rows, H] planes that `unpermute` adds)."""

    block_m: int
    block_n: int
    block_k: int
    num_stages: int
    num_warps: int
    swap: bool = False
    split_k: int = 1


#: Most K slices the down projection is split into at decode.
MAX_SPLIT_K = 8


def gemm_config(num_tiles: int, block_m: int, n: int, k: int, gated: bool, path: str, num_sms: int) -> GemmConfig:
    """The launch config of one projection (before `fit_shared`). Decode tiles (block_m <= 32) on the dequant
    path are swapped, 4 stages deep, and the down projection is split along K until the grid has >= 2 CTAs per
    SM (its N, the hidden size, gives few CTAs); the rest keeps 64/128-row tiles with 128-wide N blocks."""
    if path == "dequant" and block_m <= 32:
        block_n = 64 if gated or n % 128 else 128
        split = 1
        blocks = k // K_TILE
        while not gated and num_tiles * (n // block_n) * split < 2 * num_sms and 2 * split <= min(MAX_SPLIT_K,
                                                                                                   blocks):
            split *= 2
        return GemmConfig(block_m, block_n, K_TILE, 4, 4, swap=True, split_k=split)
    block_n = 128 if n % 128 == 0 and block_m >= 64 else 64
    return GemmConfig(block_m, block_n, K_TILE, 3, 4 if block_m <= 32 else 8)


def shared_bytes(cfg: GemmConfig, fmt: str, path: str, gated: bool) -> int:
    """An upper bound on the shared memory one CTA of `cfg` needs (Triton allocates the pipelined operands, the
    MMA operand staging and the epilogue's layout conversion; `tests/kernels/test_kernels_moe.py` checks the bound
    against what Triton reports for sm_90a and sm_100a): per stage the bf16 A tile, the weight codes (1/2 byte)
    and block scales (1 byte per 16 or 32); plus the MMA operand that is not read from global memory as it is
    (the dequantized bf16 weight, or on the swapped path the x^T tile; the quantized A and its scales on the
    block-scaled path); the epilogue's fp32 tile reuses the ring's space after the K loop."""
    w_cols = cfg.block_n * (2 if gated else 1)
    vec = _FMT_VEC[fmt]
    bm, bk = cfg.block_m, cfg.block_k
    ring = cfg.num_stages * (bm * bk * 2 + w_cols * bk // 2 + w_cols * bk // vec)
    if path == "block_scaled":
        staging = bm * bk + bm * bk // 16
    elif cfg.swap:
        staging = bm * bk * 2
    else:
        staging = w_cols * bk * 2
    return max(ring + staging, bm * w_cols * 4)


def fit_shared(cfg: GemmConfig, fmt: str, path: str, gated: bool, limit: int) -> GemmConfig:
    """`cfg` with as many pipeline stages (at most its own) as fit `limit` bytes of shared memory (the target's,
    `targets.max_shared_bytes`), checked before the launch; an InputError when not even one stage fits."""
    for stages in range(cfg.num_stages, 0, -1):
        fitted = dataclasses.replace(cfg, num_stages=stages)
        if shared_bytes(fitted, fmt, path, gated) <= limit:
            return fitted
    raise InputError(f"moe_experts: the {cfg.block_m}x{cfg.block_n}x{cfg.block_k} tile needs "
                     f"{shared_bytes(dataclasses.replace(cfg, num_stages=1), fmt, path, gated)} bytes of shared memory "
                     f"with one stage, over the target's {limit}; use a smaller hidden/intermediate block")


def launch_config(a: torch.Tensor, plan: RoutingPlan, w: MoEWeights, gated: bool, path: str) -> GemmConfig:
    """The config `_launch` runs for this projection on `a`'s device (its SM count and shared-memory limit)."""
    n = w.intermediate if gated else w.hidden
    k = 2 * (w.gate_up_data if gated else w.down_data).shape[-1]
    cfg = gemm_config(plan.tile_expert.numel(), plan.block_m, n, k, gated, path, _num_sms(a.device))
    return fit_shared(cfg, w.fmt, path, gated, device_target(a.device).max_shared_bytes)


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
    """h [rows, I] bf16 (gated) or the down projection's fp32 partial sums [S, rows, H]."""
    n = w.intermediate if gated else w.hidden
    k_a = a.shape[1]
    data, scales, glob, bias = ((w.gate_up_data, w.gate_up_scales, w.gate_up_global, w.gate_up_bias) if gated
                                else (w.down_data, w.down_scales, w.down_global, w.down_bias))
    rows = plan.sorted_token.numel()
    cfg = launch_config(a, plan, w, gated, path)
    k = 2 * data.shape[-1]
    split_blocks = -(-(k // cfg.block_k) // cfg.split_k)
    shape = (rows, n) if gated else (cfg.split_k, rows, n)
    out = torch.empty(shape, dtype=torch.bfloat16 if gated else torch.float32, device=a.device)
    s_enc = _encode_scale(a, w, path)
    grid = (plan.tile_expert.numel(), n // cfg.block_n, cfg.split_k)
    scale_arg = scales if w.fmt == "nvfp4" else scales.view(torch.uint8)
    bias_arg = bias if bias is not None else glob
    key = ("moe", w.fmt, path, gated, bias is not None, w.activation, n, k, k_a, a.stride(0), rows, cfg)
    _GEMM.launch(key, grid, a.device,
                 (a, a.stride(0), plan.sorted_token, plan.sorted_weight, plan.expert_end, plan.tile_expert,
                  plan.tile_row, data, scale_arg, glob, bias_arg, s_enc, out, n, k, k_a, float(w.swiglu_alpha),
                  float(w.swiglu_limit), rows, split_blocks),
                 dict(FMT=w.fmt, PATH_SCALED=path == "block_scaled", SWAP=cfg.swap, GATED=gated,
                      HAS_BIAS=bias is not None, ACT=w.activation, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                      BLOCK_K=cfg.block_k, num_warps=cfg.num_warps, num_stages=cfg.num_stages))
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
    y = _launch(h, plan, w, False, path)
    return y[0] if y.shape[0] == 1 else y.sum(0)


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
    return unpermute(_launch(h, plan, w, False, path), plan, x.dtype)
