"""`grouped_matmul`: a ragged grouped GEMM (MoE experts: group g multiplies its own M_g rows by its own B_g),
scheduled by Cluster Launch Control on sm_100a/sm_103a and statically elsewhere (`bwtriton.language.clc`).

A holds every group's rows stacked ([sum M_g, K]), B one [K, N] matrix per group ([G, K, N]), C is
[sum M_g, N]. Tiles are numbered group by group (`tile_offsets[g]` = first tile of group g), so a big expert
owns many consecutive tiles and a small one few: with the static schedule program p always takes tiles p,
p + P, ..., whatever they cost; with CLC every tile is a launched program and the free SMs steal the ones that
have not started, so the ragged tail spreads over whichever SMs finish first.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
import triton
import triton.language as tl

from bwtriton.errors import InputError
from bwtriton.kernels._device import device_info
from bwtriton.kernels.clc_matmul import _gemm_tile
from bwtriton.language import clc
from bwtriton.targets import target_for_capability

DEFAULT_BLOCKS = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64}


@triton.jit
def grouped_matmul_kernel(a_ptr, b_ptr, c_ptr, row_offsets, tile_offsets, num_groups, N, K,
                          stride_am, stride_bg, stride_bk, stride_cm,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          USE_CLC: tl.constexpr, NUM_CTAS: tl.constexpr):
    """C[rows of g] = A[rows of g] @ B[g] for every group g; row_offsets / tile_offsets: int32 [G + 1]."""
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = tl.load(tile_offsets + num_groups)
    tile = tl.program_id(0)
    while tile < num_tiles:
        g = 0
        while tile >= tl.load(tile_offsets + g + 1):  # groups are few: a scan beats a search
            g += 1
        local = tile - tl.load(tile_offsets + g)
        row0 = tl.load(row_offsets + g)
        rows = tl.load(row_offsets + g + 1) - row0
        _gemm_tile(a_ptr + row0.to(tl.int64) * stride_am, b_ptr + g.to(tl.int64) * stride_bg,
                   c_ptr + row0.to(tl.int64) * stride_cm, rows, N, K, stride_am, stride_bk, stride_cm,
                   local // num_pid_n, local % num_pid_n, BLOCK_M, BLOCK_N, BLOCK_K)
        tile = clc.next_tile(tile, num_tiles, USE_CLC, NUM_CTAS)


def signature(dtype: str = "bf16") -> dict[str, str]:
    """The kernel's argument types for `bwtriton.compile` (dtype: 'bf16' or 'fp16')."""
    p = f"*{dtype}"
    return {"a_ptr": p, "b_ptr": p, "c_ptr": p, "row_offsets": "*i32", "tile_offsets": "*i32",
            "num_groups": "i32", "N": "i32", "K": "i32", "stride_am": "i32", "stride_bg": "i32",
            "stride_bk": "i32", "stride_cm": "i32"}


def constexprs(target: str, num_ctas: int = 1, **blocks: int) -> dict[str, Any]:
    """Constexprs for `target`: USE_CLC from the target, tile sizes from DEFAULT_BLOCKS overridden by `blocks`."""
    return {**DEFAULT_BLOCKS, **blocks, "USE_CLC": clc.supported(target), "NUM_CTAS": num_ctas}


def group_offsets(group_rows: Sequence[int], N: int, block_m: int = DEFAULT_BLOCKS["BLOCK_M"],
                  block_n: int = DEFAULT_BLOCKS["BLOCK_N"]) -> tuple[torch.Tensor, torch.Tensor]:
    """(row_offsets, tile_offsets) int32 tensors of G + 1 entries for groups of `group_rows` rows each."""
    if not group_rows or any(int(m) < 0 for m in group_rows):
        raise InputError(f"group_rows must be a non-empty list of row counts >= 0, got {list(group_rows)}")
    rows, tiles = [0], [0]
    for m in group_rows:
        rows.append(rows[-1] + int(m))
        tiles.append(tiles[-1] + triton.cdiv(int(m), block_m) * triton.cdiv(N, block_n))
    return torch.tensor(rows, dtype=torch.int32), torch.tensor(tiles, dtype=torch.int32)


def reference(a: torch.Tensor, b: torch.Tensor, group_rows: Sequence[int]) -> torch.Tensor:
    """float64 grouped product, for tests."""
    outs, r = [], 0
    for g, m in enumerate(group_rows):
        outs.append(a[r:r + m].double() @ b[g].double())
        r += m
    return torch.cat(outs)


def grouped_matmul(a: torch.Tensor, b: torch.Tensor, group_rows: Sequence[int], *,
                   num_sms: Optional[int] = None) -> torch.Tensor:
    """Ragged grouped GEMM on a CUDA GPU: rows group_rows[g] of `a` times b[g]; CLC on sm_100a/sm_103a."""
    if a.ndim != 2 or b.ndim != 3 or a.shape[1] != b.shape[1] or b.shape[0] != len(group_rows):
        raise InputError(f"grouped_matmul needs a [sum M_g, K], b [G, K, N] and G row counts; got a "
                         f"{tuple(a.shape)}, b {tuple(b.shape)}, {len(group_rows)} groups")
    if sum(group_rows) != a.shape[0]:
        raise InputError(f"group_rows sum to {sum(group_rows)} but a has {a.shape[0]} rows")
    if not a.is_cuda or not b.is_cuda or a.dtype != b.dtype or a.dtype not in (torch.float16, torch.bfloat16):
        raise InputError("grouped_matmul needs CUDA fp16/bf16 tensors of one dtype (use bwtriton.emu to run "
                         "the sm_100a code on CPU)")
    cap, sms = device_info(a.device)
    a, b = a.contiguous(), b.contiguous()
    N, K = b.shape[2], a.shape[1]
    rows, tiles = (t.to(a.device) for t in group_offsets(group_rows, N))
    c = torch.empty(a.shape[0], N, dtype=a.dtype, device=a.device)
    grid, use_clc = clc.launch_grid(int(tiles[-1]) or 1, target_for_capability(cap), num_sms or sms)
    grouped_matmul_kernel[(grid,)](a, b, c, rows, tiles, len(group_rows), N, K, a.stride(0), b.stride(0),
                                   b.stride(1), c.stride(0), **DEFAULT_BLOCKS, USE_CLC=use_clc, NUM_CTAS=1,
                                   num_warps=4)
    return c


#: `bwtriton compile grouped_matmul.py:grouped_matmul_kernel` defaults (CLC on; pass --constexpr USE_CLC=false
#: for targets without it).
BWTRITON_SPECS = {"grouped_matmul_kernel": {"signature": signature("bf16"), "constexprs": constexprs("sm_100a"),
                                            "num_warps": 4}}
