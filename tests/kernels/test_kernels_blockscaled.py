"""Block-scaled kernels: input validation (CPU), sm_100a code generation (CPU compile), numerics (GPU).

Numerics tolerance. The references multiply the *dequantized* operands in float64. Every dequantized value is
exact in the kernels too (E2M1 x UE4M3 / UE8M0 products, or MXFP8 values, fit bf16 exactly), so the only errors
are the fp32 accumulation, at most ~K * 2^-24 relative to sum_k |a_k||b_k| (we allow K * 2^-23), the fp32
product of the two global scales (2^-23 relative), and the final rounding to bf16 (2^-8 relative of the value).
"""
from __future__ import annotations

import importlib
import re

import pytest
import torch

import bwtriton
from bwtriton.errors import InputError
from bwtriton.formats import quantize_mxfp4, quantize_mxfp8, quantize_nvfp4

blockscaled = importlib.import_module("bwtriton.kernels.blockscaled")
decode = importlib.import_module("bwtriton.kernels.decode")
linear = importlib.import_module("bwtriton.kernels.nvfp4_linear")


def assert_close_to_reference(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, bias=None, out_bits: int = 8):
    """|out - a@b^T| <= 2^-out_bits |ref| + K 2^-23 (|a|@|b|^T) + tiny, all in float64."""
    a64, b64 = a.double().cpu(), b.double().cpu()
    ref = a64 @ b64.T
    if bias is not None:
        ref = ref + bias.double().cpu()
    k = a.shape[1]
    bound = 2.0 ** -out_bits * ref.abs() + k * 2.0 ** -23 * (a64.abs() @ b64.abs().T) + 1e-30
    err = (out.double().cpu() - ref).abs()
    worst = (err / bound).max().item()
    assert worst <= 1.0, f"error exceeds the bound by {worst:.2f}x (max abs err {err.max().item():.3e})"


# ------------------------------------------------------------------------------------------------ validation (CPU)

def _nv(rows=128, k=256, blocked=False):
    return quantize_nvfp4(torch.randn(rows, k), blocked=blocked)


def test_rejects_non_quantized_input():
    with pytest.raises(InputError, match="QuantizedTensor"):
        blockscaled.nvfp4_matmul(torch.randn(128, 256), _nv())


def test_rejects_wrong_format():
    with pytest.raises(InputError, match="mxfp4.*nvfp4"):
        blockscaled.nvfp4_matmul(quantize_mxfp4(torch.randn(128, 256)), _nv())


def test_rejects_k_mismatch():
    with pytest.raises(InputError, match="K mismatch"):
        blockscaled.nvfp4_matmul(_nv(128, 256), _nv(128, 512))


def test_rejects_mixed_scale_layouts():
    with pytest.raises(InputError, match="to_blocked"):
        blockscaled.nvfp4_matmul(_nv(128, 256), _nv(128, 256, blocked=True))


def test_rejects_unaligned_shape():
    with pytest.raises(InputError, match="multiple of 64"):
        blockscaled.nvfp4_matmul(_nv(96, 256), _nv(128, 256))


def test_rejects_cpu_tensors_with_a_fix():
    with pytest.raises(InputError, match=r"\.cuda\(\)"):
        blockscaled.nvfp4_matmul(_nv(), _nv())


def test_rejects_tampered_scales():
    import dataclasses
    q = _nv()
    bad = dataclasses.replace(q, scales=q.scales.float())
    with pytest.raises(InputError, match="scales must be"):
        blockscaled.nvfp4_matmul(bad, _nv())


def test_decode_rejects_empty_x_and_wrong_dtype():
    w = _nv(128, 256)
    with pytest.raises(InputError, match="no rows"):
        decode.nvfp4_decode_matmul(torch.randn(0, 256, dtype=torch.bfloat16), w)
    with pytest.raises(InputError, match="bfloat16"):
        decode.nvfp4_decode_matmul(torch.randn(4, 256), w)


def test_linear_rejects_bad_bias():
    w = _nv(128, 256)
    with pytest.raises(InputError, match="bias"):
        linear.nvfp4_linear(torch.randn(4, 256, dtype=torch.bfloat16), w, bias=torch.randn(64))


# ----------------------------------------------------------------------------------- sm_100a code paths (CPU)

