"""atom / red on the emulated B200: vector forms (`atom.global.v4.f32.add`, what a split-K reduction emits),
addresses colliding within a warp and across CTAs, and the old values an atomic returns."""
from __future__ import annotations

import re

import pytest
import torch
import triton
import triton.language as tl

import bwtriton.emu as emu

pytestmark = pytest.mark.emulated


@triton.jit
def _accumulate(out_ptr, x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr + offs, tl.load(x_ptr + tl.program_id(0) * BLOCK + offs), sem="relaxed")


@triton.jit
def _colliding_max(out_ptr, x_ptr, BLOCK: tl.constexpr, BINS: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_max(out_ptr + offs % BINS, tl.load(x_ptr + offs))


@triton.jit
def _ticket(counter_ptr, tickets_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    old = tl.atomic_add(counter_ptr + tl.zeros([BLOCK], tl.int32), 1)
    tl.store(tickets_ptr + offs, old)


def test_vector_atomic_add_across_ctas_sums_every_contribution():
    x = torch.randn(4 * 512)
    out = torch.zeros(512)
    with emu.emulated_gpu("sm_100a"):
        h = _accumulate[(4,)](out, x, BLOCK=512, num_warps=4)
    # the vector form; Triton 3.9 emits `red` (no return value) where older releases emit `atom`
    assert re.search(r"\b(atom|red)\.global\.gpu\.relaxed\.add\.v4\.f32\b", h.asm["ptx"])
    # fp32 sums of 4 values: within 2 ulp-ish of the float64 sum
    torch.testing.assert_close(out.double(), x.double().view(4, 512).sum(0), rtol=1e-6, atol=1e-6)


def test_colliding_lanes_apply_one_after_the_other():
    x = torch.randint(-1000, 1000, (3 * 256,), dtype=torch.int32)
    out = torch.full((8,), -2 ** 31, dtype=torch.int32)
    with emu.emulated_gpu("sm_100a"):
        _colliding_max[(3,)](out, x, BLOCK=256, BINS=8, num_warps=4)
    assert torch.equal(out, x.view(-1, 8).max(0).values)


def test_atomics_return_each_lane_its_own_old_value():
    n = 2 * 128
    counter = torch.zeros(1, dtype=torch.int32)
    tickets = torch.full((n,), -1, dtype=torch.int32)
    with emu.emulated_gpu("sm_100a"):
        _ticket[(2,)](counter, tickets, BLOCK=128, num_warps=4)
    assert counter.item() == n
    assert torch.equal(tickets.sort().values, torch.arange(n, dtype=torch.int32))


@triton.jit
def _accumulate_f16(out_ptr, x_ptr, BLOCK: tl.constexpr, BINS: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr + offs % BINS, tl.load(x_ptr + offs), sem="relaxed")


def test_f16_atomic_add_rounds_once_per_addition():
    """`atom.add.noftz.f16` (gemlite's split-K GEMV epilogue): each addition is the exact sum rounded to f16."""
    torch.manual_seed(0)
    start, x = torch.randn(128).half(), torch.randn(128).half()
    out = start.clone()
    with emu.emulated_gpu("sm_100a"):
        h = _accumulate_f16[(1,)](out, x, BLOCK=128, BINS=128, num_warps=4)
    assert re.search(r"\b(atom|red)\.global\.gpu\.relaxed\.add\.noftz\.f16\b", h.asm["ptx"])  # red: 3.9
    assert torch.equal(out, (start.double() + x.double()).half())  # distinct addresses: one rounding each
    out = torch.zeros(4).half()
    with emu.emulated_gpu("sm_100a"):
        _accumulate_f16[(2,)](out, x, BLOCK=64, BINS=4)
    # 32 colliding f16 additions per bin, in some order; partial sums stay below 64, where half an f16 ulp is
    # at most 2^-6, so 32 roundings are within 32 * 2^-6
    torch.testing.assert_close(out.double(), x.double().view(-1, 4).sum(0), rtol=0, atol=32 * 2.0 ** -6)


def test_bf16_vector_atomic_add_rounds_once_per_addition():
    """`atom.add.noftz.v2.bf16` (gemlite's MXFP4 / NVFP4 GEMV epilogue): exact sums rounded to bf16."""
    torch.manual_seed(0)
    start, x = torch.randn(128).bfloat16(), torch.randn(128).bfloat16()
    out = start.clone()
    with emu.emulated_gpu("sm_100a"):
        h = _accumulate[(1,)](out, x, BLOCK=128, num_warps=4)
    assert "add.noftz" in h.asm["ptx"] and "bf16" in h.asm["ptx"]
    assert torch.equal(out, (start.double() + x.double()).bfloat16())  # distinct addresses: one rounding each
