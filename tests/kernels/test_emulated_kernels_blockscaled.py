"""Emulated twins of tests/kernels/test_kernels_blockscaled.py's GPU numerics: NVFP4 / MXFP4 / MXFP8 GEMMs and the NVFP4
decode kernels called with CPU tensors on the emulated B200, checked with the GPU tests' own bound
(`assert_close_to_reference`: the dequantized operands are exact, so only fp32 accumulation, the global-scale
product and the final bf16 rounding remain; see that module's docstring).

Paths covered: blocked 128x4 scales with M, N % 128 == 0 and K % 256 == 0 take the native TMA kernel
(`tcgen05.mma ... block_scale` with scales moved to TMEM by `tcgen05.cp`); plain scales take the pointer
`tl.dot_scaled` kernel; decode takes its tensor-core path (`mma`: tcgen05 at BLOCK_N 64, mma.sync at 32) or its
CUDA-core (`gemv`, Gluon) path; split-K (fp32 vector atomics) is an expected failure until the emulator's
`atom.add.v4.f32` is fixed. Tuning is off
(BWTRITON_DECODE_TUNE=0 / pinned configs): autotuning would time every candidate on the emulator.
The whole file runs in ~10-15 s on 2 cores (warm Triton cache).
"""
from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from bwtriton.formats import quantize_mxfp4, quantize_mxfp8, quantize_nvfp4  # noqa: E402
from test_kernels_blockscaled import assert_close_to_reference  # noqa: E402

blockscaled = importlib.import_module("bwtriton.kernels.blockscaled")
decode = importlib.import_module("bwtriton.kernels.decode")

pytestmark = [pytest.mark.emulated, pytest.mark.usefixtures("emulated_b200_module")]



@pytest.fixture(autouse=True)
def no_decode_tuning(monkeypatch):
    monkeypatch.setenv("BWTRITON_DECODE_TUNE", "0")


def _last_ptx(launcher) -> str:
    return list(launcher._entries.values())[-1][0].asm["ptx"]


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4", "mxfp8"])
def test_emulated_native_block_scaled_tma_kernel(fmt):
    """Blocked scales, 128x128x256: the sm_100a TMA kernel with block-scaled tcgen05.mma."""
    quant = {"nvfp4": quantize_nvfp4, "mxfp4": quantize_mxfp4, "mxfp8": quantize_mxfp8}[fmt]
    gen = torch.Generator().manual_seed(10)
    a_q = quant(torch.randn(128, 256, generator=gen), blocked=True)
    b_q = quant(torch.randn(128, 256, generator=gen) * 0.05, blocked=True)
    out = getattr(blockscaled, f"{fmt}_matmul")(a_q, b_q)
    assert out.device.type == "cpu" and out.dtype == torch.bfloat16 and out.shape == (128, 128)
    ptx = _last_ptx(blockscaled._TMA)
    assert "block_scale" in ptx and "tcgen05.cp" in ptx
    assert_close_to_reference(out, a_q.dequantize(torch.float64), b_q.dequantize(torch.float64))


def test_emulated_nvfp4_pointer_kernel_plain_scales():
    gen = torch.Generator().manual_seed(11)
    a_q = quantize_nvfp4(torch.randn(128, 256, generator=gen))
    b_q = quantize_nvfp4(torch.randn(128, 256, generator=gen) * 0.02)
    out = blockscaled.nvfp4_matmul(a_q, b_q, method="dot_scaled")
    assert "tcgen05.mma" in _last_ptx(blockscaled._POINTER)
    assert_close_to_reference(out, a_q.dequantize(torch.float64), b_q.dequantize(torch.float64))


def test_emulated_nvfp4_fp32_out_is_tighter():
    gen = torch.Generator().manual_seed(12)
    a_q = quantize_nvfp4(torch.randn(128, 256, generator=gen), blocked=True)
    b_q = quantize_nvfp4(torch.randn(128, 256, generator=gen), blocked=True)
    out = blockscaled.nvfp4_matmul(a_q, b_q, out_dtype=torch.float32)
    assert_close_to_reference(out, a_q.dequantize(torch.float64), b_q.dequantize(torch.float64), out_bits=22)


def test_emulated_nvfp4_two_tiles_and_k_loop():
    gen = torch.Generator().manual_seed(13)
    a_q = quantize_nvfp4(torch.randn(256, 512, generator=gen), blocked=True)
    b_q = quantize_nvfp4(torch.randn(256, 512, generator=gen) * 0.02, blocked=True)
    out = blockscaled.nvfp4_matmul(a_q, b_q)
    assert_close_to_reference(out, a_q.dequantize(torch.float64), b_q.dequantize(torch.float64))