@pytest.fixture(scope="module")
def sm100_ptx():
    """PTX of the TMA kernel (blocked 5-D scales) and the fused linear kernel for sm_100a, compiled once."""
    out = {}
    for fmt in ("nvfp4", "mxfp4", "mxfp8_e4m3"):
        sig, const = blockscaled.tma_signature(fmt)
        out[f"tma-{fmt}"] = bwtriton.compile(blockscaled.block_scaled_matmul_tma_kernel, signature=sig,
                                             constexprs=const, target="sm_100a").asm["ptx"]
    sig = {"x_ptr": "*bf16", "x_enc_ptr": "*fp32", "w_ptr": "*u8", "ws_ptr": "*fp8e4nv", "w_dec_ptr": "*fp32",
           "bias_ptr": "*bf16", "out_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32"}
    out["fused"] = bwtriton.compile(linear.nvfp4_linear_fused_kernel, signature=sig, target="sm_100a", num_warps=8,
                                    constexprs=dict(HAS_BIAS=True, SCALE_BLOCKED=False, BLOCK_M=128, BLOCK_N=128,
                                                    BLOCK_K=128, GROUP_M=8)).asm["ptx"]
    return out


@pytest.mark.parametrize("fmt,kind", [("nvfp4", "kind::mxf4nvf4.block_scale.scale_vec::4X"),
                                      ("mxfp4", "kind::mxf4.block_scale.scale_vec::2X"),
                                      ("mxfp8_e4m3", "kind::mxf8f6f4.block_scale.scale_vec::1X")])
def test_tma_kernel_uses_block_scaled_tcgen05_and_tcgen05_cp(sm100_ptx, fmt, kind):
    ptx = sm100_ptx[f"tma-{fmt}"]
    assert re.search(r"tcgen05\.mma\.cta_group::1\." + re.escape(kind), ptx)
    # 128x4 scale blocks reach TMEM by tcgen05.cp, 32 rows x 128 bit replicated over the 4 warps' lane quarters.
    assert re.search(r"tcgen05\.cp\.cta_group::1\.warpx4\.32x128b", ptx)


def test_fused_linear_keeps_native_nvfp4_mma_on_sm100(sm100_ptx):
    ptx = sm100_ptx["fused"]
    assert "kind::mxf4nvf4.block_scale.scale_vec::4X" in ptx
    assert "kind::f16" not in ptx  # not dequantized to a bf16 MMA


@pytest.fixture(scope="module")
def gemv_compiled():
    """The CUDA-core decode GEMV (M = 4, 4 rows per thread) compiled for Hopper and Blackwell, once."""
    sig = {"x_ptr": "*i32", "w_ptr": "*u8", "ws_ptr": "*fp8e4nv", "out_ptr": "*bf16", "alpha_ptr": "*fp32",
           "bias_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32", "stride_wn": "i32", "stride_om": "i32"}
    const = dict(SCALE_BLOCKED=False, BLOCK_M=4, ROWS_PER_THREAD=4, THREADS_N=1, SPLIT_K=1)
    return {t: bwtriton.compile(decode.nvfp4_gemv_kernel, signature=sig, constexprs=const, target=t, num_warps=4,
                                num_stages=1) for t in ("sm_90a", "sm_100a")}


@pytest.mark.parametrize("target", ["sm_90a", "sm_100a"])
def test_decode_gemv_compiles_without_smem_round_trips_or_spills(gemv_compiled, target):
    res = gemv_compiled[target]
    assert "convert_layout" not in res.asm["ttgir"] and "local_alloc" not in res.asm["ttgir"]
    ptx = res.asm["ptx"]
    assert "mul.rn.f32" in ptx and "0f7E800000" in ptx  # the exact e2m1 -> fp32 rebias
    assert re.search(r"ld\.global(\.\w+)*\.v4\.b32", ptx)  # 16-byte weight / activation loads
    assert not re.search(r"\b(STL|LDL)\b", res.asm["sass"])  # no register spills


# ------------------------------------------------------------------------------------------------ numerics (GPU)

SHAPES = [(128, 128, 256), (256, 192, 512)]


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("blocked", [False, True])
def test_nvfp4_matmul_numerics(m, n, k, blocked):
    torch.manual_seed(0)
    a_q = quantize_nvfp4(torch.randn(m, k, device="cuda"), blocked=blocked)
    b_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.02, blocked=blocked)
    out = blockscaled.nvfp4_matmul(a_q, b_q)
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    assert_close_to_reference(out, a_q.dequantize(torch.float64), b_q.dequantize(torch.float64))


