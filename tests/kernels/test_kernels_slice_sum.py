"""The second kernel that sums split K's fp32 partial tiles (`bwtriton.kernels._slice_sum`).

CPU: `SliceSum` end to end under TRITON_INTERPRET=1 (a subprocess: the interpreter must be on before `triton.jit`
runs), its launches going straight to the interpreted kernel, against a torch sum of the same partials in slice
order from 0.0: bit-equal, activation rows past M never written, bias and alpha applied once. The output is
fp32 (the interpreter's fp32 -> bf16 cast is not the GPU's), and the interpreter rounds alpha's product and the
bias sum separately (numpy), so the reference does too; on the GPU both epilogues are one FFMA, and
`test_kernels_gluon_mixed` holds the two slice sums to equal bf16 bits there.
"""
from __future__ import annotations

import importlib
import json

from fixtures.interpreter import interpret_module
import torch

#: (tiles_n, tiles_m, slices, BLOCK_N, BLOCK_M, M, bias): M past the last full tile (masked rows), odd slices,
#: 16-row tiles (a program covers a whole tile) and 128-row ones (several programs per tile).
CASES = ((3, 2, 3, 64, 64, 100, True), (2, 1, 4, 64, 128, 128, False), (4, 3, 5, 64, 16, 40, True))
_SENTINEL = -7.0  # in the rows past M of the output's storage: a masked store leaves it


def _reference(work: torch.Tensor, alpha: torch.Tensor, bias, grid, block_n: int, block_m: int,
               m: int) -> torch.Tensor:
    tiles_n, tiles_m, slices = grid
    parts = work.view(slices, tiles_m, tiles_n, block_n, block_m)
    total = torch.zeros(tiles_m, tiles_n, block_n, block_m)
    for j in range(slices):
        total = total + parts[j]
    out = total.permute(0, 3, 1, 2).reshape(tiles_m * block_m, tiles_n * block_n) * alpha
    if bias is not None:
        out = out + bias.float()
    return out[:m]


def run_interpreted() -> dict:
    """Under TRITON_INTERPRET=1: per case, the first mismatch found (None when bit-exact)."""
    ss = importlib.import_module("bwtriton.kernels._slice_sum")

    def launch(key, grid, device, args, kwargs):
        ss.slice_sum_kernel[tuple(grid)](*args, **kwargs)
        return kwargs

    ss._LAUNCHER.launch = launch
    ss.run_entry = lambda entry, grid, device, args: ss.slice_sum_kernel[tuple(grid)](*args, **entry)
    g = torch.Generator().manual_seed(7)
    results = {}
    for tiles_n, tiles_m, slices, bn, bm, m, has_bias in CASES:
        grid = (tiles_n, tiles_m, slices)
        n = tiles_n * bn
        alpha = torch.tensor([0.375])
        bias = torch.randn(n, generator=g).to(torch.bfloat16) if has_bias else None
        name = f"{grid} {bn}x{bm} M={m}{' bias' if has_bias else ''}"
        problems = []
        for call in ("first", "replay"):
            work = torch.randn(slices * tiles_n * tiles_m * bn * bm, generator=g) * 2.0 ** 20
            storage = torch.full((tiles_m * bm, n), _SENTINEL)
            out = storage[:m]
            if call == "first":
                plan = ss.SliceSum(work, out, alpha, bias, grid, bn, bm)
            else:
                plan.run(work, out, alpha, bias)
            want = _reference(work, alpha, bias, grid, bn, bm, m)
            if not torch.equal(out.view(torch.int32), want.view(torch.int32)):
                bad = (out != want).nonzero()[0].tolist()
                problems.append(f"{call}: out{bad} = {out[bad[0], bad[1]].item()} != {want[bad[0], bad[1]].item()}")
            if not torch.all(storage[m:] == _SENTINEL):
                problems.append(f"{call}: rows past M = {m} were written")
        results[name] = problems or None
    return results


def test_split_scratch_holds_every_slice_of_every_tile_and_zero_counters():
    ss = importlib.import_module("bwtriton.kernels._slice_sum")
    assert ss.split_scratch((3, 2, 1), 64, 16, torch.device("cpu")) is None  # no split, no scratch
    scratch = ss.split_scratch((3, 2, 4), 64, 16, torch.device("cpu"))
    work, count = scratch.get()
    assert work.dtype == torch.float32 and work.numel() == 4 * 6 * 64 * 16
    assert count.dtype == torch.int32 and torch.equal(count, torch.zeros(6, dtype=torch.int32))
    assert scratch.get()[0] is work  # kept for the stream, not made per call


def test_slice_sum_adds_the_slices_in_order_and_masks_rows_past_m():
    results = interpret_module(__file__)
    assert len(results) == len(CASES)
    assert all(v is None for v in results.values()), results


if __name__ == "__main__":
    print(json.dumps(run_interpreted()))
