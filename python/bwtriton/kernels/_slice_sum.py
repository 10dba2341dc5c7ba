"""Split K's fp32 partial tiles (the swap-AB GEMMs `gluon_mixed` and `mixed_gemm`): their per-stream scratch,
and a second kernel that sums them in slice order.

The alternative is the slice that arrives last summing them inside the launch (`gluon_mixed._reduce_slices`):
one launch, but every CTA ends with a GPU-scope release and an atomic arrival that it waits out, and the last one
then reads every partial. Measured on the H200 (graph replay, weights rotated past L2, outputs bit-equal), the
second launch is faster from 64-row activation tiles: M = 128, N = K = 4096, split 4: 15.7 against 21.1 us;
M = 64, split 4: 11.3 against 12.6 us; and a little slower with 16 rows (M = 16, N = K = 4096: 8.9 against
8.7 us). Both sum from 0.0 in slice order, so their outputs are equal bit for bit.

Partials layout (shared with the producing kernels): fp32 [SLICES, tiles, BLOCK_N * BLOCK_M], tile = pid_m *
tiles_n + pid_n, element n * BLOCK_M + m of a tile holding output (pid_m * BLOCK_M + m, pid_n * BLOCK_N + n).
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._launcher import CachedLauncher, StreamScratch, run_entry

#: Split-K scratch kept per stream up to this size (larger sets are allocated per call).
MAX_KEPT_SCRATCH_BYTES = 64 << 20
#: Elements of a tile one program sums (its weight rows times BLOCK_M).
_ELEMENTS_PER_PROGRAM = 2048


@triton.jit
def slice_sum_kernel(work_ptr, out_ptr, alpha_ptr, bias_ptr, M, stride_om, tiles_n, SLICES: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, ROWS: tl.constexpr, HAS_BIAS: tl.constexpr):
    """out[m, n] = sum_j work[j, tile, n, m] * alpha[0] (+ bias[n]) over ROWS weight rows of one tile per
    program, slices added in order from 0.0; grid (tiles, BLOCK_N / ROWS)."""
    tile = tl.program_id(0)
    rn = tl.program_id(1) * ROWS + tl.arange(0, ROWS)[:, None]
    rm = tl.arange(0, BLOCK_M)[None, :]
    local = rn * BLOCK_M + rm
    total = tl.zeros([ROWS, BLOCK_M], tl.float32)
    for j in tl.static_range(SLICES):
        total += tl.load(work_ptr + (j * tl.num_programs(0) + tile).to(tl.int64) * (BLOCK_N * BLOCK_M) + local)
    n = (tile % tiles_n) * BLOCK_N + rn
    m = (tile // tiles_n) * BLOCK_M + rm
    res = total * tl.load(alpha_ptr)
    if HAS_BIAS:
        res = res + tl.load(bias_ptr + n).to(tl.float32)
    tl.store(out_ptr + (m.to(tl.int64) * stride_om + n), res.to(out_ptr.dtype.element_ty), mask=m < M)


_LAUNCHER = CachedLauncher(slice_sum_kernel, pipeline=False)


def split_scratch(grid: tuple[int, int, int], block_n: int, block_m: int,
                  device: torch.device) -> "StreamScratch | None":
    """Per-stream (partials fp32 [slices, tiles, BLOCK_N * BLOCK_M], arrival counters int32 [tiles]) of a launch on
    `grid` = (tiles_n, tiles_m, slices); None without a split. The counters start at zero, and a launch whose last
    slice sums in the launch leaves them at zero (it resets its tile's)."""
    tiles_n, tiles_m, slices = grid
    if slices == 1:
        return None
    tiles = tiles_n * tiles_m
    elems = slices * tiles * block_n * block_m
    return StreamScratch(lambda: (torch.empty(elems, dtype=torch.float32, device=device),
                                  torch.zeros(tiles, dtype=torch.int32, device=device)),
                         device, 4 * elems + 4 * tiles, max_bytes=MAX_KEPT_SCRATCH_BYTES)


class SliceSum:
    """The second launch of one split config's call signature, replayable: made by launching it once."""

    def __init__(self, work: torch.Tensor, out: torch.Tensor, alpha: torch.Tensor, bias: "torch.Tensor | None",
                 grid: tuple[int, int, int], block_n: int, block_m: int):
        tiles_n, tiles_m, slices = grid
        rows = math.gcd(block_n, _ELEMENTS_PER_PROGRAM // block_m)  # a power of two that divides BLOCK_N
        self.tiles_n, self.device = tiles_n, out.device
        self.grid = (tiles_n * tiles_m, block_n // rows, 1)
        args = self._args(work, out, alpha, bias)
        kwargs = {"SLICES": slices, "BLOCK_N": block_n, "BLOCK_M": block_m, "ROWS": rows,
                  "HAS_BIAS": bias is not None, "num_warps": 4}
        key = ("slice_sum", out.shape[0], out.stride(0), tiles_n, out.dtype, args[3].dtype,
               tuple(sorted(kwargs.items())))
        self.entry = _LAUNCHER.launch(key, self.grid, self.device, args, kwargs)

    def _args(self, work: torch.Tensor, out: torch.Tensor, alpha: torch.Tensor,
              bias: "torch.Tensor | None") -> tuple:
        return (work, out, alpha, out if bias is None else bias, out.shape[0], out.stride(0), self.tiles_n)

    def run(self, work: torch.Tensor, out: torch.Tensor, alpha: torch.Tensor, bias: "torch.Tensor | None") -> None:
        """out from `work` for new tensors of the same signature."""
        run_entry(self.entry, self.grid, self.device, self._args(work, out, alpha, bias))