@pytest.mark.gpu
def test_nvfp4_matmul_fp32_out_is_tighter():
    torch.manual_seed(1)
    a_q, b_q = quantize_nvfp4(torch.randn(128, 512, device="cuda")), quantize_nvfp4(torch.randn(128, 512,
                                                                                                  device="cuda"))
    out = blockscaled.nvfp4_matmul(a_q, b_q, out_dtype=torch.float32)
    assert_close_to_reference(out, a_q.dequantize(torch.float64), b_q.dequantize(torch.float64), out_bits=22)


@pytest.mark.gpu
@pytest.mark.parametrize("fn,quant", [("mxfp4_matmul", quantize_mxfp4), ("mxfp8_matmul", quantize_mxfp8)])
def test_mx_matmul_numerics(fn, quant):
    torch.manual_seed(2)
    a_q, b_q = quant(torch.randn(128, 256, device="cuda")), quant(torch.randn(192, 256, device="cuda"))
    out = getattr(blockscaled, fn)(a_q, b_q)
    assert_close_to_reference(out, a_q.dequantize(torch.float64), b_q.dequantize(torch.float64))


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 5, 16, 64])
@pytest.mark.parametrize("blocked", [False, True])
def test_decode_numerics(m, blocked):
    torch.manual_seed(3)
    n, k = 512, 2048
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05, blocked=blocked)
    out = decode.nvfp4_decode_matmul(x, w_q)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert_close_to_reference(out, x.double(), w_q.dequantize(torch.float64))


@pytest.mark.gpu
@pytest.mark.parametrize("split", [1, 4])
def test_decode_split_k_matches(split):
    torch.manual_seed(4)
    x = torch.randn(3, 4096, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(256, 4096, device="cuda"))
    out = decode.nvfp4_decode_matmul(x, w_q, config={"SPLIT_K": split})
    assert_close_to_reference(out, x.double(), w_q.dequantize(torch.float64))


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("blocked", [False, True])
def test_decode_gemv_numerics(m, blocked):
    """The CUDA-core path (forced for M = 8 too), plain and 128x4 scales, K split over CTAs (N = 256 is small)."""
    torch.manual_seed(6)
    n, k = 256, 3072  # K = 3 * 1024: several K steps per CTA, and only THREADS_N = 1 divides it in whole steps
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05, blocked=blocked)
    out = decode.nvfp4_decode_matmul(x, w_q, config={"path": "gemv"})
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert_close_to_reference(out, x.double(), w_q.dequantize(torch.float64))


@pytest.mark.gpu
@pytest.mark.parametrize("split", [1, 2])
def test_decode_gemv_two_steps(split):
    torch.manual_seed(9)
    x = torch.randn(4, 4096, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(128, 4096, device="cuda"))
    out = decode.nvfp4_decode_matmul(x, w_q, config={"path": "gemv", "TWO_STEPS": True, "SPLIT_K": split,
                                                     "ROWS_PER_THREAD": 2})
    assert_close_to_reference(out, x.double(), w_q.dequantize(torch.float64))


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["gemv", "frag", "fragw"])
def test_decode_decodes_every_byte_and_scale_exactly(path):
    """All 256 weight bytes (both nibbles, signed zero, subnormal 0.5) in every row, UE4M3 scales down to the
    subnormal 2^-9, one-hot activations: out[0, n] picks single weights, so the fp32 result must equal the
    dequantized weight exactly (no accumulation error), here read with fp32 output."""
    from bwtriton.formats import QuantizedTensor
    torch.manual_seed(7)
    n, k = 64, 1024
    data = torch.stack([torch.randperm(256, device="cuda")[torch.arange(k // 2, device="cuda") % 256]
                        for _ in range(n)]).to(torch.uint8)
    scale_bytes = torch.randint(0, 0x7F, (n, k // 16), device="cuda", dtype=torch.uint8)  # 0x7F is NaN
    w_q = QuantizedTensor(data=data, scales=scale_bytes.view(torch.float8_e4m3fn), scale_layout="plain",
                          global_scale=torch.tensor(0.75, device="cuda"), format="nvfp4", shape=(n, k))
    dense = w_q.dequantize(torch.float64)
    for cols in (torch.arange(0, 4), torch.tensor([1, 17, 510, 1023])):
        x = torch.zeros(4, k, device="cuda", dtype=torch.bfloat16)
        x[torch.arange(4), cols.cuda()] = 1.0
        out = decode.nvfp4_decode_matmul(x, w_q, out_dtype=torch.float32, config={"path": path, "SPLIT_K": 1})
        assert torch.equal(out.double().cpu(), dense[:, cols].T.cpu())


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["gemv", "mma", "frag", "fragw"])
def test_decode_paths_agree_at_llm_shape(path):
    """N = K = 8192 (the benchmark shape) through both paths with their default configs."""
    torch.manual_seed(8)
    x = torch.randn(4, 8192, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(8192, 8192, device="cuda") * 0.02)
    out = decode.nvfp4_decode_matmul(x, w_q, config={"path": path})
    assert_close_to_reference(out, x.double(), w_q.dequantize(torch.float64))


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 48, 200])
@pytest.mark.parametrize("with_bias", [False, True])
def test_nvfp4_linear_fused_and_two_kernel(m, with_bias):
    torch.manual_seed(5)
    n, k = 256, 512
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16) if with_bias else None
    x_q = quantize_nvfp4(x.float())  # the in-kernel quantizer is its bit-exact twin
    ref_a, ref_b = x_q.dequantize(torch.float64), w_q.dequantize(torch.float64)
    for fn in (linear.nvfp4_linear, linear.nvfp4_linear_two_kernel,
               lambda *a, **kw: linear.nvfp4_linear_two_kernel(*a, use_pdl=False, **kw)):
        out = fn(x, w_q, bias)
        assert out.dtype == torch.bfloat16 and out.shape == (m, n)
        assert_close_to_reference(out, ref_a, ref_b, bias)


