"""The swizzled 128x4 scale layout (reference §6d): closed form, cuBLAS/torch form, Triton's 5-D indexing."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from bwtriton.errors import InputError
from bwtriton.formats import blocked_shape, from_blocked_scales, to_blocked_scales


def _offset(r, kb, n_kt):
    """Reference §6d closed form."""
    return (r // 128) * (n_kt * 512) + (kb // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + kb % 4


def _ids(rows, cols):
    """Distinct values so every entry's destination can be traced (int32 to avoid uint8 wrap-around)."""
    return torch.arange(1, rows * cols + 1, dtype=torch.int32).reshape(rows, cols)


@pytest.mark.parametrize("rows,cols", [(256, 12), (130, 5), (1, 1), (128, 4)])
def test_matches_closed_form(rows, cols):
    plain = _ids(rows, cols)
    flat = to_blocked_scales(plain).flatten()
    n_kt = -(-cols // 4)
    assert flat.numel() == -(-rows // 128) * 128 * n_kt * 4
    for r in range(rows):
        for kb in range(cols):
            assert flat[_offset(r, kb, n_kt)] == plain[r, kb]
    assert int((flat == 0).sum()) == flat.numel() - rows * cols  # padding is zero


def test_matches_cublas_to_blocked_form():
    """The torch/GPUMODE `to_blocked` recipe quoted in §6d."""
    rows, cols = 384, 20
    plain = _ids(rows, cols)
    blocks = plain.view(rows // 128, 128, cols // 4, 4).permute(0, 2, 1, 3)
    expected = blocks.reshape(-1, 4, 32, 4).transpose(1, 2).reshape(-1, 32, 16).flatten()
    assert torch.equal(to_blocked_scales(plain).flatten(), expected)


def test_matches_triton_5d_scale_indexing():
    """Triton's block-scaled tutorial loads scales as (M//128, K//VEC//4, 32, 4, 4) and un-swizzles with
    `.reshape(rep_m, rep_k, 32, 4, 4).trans(0, 3, 2, 1, 4).reshape(BLOCK_M, BLOCK_K // VEC)`; TE's
    `_recover_swizzled_scales` uses the same permute. Applying it to our layout must give back the plain scales."""
    rows, cols = 256, 16
    plain = _ids(rows, cols)
    blocked = to_blocked_scales(plain)
    assert blocked.shape == (rows // 128, cols // 4, 32, 4, 4)
    assert torch.equal(blocked.permute(0, 3, 2, 1, 4).reshape(rows, cols), plain)
    # A tile [128*i : 128*(i+1)] x [4*j : 4*(j+1)] is exactly one 512-byte block: what one TMA box / tcgen05.cp reads.
    assert torch.equal(blocked[1, 2].permute(1, 0, 2).reshape(128, 4), plain[128:256, 8:12])


def test_roundtrip_keeps_fp8_dtypes():
    for dt in (torch.float8_e4m3fn, torch.float8_e8m0fnu):
        plain = torch.randint(0, 120, (200, 7), dtype=torch.uint8).view(dt)
        blocked = to_blocked_scales(plain)
        assert blocked.dtype == dt and blocked.shape == blocked_shape(200, 7)
        back = from_blocked_scales(blocked, 200, 7)
        assert back.dtype == dt and torch.equal(back.view(torch.uint8), plain.view(torch.uint8))
        assert torch.equal(from_blocked_scales(blocked.flatten(), 200, 7).view(torch.uint8), plain.view(torch.uint8))


def test_batched_pads_each_matrix():
    plain = torch.stack([_ids(100, 3), -_ids(100, 3)])
    blocked = to_blocked_scales(plain)
    assert blocked.shape == (2, 1, 1, 32, 4, 4)
    assert torch.equal(blocked[1], to_blocked_scales(-_ids(100, 3)))
    assert torch.equal(from_blocked_scales(blocked, 100, 3), plain)


def test_shape_mismatch_errors():
    with pytest.raises(InputError, match="do not match plain"):
        from_blocked_scales(torch.zeros(1, 1, 32, 4, 4), 200, 4)
    with pytest.raises(InputError, match="rows, cols"):
        to_blocked_scales(torch.zeros(5))


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 300), cols=st.integers(1, 20), batch=st.integers(0, 2))
def test_property_roundtrip(rows, cols, batch):
    shape = (batch + 1, rows, cols) if batch else (rows, cols)
    plain = torch.randint(1, 255, shape, dtype=torch.uint8)
    blocked = to_blocked_scales(plain)
    assert blocked.shape[-5:] == blocked_shape(rows, cols) and blocked.is_contiguous()
    assert torch.equal(from_blocked_scales(blocked, rows, cols), plain)
    assert int(blocked.count_nonzero()) == plain.numel()
