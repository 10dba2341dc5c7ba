"""The swizzled "128x4" scale-factor layout of cuBLASLt / CUTLASS `Sm1xxBlockScaledConfig` / tcgen05 (ref. §6d).

Plain scales are `[rows, n_kb]` (n_kb = K / vec, vec = 16 for NVFP4, 32 for MX). The blocked layout pads rows to a
multiple of 128 and scale columns to a multiple of 4, then stores each 128-row x 4-column tile as one 512-byte
block: byte `(r % 32) * 16 + ((r % 128) // 32) * 4 + kb % 4`. Tiles run K-major (all K tiles of rows 0..127,
then rows 128..255 ...). So a block is 32 rows of 16 bytes: exactly what `tcgen05.cp.32x128b.warpx4` copies into
TMEM (smem row -> TMEM lane, 4-byte word -> TMEM column, byte -> scale sub-column SF_ID).

`to_blocked_scales` returns the tensor in the 5-D shape `(rows_p//128, cols_p//4, 32, 4, 4)` that Triton's
block-scaled matmul tutorial loads and un-swizzles in-kernel with `.reshape(...).trans(0, 3, 2, 1, 4)`;
`.flatten()` of it is the byte stream `torch._scaled_mm`/cuBLASLt expect. Leading batch dims are kept in front,
each matrix padded separately (CUTLASS's L mode).
"""
from __future__ import annotations

import torch

from ..errors import InputError

ROW_TILE = 128
COL_TILE = 4


def _ceil_to(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _tile_permutation(n_batch: int) -> list[int]:
    """Axis order taking the tiles [.., R, a, b, C, k] to [.., R, C, b, a, k] (swaps the a and C axes).

    Row r = 128*R + 32*a + b and column kb = 4*C + k land at byte R*(n_C*512) + C*512 + b*16 + a*4 + k (ref. §6d
    closed form). The permutation is its own inverse, and is the one Triton's tutorial applies in-kernel
    (`trans(0, 3, 2, 1, 4)`); leading batch dims stay in front."""
    return list(range(n_batch)) + [n_batch + 0, n_batch + 3, n_batch + 2, n_batch + 1, n_batch + 4]


def blocked_shape(rows: int, cols: int) -> tuple[int, int, int, int, int]:
    """5-D shape of the blocked layout for plain scales [rows, cols]."""
    return (_ceil_to(rows, ROW_TILE) // ROW_TILE, _ceil_to(cols, COL_TILE) // COL_TILE, 32, 4, 4)


def to_blocked_scales(scales: torch.Tensor) -> torch.Tensor:
    """Plain scales [..., rows, cols] -> blocked [..., rows_p//128, cols_p//4, 32, 4, 4] (contiguous).

    Padding entries are zero bytes (scale 0 for UE4M3, 2^-127 for UE8M0), which multiplies only padding data."""
    if scales.dim() < 2:
        raise InputError(f"to_blocked_scales needs scales of shape [..., rows, cols], got {tuple(scales.shape)}")
    *batch, rows, cols = scales.shape
    rows_p, cols_p = _ceil_to(rows, ROW_TILE), _ceil_to(cols, COL_TILE)
    # Pad through a uint8 view: torch has no pad kernel for the fp8 scale dtypes.
    raw = scales.view(torch.uint8) if scales.element_size() == 1 else scales
    padded = raw.new_zeros(*batch, rows_p, cols_p)
    padded[..., :rows, :cols] = raw
    tiles = padded.reshape(*batch, rows_p // ROW_TILE, 4, 32, cols_p // COL_TILE, 4)
    blocked = tiles.permute(_tile_permutation(len(batch))).contiguous()
    return blocked.view(scales.dtype) if raw is not scales else blocked


def from_blocked_scales(blocked: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Inverse of `to_blocked_scales`: blocked (5-D with optional batch dims, or flat 1-D) -> plain [..., rows, cols].

    `rows`/`cols` are the unpadded plain sizes."""
    shape5 = blocked_shape(rows, cols)
    per_matrix = 128 * _ceil_to(cols, COL_TILE) * (shape5[0])
    if blocked.dim() >= 5 and tuple(blocked.shape[-5:]) == shape5:
        batch = list(blocked.shape[:-5])
    elif blocked.dim() == 1 and blocked.numel() == per_matrix:
        batch = []
    else:
        raise InputError(f"blocked scales of shape {tuple(blocked.shape)} do not match plain [{rows}, {cols}]: "
                         f"expected [..., {', '.join(map(str, shape5))}] or a flat tensor of {per_matrix} elements")
    raw = blocked.view(torch.uint8) if blocked.element_size() == 1 else blocked
    raw = raw.reshape(*batch, *shape5)
    plain = raw.permute(_tile_permutation(len(batch))).reshape(*batch, shape5[0] * ROW_TILE, shape5[1] * COL_TILE)
    plain = plain[..., :rows, :cols].contiguous()
    return plain.view(blocked.dtype) if blocked.element_size() == 1 else plain