@pytest.mark.gpu
def test_pdl_quantizer_is_bit_exact():
    torch.manual_seed(6)
    x = torch.randn(100, 512, device="cuda").to(torch.bfloat16)
    ref = quantize_nvfp4(x.float())
    xq, xs = linear.quantize_nvfp4_pdl(x, ref.global_encode_scale.reshape(1))
    torch.cuda.synchronize()
    assert torch.equal(xq, ref.data)
    assert torch.equal(xs.view(torch.uint8), ref.scales.view(torch.uint8))


# ------------------------------------------------------------------------------- tuned paths and replay plans

@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 4, 8, 16])
def test_every_decode_candidate_is_correct(m):
    """Each config the tuner may pick (GEMV R1/R2/R4, wide G4 loads, two-step, tensor cores, split-K) on a
    shape where K is split and several K steps run per CTA."""
    torch.manual_seed(11)
    n, k = 512, 4096
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05)
    ref_w = w_q.dequantize(torch.float64)
    cands = decode.decode_candidates(m, n, k, num_sms=torch.cuda.get_device_properties(0).multi_processor_count)
    for cfg in cands:
        out = decode.nvfp4_decode_matmul(x, w_q, config=cfg)
        assert_close_to_reference(out, x.double(), ref_w)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [24, 64, 128])
def test_every_fragw_candidate_is_correct(m):
    """The scaled-weight frag kernel's tuner configs (split-K, 1-2 tiles per thread, 4-8 warps) at 3-16
    activation blocks, rows past M in the last block."""
    torch.manual_seed(21)
    n, k = 512, 4096
    x = torch.randn(m - 3, k, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05)
    ref_w = w_q.dequantize(torch.float64)
    for cfg in decode._wide.wide_candidates(m, n, k):
        out = decode.nvfp4_decode_matmul(x, w_q, config=cfg)
        assert_close_to_reference(out, x.double(), ref_w)


@pytest.mark.gpu
def test_decode_auto_path_tunes_once_then_replays_its_plan():
    torch.manual_seed(12)
    n, k = 1024, 2048
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05)
    x = torch.randn(2, k, device="cuda").to(torch.bfloat16)
    first = decode.nvfp4_decode_matmul(x, w_q)
    cfg = decode.tuned_decode_config(2, n, k, device_index=x.device.index)
    assert cfg is not None and cfg["path"] in ("gemv", "mma", "frag")
    plans = len(decode._PLANS)
    x2 = torch.randn(2, k, device="cuda").to(torch.bfloat16)
    second = decode.nvfp4_decode_matmul(x2, w_q)  # plan path: same signature, new data
    assert len(decode._PLANS) == plans
    assert_close_to_reference(first, x.double(), w_q.dequantize(torch.float64))
    assert_close_to_reference(second, x2.double(), w_q.dequantize(torch.float64))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = decode.nvfp4_decode_matmul(x2, w_q)
    x2.copy_(x)
    graph.replay()  # split-K sums with fp32 atomics in any order: compare with the reference, not bit for bit
    assert_close_to_reference(captured, x.double(), w_q.dequantize(torch.float64))
    del w_q
    import gc
    gc.collect()
    assert len(decode._PLANS) < plans  # the plan went with its weight


