"""Emulated twins of tests/kernels/test_kernels_matmul.py's GPU numerics: `bwtriton.kernels.matmul` (persistent TMA GEMM,
warp-specialized `tcgen05.mma` on sm_100a) called with CPU tensors on the emulated B200, checked with the GPU
tests' own format bound (`_assert_close`: output rounding + 2K fp32 accumulation roundoffs, float64 reference).

Configs are pinned (`config=`): autotuning would time every candidate on the emulator. Shapes are small (the
emulator runs ~10^5 warp-instructions/s) but keep the paths the GPU tests take: row- and column-major B, tails in
M/N/K (TMA zero-fill and clipped stores), fp8 with per-row/per-column scales, more tiles than one CTA.
The whole file runs in ~10-15 s on 2 cores (warm Triton cache).
"""
from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from bwtriton.kernels._configs import GemmConfig  # noqa: E402
from test_kernels_matmul import _assert_close, _fp8_tolerances  # noqa: E402

kmatmul = importlib.import_module("bwtriton.kernels.matmul")  # the module (bwtriton.kernels.matmul is also a function)
pytestmark = [pytest.mark.emulated, pytest.mark.usefixtures("emulated_b200_module")]
BF16, FP16, FP8 = torch.bfloat16, torch.float16, torch.float8_e4m3fn

#: the sm_100 candidates' shape (warp-specialized, 2-way epilogue split), at 128x128 tiles to keep emulation short
WS_128 = GemmConfig(block_m=128, block_n=128, block_k=64, num_stages=3, num_warps=4, group_m=8, epilogue_split=2,
                    warp_specialize=True, flatten=True)
#: the non-warp-specialized candidate (8 warps, one epilogue)
PLAIN_128 = GemmConfig(block_m=128, block_n=128, block_k=64, num_stages=3, num_warps=8, group_m=8,
                       epilogue_split=1, warp_specialize=False, flatten=False)



def _operands(m, n, k, dtype, col_major, seed):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(n, k, generator=gen).to(dtype).t() if col_major else torch.randn(k, n, generator=gen).to(dtype)
    return a, b


@pytest.mark.parametrize("dtype", [BF16, FP16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("col_major", [False, True], ids=["Brow", "Bcol"])
def test_emulated_half_matmul(dtype, col_major):
    a, b = _operands(128, 256, 192, dtype, col_major, seed=1)  # 2 tiles along N, 3 K steps
    c = kmatmul.matmul(a, b, config=WS_128)
    assert c.device.type == "cpu" and c.dtype == dtype and c.shape == (128, 256)
    _assert_close(c, a, b)


def test_emulated_half_matmul_tails_and_plain_config():
    a, b = _operands(136, 72, 200, BF16, False, seed=2)  # M, N, K all off the 128x128x64 tile
    c = kmatmul.matmul(a, b, config=PLAIN_128)
    _assert_close(c, a, b)


@pytest.mark.parametrize("scales", ["tensor", "vector"])
def test_emulated_fp8_matmul_with_scales(scales):
    gen = torch.Generator().manual_seed(3)
    m, n, k = 128, 128, 256
    a = (torch.randn(m, k, generator=gen) * 4).to(FP8)
    b = (torch.randn(n, k, generator=gen) * 4).to(FP8).t()  # column-major: the fast fp8 layout
    if scales == "tensor":
        sa, sb = torch.tensor(0.5), torch.tensor(0.25)
        rows, cols = sa.double(), sb.double()
    else:
        sa, sb = torch.rand(m, generator=gen) + 0.5, torch.rand(n, generator=gen) + 0.5
        rows, cols = sa.double()[:, None], sb.double()[None, :]
    cfg = GemmConfig(block_m=128, block_n=128, block_k=128, num_stages=3, num_warps=4, group_m=8, epilogue_split=2,
                     warp_specialize=True, flatten=True)
    c = kmatmul.matmul(a, b, a_scale=sa, b_scale=sb, config=cfg)
    assert c.dtype == BF16
    _assert_close(c, a, b, rows, cols, **_fp8_tolerances(k))


def test_emulated_default_sm100_config_128x256():
    a, b = _operands(256, 512, 256, BF16, True, seed=4)
    cfg = kmatmul.gemm_configs(100, 2, 2)[0]  # what autotuning starts from on a B200 (128x256 tiles)
    c = kmatmul.matmul(a, b, config=cfg)
    _assert_close(c, a, b)


def test_emulated_matmul_ptx_is_tcgen05():
    """The twin exercises the Blackwell path, not a fallback: the kernel compiled for the emulated GPU is
    tcgen05 with TMA."""
    a, b = _operands(128, 128, 64, BF16, False, seed=5)
    kmatmul.matmul(a, b, config=WS_128)
    compiled = list(kmatmul._LAUNCHER._entries.values())[-1][0]
    ptx = compiled.asm["ptx"]
    assert "tcgen05.mma" in ptx and "cp.async.bulk.tensor" in ptx and ".target sm_100a" in ptx