#: decode configs: BLOCK_N 64 makes the swapped MMA M = 64, which sm_100a runs on tcgen05; the default BLOCK_N 32
#: (M = 32) lowers to mma.sync; gemv is the CUDA-core Gluon kernel
DECODE_CASES = [("tcgen05", 16, {"path": "mma", "BLOCK_N": 64, "SPLIT_K": 1}),
                ("mma.sync", 16, {"path": "mma", "BLOCK_N": 32, "SPLIT_K": 1}),
                ("gemv", 1, {"path": "gemv"}),
                ("frag", 1, {"path": "frag", "SPLIT_K": 1}),
                ("frag", 5, {"path": "frag", "SPLIT_K": 2}),
                ("frag", 16, {"path": "frag", "TILES_PER_THREAD": 1, "SPLIT_K": 4})]


@pytest.mark.parametrize("what,m,config", DECODE_CASES, ids=[f"{c[0]}-m{c[1]}" for c in DECODE_CASES])
@pytest.mark.parametrize("blocked", [False, True])
def test_emulated_decode(what, m, config, blocked):
    gen = torch.Generator().manual_seed(14)
    n, k = 128, 512
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, generator=gen) * 0.05, blocked=blocked)
    out = decode.nvfp4_decode_matmul(x, w_q, config=config)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    if what == "frag":  # the fragment decode: prmt byte tables feeding bf16 mma.sync
        ptx = _last_ptx(decode._FRAG_LAUNCHER)
        assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx and "prmt.b32" in ptx
    elif what != "gemv":
        assert what in _last_ptx(decode._MMA_LAUNCHER)
    assert_close_to_reference(out, x.double(), w_q.dequantize(torch.float64))


def test_emulated_decode_split_k():
    """Split-K's epilogue adds its partial sums with vector atomics (atom.global.gpu.relaxed.add.v4.f32)."""
    gen = torch.Generator().manual_seed(15)
    x = torch.randn(3, 1024, generator=gen).to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(128, 1024, generator=gen))
    out = decode.nvfp4_decode_matmul(x, w_q, config={"path": "mma", "BLOCK_N": 64, "SPLIT_K": 2})
    assert_close_to_reference(out, x.double(), w_q.dequantize(torch.float64))