@pytest.mark.gpu
@pytest.mark.parametrize("m", [3, 100])
def test_linear_auto_matches_both_forms(m):
    torch.manual_seed(13)
    n, k = 256, 1024
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05, blocked=True)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    ref_a = quantize_nvfp4(x.float()).dequantize(torch.float64)
    outs = {form: linear.nvfp4_linear(x, w_q, bias, form=form) for form in ("fused", "two_kernel", "auto")}
    assert any(key[1:4] == (linear._m_bucket(m), n, k) for key in linear._FORM)
    for out in outs.values():
        assert_close_to_reference(out, ref_a, w_q.dequantize(torch.float64), bias)
    again = linear.nvfp4_linear(x, w_q, bias)  # plan path
    torch.testing.assert_close(again, outs["auto"], rtol=0, atol=0)


@pytest.mark.gpu
def test_matmul_plan_reuses_weight_descriptor_only_for_the_same_weight():
    from bwtriton.kernels import matmul
    torch.manual_seed(14)
    a1, a2 = (torch.randn(256, 512, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    b1, b2 = (torch.randn(512, 384, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for a, b in ((a1, b1), (a2, b1), (a2, b2), (a1, b1)):  # the 2nd-4th calls take the plan
        out = matmul(a, b)
        torch.testing.assert_close(out.float(), a.float() @ b.float(), rtol=2 ** -7, atol=512 * 2 ** -9)


_GEMV_SIG = {"x_ptr": "*i32", "w_ptr": "*u8", "ws_ptr": "*fp8e4nv", "out_ptr": "*fp32", "alpha_ptr": "*fp32",
             "bias_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32", "stride_wn": "i32", "stride_om": "i32"}


@pytest.mark.emulated
@pytest.mark.parametrize("m,rows,groups,two_steps,threads_n,blocked", [
    (2, 1, 4, False, 1, False),   # wide loads: two 16-byte loads per row
    (1, 2, 4, False, 2, True),    # wide loads, two threads per row, 128x4 scales
    (2, 1, 2, True, 1, False),    # two K steps in flight
    (3, 2, 4, False, 4, False),   # M = 3 < BLOCK_M = 4: masked activation rows
    (2, 1, 4, True, 2, False),    # wide loads and two steps together
])
def test_gemv_tuning_shapes_emulated(m, rows, groups, two_steps, threads_n, blocked):
    """The GEMV shapes the decode tuner adds, compiled for sm_90a and run in bwtriton's emulator (no GPU):
    exact decode, so the result is the float64 reference up to fp32 accumulation. M is not declared divisible
    by 16 (as a launch with M = 3 specialises it), else the row mask would be folded away."""
    import bwtriton.emu as emu
    torch.manual_seed(15)
    block_n = rows * threads_n * 4
    n, k = 2 * block_n, 2 * (512 * groups // threads_n * (2 if two_steps else 1))
    x = torch.randn(m, k).to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k) * 0.05, blocked=blocked)
    const = dict(SCALE_BLOCKED=blocked, BLOCK_M=1 << (m - 1).bit_length(), ROWS_PER_THREAD=rows,
                 THREADS_N=threads_n, SPLIT_K=1, TWO_STEPS=two_steps, GROUPS_PER_THREAD=groups)
    compiled = bwtriton.compile(decode.nvfp4_gemv_kernel, signature=_GEMV_SIG, constexprs=const, target="sm_90a",
                                num_warps=4, divisible_by_16=[a for a in _GEMV_SIG if a != "M"])
    out = torch.zeros(m, n)
    xp = x.view(torch.int32)
    emu.run(compiled, (n // block_n, 1), xp, w_q.data, w_q.scales, out, w_q.global_scale.reshape(1), out, m, n, k,
            xp.stride(0), w_q.data.stride(0), out.stride(0))
    assert_close_to_reference(out, x.double(), w_q.dequantize(torch.float64), out_bits=20)
