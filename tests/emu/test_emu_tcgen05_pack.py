"""tcgen05.ld/st with .pack::16b / .unpack::16b: each 32-bit register holds the 16-bit halves of two adjacent
columns of ONE lane, under the shape's own thread mapping (what Triton's f16-accumulator epilogues assume)."""
from __future__ import annotations

import numpy as np
import pytest

from bwtriton.emu.isa.tcgen05 import _cells, ld_st_map


@pytest.mark.parametrize("shape,lanes,base_regs", [("32x32b", 32, 1), ("16x64b", 16, 1), ("16x128b", 16, 2),
                                                   ("16x256b", 16, 4)])
def test_packed_registers_pair_adjacent_columns_of_one_lane(shape, lanes, base_regs):
    num = 2
    lane, col, _ = _cells(0, shape, num, True, 0)
    regs = base_regs * num
    assert lane.shape == (32, 2 * regs)
    assert (lane[:, 0::2] == lane[:, 1::2]).all() and (col[:, 1::2] == col[:, 0::2] + 1).all()
    assert (col[:, 0::2] % 2 == 0).all()
    # every (lane, column) of the doubled footprint is touched exactly once
    cells = set(zip(lane.ravel().tolist(), col.ravel().tolist()))
    ulane, ucol, _ = ld_st_map(shape, num)
    assert len(cells) == lane.size == 2 * ulane.size
    assert {c for _, c in cells} == set(range(2 * (int(ucol.max()) + 1)))
    assert {ln for ln, _ in cells} == set(range(lanes))


def test_packed_32x32b_is_consecutive_register_pairs():
    lane, col, _ = _cells(0, "32x32b", 4, True, 0)
    assert (col == np.arange(8)[None, :]).all() and (lane == np.arange(32)[:, None]).all()


def test_packed_16x256b_thread_footprint():
    lane, col, _ = _cells(0, "16x256b", 1, True, 0)
    # thread 5 (t//4 = 1, t%4 = 1): unpacked columns 2, 3 of lanes 1 and 9 -> packed column pairs (4,5), (6,7)
    assert list(zip(lane[5].tolist(), col[5].tolist())) == [(1, 4), (1, 5), (1, 6), (1, 7), (9, 4), (9, 5), (9, 6),
                                                           (9, 7)]


@pytest.mark.emulated
@pytest.mark.parametrize("layout_16x256", ["0", "1"])
def test_f16_accumulator_epilogue_matches_torch(layout_16x256, monkeypatch):
    """tl.dot with an f16 accumulator: TMEM holds it unpacked (colStride 2) and the epilogue loads it with
    pack::16b; with TRITON_PREFER_TMEM_16x256_LAYOUT the load is 16x256b (85% of outputs were wrong when the
    emulator paired consecutive registers instead of adjacent columns)."""
    torch = pytest.importorskip("torch")
    import triton
    import triton.language as tl

    from bwtriton.emu.driver import emulated_gpu

    @triton.jit
    def f16_acc_dot(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                    dummy: tl.constexpr):
        rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
        b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
        tl.store(c_ptr + rm[:, None] * BN + rn[None, :], tl.dot(a, b, out_dtype=tl.float16))

    monkeypatch.setenv("TRITON_PREFER_TMEM_16x256_LAYOUT", layout_16x256)
    gen = torch.Generator().manual_seed(0)
    a = torch.randint(-3, 4, (128, 32), generator=gen).half()  # small integers: the f16 sums are exact
    b = torch.randint(-3, 4, (32, 128), generator=gen).half()
    c = torch.empty(128, 128, dtype=torch.half)
    with emulated_gpu("sm_100a"):
        k = f16_acc_dot[(1,)](a, b, c, BM=128, BN=128, BK=32, dummy=int(layout_16x256))
    ptx = k.asm["ptx"]
    assert "pack::16b" in ptx and ("16x256b" in ptx) == (layout_16x256 == "1")
    assert torch.equal(c, (a.float() @ b.float()).half())