def test_emulated_frag_decode_is_exact_on_every_code_and_scale():
    """One-hot activations pick single weights: every byte value (both nibbles, -0, the subnormal 0.5) and UE4M3
    scales down to the subnormal 2^-9 must come out exactly (fp32 output), through the repack and the prmt
    decode; a bias is added in fp32."""
    from bwtriton.formats import QuantizedTensor
    gen = torch.Generator().manual_seed(16)
    n, k = 64, 512
    data = torch.stack([torch.randperm(256, generator=gen)[torch.arange(k // 2) % 256] for _ in range(n)])
    scale_bytes = torch.randint(0, 0x7F, (n, k // 16), generator=gen, dtype=torch.uint8)  # 0x7F is NaN
    w_q = QuantizedTensor(data=data.to(torch.uint8), scales=scale_bytes.view(torch.float8_e4m3fn),
                          scale_layout="plain", global_scale=torch.tensor(0.75), format="nvfp4", shape=(n, k))
    dense = w_q.dequantize(torch.float64)
    cols = torch.tensor([0, 1, 2, 3, 17, 255, 256, 511])
    x = torch.zeros(8, k, dtype=torch.bfloat16)
    x[torch.arange(8), cols] = 1.0
    out = decode.nvfp4_decode_matmul(x, w_q, out_dtype=torch.float32, config={"path": "frag", "SPLIT_K": 1})
    assert torch.equal(out.double(), dense[:, cols].T)


def test_emulated_frag_plan_replay_sees_an_in_place_weight_edit(monkeypatch):
    """The auto path's replay plan reads the repacked copy through a version check: editing the weight's codes
    in place between calls must change the result (a stale copy would be a silent wrong answer)."""
    monkeypatch.setattr(decode, "_tuned", lambda *a, **kw: {"path": "frag", "TILES_PER_THREAD": 1,
                                                             "CHUNKS_PER_STEP": 1, "num_warps": 4, "SPLIT_K": 1})
    gen = torch.Generator().manual_seed(17)
    x = torch.randn(2, 256, generator=gen).to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(64, 256, generator=gen))
    _, entry = decode._decode("t", x, w_q, decode._tuned(), torch.bfloat16, x.device)
    replay = decode.make_replay(w_q, decode._tuned(), entry, 2, torch.bfloat16, x.device)
    alpha = decode.decode_scale_arg(w_q, x.device)
    assert_close_to_reference(replay(x, alpha, None), x.double(), w_q.dequantize(torch.float64))
    w_q.data.copy_(w_q.data ^ 0x88)  # flip every sign
    assert_close_to_reference(replay(x, alpha, None), x.double(), w_q.dequantize(torch.float64))


@pytest.mark.parametrize("m,split,out_dtype", [(2, 2, torch.float16), (9, 1, torch.float32), (16, 4, torch.bfloat16)])
def test_emulated_frag_decode_with_bias_split_and_out_dtype(m, split, out_dtype):
    """The small-M linear's call (`_decode` with alpha and bias): with split-K only K slice 0 adds the bias; odd
    M exercises the MMA's second column, M > 8 its second MMA."""
    gen = torch.Generator().manual_seed(18)
    n, k = 64, 512
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, generator=gen) * 0.05)
    bias = torch.randn(n, generator=gen).to(torch.bfloat16)
    alpha = torch.tensor([0.375])
    cfg = {"path": "frag", "TILES_PER_THREAD": 1, "CHUNKS_PER_STEP": 1, "num_warps": 4, "SPLIT_K": split}
    out, _ = decode._decode("t", x, w_q, cfg, out_dtype, x.device, alpha, bias)
    assert out.dtype == out_dtype and out.shape == (m, n)
    w = w_q.dequantize(torch.float64) / w_q.global_scale.double() * 0.375  # alpha replaces the global scale
    assert_close_to_reference(out, x.double(), w, bias)


def test_emulated_fragw_decode_is_exact_on_every_code_and_scale():
    """The scaled-weight frag kernel (`_decode_frag_wide`): e2m1 * 2^120 tables times the scale byte << 4 read as
    bf16 (scale * 2^-120) must give every byte value and every UE4M3 scale, subnormals included, exactly; one-hot
    activations in several 8-row blocks pick single weights (fp32 output), rows past M are not written."""
    from bwtriton.formats import QuantizedTensor
    gen = torch.Generator().manual_seed(19)
    n, k = 64, 512
    data = torch.stack([torch.randperm(256, generator=gen)[torch.arange(k // 2) % 256] for _ in range(n)])
    scale_bytes = torch.randint(0, 0x7F, (n, k // 16), generator=gen, dtype=torch.uint8)  # 0x7F is NaN
    scale_bytes[:, :8] = torch.arange(8, dtype=torch.uint8)  # zero and the subnormals
    w_q = QuantizedTensor(data=data.to(torch.uint8), scales=scale_bytes.view(torch.float8_e4m3fn),
                          scale_layout="plain", global_scale=torch.tensor(0.75), format="nvfp4", shape=(n, k))
    dense = w_q.dequantize(torch.float64)
    cols = torch.tensor([0, 1, 2, 3, 17, 40, 100, 127, 255, 256, 300, 383, 384, 450, 510, 511, 5, 77, 200, 333])
    x = torch.zeros(len(cols), k, dtype=torch.bfloat16)
    x[torch.arange(len(cols)), cols] = 1.0
    out = decode.nvfp4_decode_matmul(x, w_q, out_dtype=torch.float32, config={"path": "fragw", "SPLIT_K": 1})
    assert torch.equal(out.double(), dense[:, cols].T)


@pytest.mark.parametrize("m,split,tiles", [(24, 2, 1), (64, 1, 2)])
def test_emulated_fragw_decode_with_bias_and_split(m, split, tiles):
    gen = torch.Generator().manual_seed(20)
    n, k = 128, 512
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, generator=gen) * 0.05)
    bias = torch.randn(n, generator=gen).to(torch.bfloat16)
    alpha = torch.tensor([0.375])
    cfg = {"path": "fragw", "TILES_PER_THREAD": tiles, "CHUNKS_PER_STEP": 2, "num_warps": 4, "SPLIT_K": split}
    out, _ = decode._decode("t", x, w_q, cfg, torch.bfloat16, x.device, alpha, bias)
    assert out.shape == (m, n)
    w = w_q.dequantize(torch.float64) / w_q.global_scale.double() * 0.375
    assert_close_to_reference(out, x.double(), w, bias)


# ------------------------------------------------------------------ split-K and the W4A4 prologue in one launch
FRAG_SPLIT4 = {"path": "frag", "TILES_PER_THREAD": 2, "CHUNKS_PER_STEP": 2, "num_warps": 4, "SPLIT_K": 4,
               "FIXUP": True}


def test_emulated_frag_split_k_reduces_in_the_launch_and_leaves_its_scratch_zero():
    """Split-K: the slices add into a per-stream fp32 accumulator and the last one to arrive (release counter)
    writes the bf16 output with the bias and zeroes the accumulator and counter for the next call."""
    frag = importlib.import_module("bwtriton.kernels._decode_frag")
    gen = torch.Generator().manual_seed(18)
    m, n, k = 5, 128, 1024
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, generator=gen) * 0.05)
    bias = torch.randn(n, generator=gen).to(torch.bfloat16)
    alpha = decode.decode_scale_arg(w_q, x.device)
    first, launch = decode._decode("t", x, w_q, FRAG_SPLIT4, torch.bfloat16, x.device, alpha, bias)
    ptx = _last_ptx(decode._FRAG_LAUNCHER)
    assert "atom.global.gpu.release.add.u32" in ptx and "atom.global.gpu.acquire" in ptx and "ld.global.cg" in ptx
    acc, count, _ = launch.scratch.get()
    assert acc.shape == (m, n) and count.shape == (n // frag.frag_block_n(FRAG_SPLIT4),)  # one zeroed buffer
    assert first.dtype == torch.bfloat16 and not acc.any() and not count.any()
    again = launch.run(x, frag.frag_weight(w_q), alpha, bias)
    assert torch.equal(again, first) and not acc.any() and not count.any()
    # bf16 output of an fp32 sum of exact products (+ bias): one bf16 rounding (2^-8 relative) dominates
    ref = x.double() @ w_q.dequantize(torch.float64).T + bias.double()
    torch.testing.assert_close(first.double(), ref, rtol=2 ** -7, atol=1e-3)


def test_emulated_frag_l2_prefetch_changes_no_bit():
    """The L2 prefetch of each row tile's first chunks (the W4A4 prologue's PREFETCH, here capped at the CTA's
    slice of 8 chunks) is a hint: bit-equal output to the same config without it, and the bulk prefetches of
    the words and the scales are in the PTX."""
    gen = torch.Generator().manual_seed(20)
    m, n, k = 3, 128, 1024
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, generator=gen) * 0.05)
    cfg = {"path": "frag", "TILES_PER_THREAD": 1, "CHUNKS_PER_STEP": 2, "num_warps": 4, "SPLIT_K": 2}
    plain = decode.nvfp4_decode_matmul(x, w_q, config=cfg)
    out = decode.nvfp4_decode_matmul(x, w_q, config=dict(cfg, PREFETCH=100))
    assert _last_ptx(decode._FRAG_LAUNCHER).count("cp.async.bulk.prefetch.L2.global") == 2
    assert torch.equal(out, plain)


@pytest.mark.parametrize("m", [1, 5, 16])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("scale", ["amax", "given"])
def test_emulated_linear_qdq_decode_is_bit_equal_to_the_two_launch_form(m, with_bias, scale):
    """x quantize-dequantized in the frag kernel's prologue gives the same bf16 values as the separate
    quantize-dequantize kernel, hence (same config, same summation) the same output bits as 'dequant_decode'."""
    lin = importlib.import_module("bwtriton.kernels.nvfp4_linear")
    dq = importlib.import_module("bwtriton.kernels.nvfp4_dequant")
    gen = torch.Generator().manual_seed(19 + m)
    n, k = 128, 512
    x = (torch.randn(m, k, generator=gen) * 3).to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, generator=gen) * 0.05)
    bias = torch.randn(n, generator=gen).to(torch.bfloat16) if with_bias else None
    g = None if scale == "amax" else float(x.float().abs().amax()) / 2688 * 1.5
    s_enc = None if g is None else 1.0 / torch.tensor([g], dtype=torch.float32)
    w_dec = decode.decode_scale_arg(w_q, x.device)
    out, _ = decode.decode_qdq(x, w_q, s_enc, w_dec, bias, FRAG_SPLIT4, x.device)
    assert "atom.global.gpu.release.add.u32" in _last_ptx(decode._FRAG_LAUNCHER)  # one launch
    xd, alpha, _ = dq.quant_dequant_nvfp4(x, s_enc, w_dec)
    two_launch, _ = decode._decode("t", xd, w_q, FRAG_SPLIT4, torch.bfloat16, x.device, alpha, bias)
    assert torch.equal(out, two_launch)
    cfg = decode.qdq_decode_candidates(x, w_q, x.device, limit=1)[0]  # the form's (untuned) config, and its plan
    first = decode.decode_qdq(x, w_q, s_enc, w_dec, bias, cfg, x.device)[0]
    for _ in range(2):
        assert torch.equal(lin.nvfp4_linear(x, w_q, bias, x_global_scale=g, form="qdq_decode"), first)
