"""Exact NVFP4 -> bf16 dequantization (`bwtriton.kernels.nvfp4_dequant`) and the paths built on it: the small-M
linear form 'dequant_decode' and `nvfp4_matmul(method='dequant')`.

CPU: the identity itself (every E2M1 x UE4M3 product is a bf16 value), the quantize-dequantize and device-amax
kernels under TRITON_INTERPRET=1 (a subprocess: the interpreter must be on before `triton.jit` runs) against the
torch quantizer, and the dispatch rules. GPU: the new forms against the float64 reference (bound of
`test_kernels_blockscaled.assert_close_to_reference`) and against the other forms.
"""
from __future__ import annotations

import importlib
import json

import pytest
from fixtures.interpreter import interpret_module
import torch

from bwtriton.errors import InputError
from bwtriton.formats import nvfp4_global_encode_scale, quantize_nvfp4
from bwtriton.formats.nvfp4 import quantize_nvfp4_with_encode_scale
from bwtriton.formats.e2m1 import e2m1_decode, unpack_e2m1


def e2m1_times_scale(q) -> torch.Tensor:
    """float32 e2m1 * block scale of an NVFP4 tensor (its global scale NOT applied), from the torch decoders."""
    plain = q.to_plain()
    vals = e2m1_decode(unpack_e2m1(plain.data))
    r, k = vals.shape
    return (vals.reshape(r, k // 16, 16) * plain.scales.float()[..., None]).reshape(r, k)


def cases() -> dict[str, tuple[torch.Tensor, "torch.Tensor | None"]]:
    """name -> (bf16 x [M, K], encode scale or None for amax): odd M (masked rows), wide dynamic range (tiny
    blocks whose scales are E4M3 subnormals), a calibrated scale smaller than amax needs (saturation; 17 rows: two
    programs, the last one masked) and zeros."""
    g = torch.Generator().manual_seed(3)
    wide = torch.randn(5, 256, generator=g) * torch.logspace(-6, 3, 256)[None, :]
    return {"normal": (torch.randn(3, 384, generator=g).bfloat16(), None),
            "wide": (wide.bfloat16(), None),
            "saturating": (torch.randn(17, 128, generator=g).bfloat16(), torch.tensor([2688.0 / 0.5])),
            "zeros": (torch.zeros(2, 128).bfloat16(), None)}


def run_interpreted() -> dict:
    """Under TRITON_INTERPRET=1: each case's mismatches (None when bit-exact)."""
    dq = importlib.import_module("bwtriton.kernels.nvfp4_dequant")
    results = {}
    for name, (x, given) in cases().items():
        m, k = x.shape
        s_enc = torch.empty(1)
        dq.amax_encode_scale_kernel[(1,)](x, s_enc, m, k, x.stride(0), BLOCK_M=16, BLOCK_K=256)
        want_enc = nvfp4_global_encode_scale(x).reshape(1)
        problems = []
        if not torch.equal(s_enc.view(torch.int32), want_enc.view(torch.int32)):
            problems.append(f"amax kernel S_enc {s_enc.item()!r} != {want_enc.item()!r}")
        enc = given if given is not None else want_enc
        w_dec = torch.tensor([0.375])
        out, alpha = torch.empty(m, k, dtype=torch.bfloat16), torch.empty(1)
        dq.quant_dequant_nvfp4_kernel[dq.qdq_grid(m, k)](
            x, enc, w_dec, alpha, out, m, k, x.stride(0), BLOCK_M=dq.QDQ_BLOCK_M, BLOCK_K=dq.QDQ_BLOCK_K)
        ref_q = quantize_nvfp4_with_encode_scale(x.float(), enc)
        ref = e2m1_times_scale(ref_q)
        if not torch.equal(out.float(), ref):
            bad = (out.float() != ref).sum().item()
            problems.append(f"{bad} dequantized values differ from e2m1*scale of formats.quantize_nvfp4")
        want_alpha = (1.0 / enc) * w_dec
        if not torch.equal(alpha, want_alpha):
            problems.append(f"alpha {alpha.item()!r} != S_dec(x) * S_dec(w) = {want_alpha.item()!r}")
        if given is None:  # S_enc from amax inside the kernel (every program), no separate amax launch
            out2, alpha2 = torch.empty(m, k, dtype=torch.bfloat16), torch.empty(1)
            dq.quant_dequant_nvfp4_kernel[dq.qdq_grid(m, k)](
                x, w_dec, w_dec, alpha2, out2, m, k, x.stride(0), BLOCK_M=dq.QDQ_BLOCK_M, BLOCK_K=dq.QDQ_BLOCK_K,
                S_ENC_FROM_AMAX=True)
            if not torch.equal(out2.float(), ref) or not torch.equal(alpha2, want_alpha):
                problems.append("S_ENC_FROM_AMAX: output or alpha differ from formats.quantize_nvfp4(x)'s")
            if k % 128 == 0:  # the two-kernel form's quantizer: same bytes, and S_enc written for the GEMM
                lin = importlib.import_module("bwtriton.kernels.nvfp4_linear")
                xq, xs, s_out = torch.empty(m, k // 2, dtype=torch.uint8), torch.empty(m, k // 16), torch.empty(1)
                lin.quantize_nvfp4_pdl_kernel[(-(-m // 32), k // 128)](x, s_out, xq, xs, m, k, x.stride(0), BLOCK_M=32,
                                                                       BLOCK_K=128, USE_PDL=False, S_ENC_FROM_AMAX=True)
                if not (torch.equal(xq, ref_q.data) and torch.equal(xs.to(torch.float8_e4m3fn), ref_q.scales)
                        and torch.equal(s_out, want_enc)):
                    problems.append("quantize_nvfp4_pdl_kernel S_ENC_FROM_AMAX differs from formats.quantize_nvfp4")
        results[name] = "; ".join(problems) or None
    return results


# ------------------------------------------------------------------------------------------------------ CPU
def test_every_e2m1_times_e4m3_product_is_a_bf16_value():
    """The identity the dequant paths rest on, exhaustively: 16 E2M1 codes x 127 finite non-negative UE4M3 scales
    (subnormals included). A product that were not a bf16 value would change under the round trip."""
    e2m1 = e2m1_decode(torch.arange(16, dtype=torch.uint8)).double()
    e4m3 = torch.arange(0, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).double()
    prods = (e2m1[:, None] * e4m3[None, :]).flatten()
    assert torch.equal(prods.to(torch.bfloat16).double(), prods)
    assert prods.abs().max().item() == 2688.0  # and in range: 6 * 448


@pytest.fixture(scope="module")
def interpreted():
    return interpret_module(__file__)


@pytest.mark.parametrize("name", list(cases()))
def test_quant_dequant_and_amax_kernels_bit_exact_under_interpreter(interpreted, name):
    assert interpreted[name] is None, interpreted[name]


def test_linear_default_form_without_native_mma_is_dequant_decode_for_small_m():
    lin = importlib.import_module("bwtriton.kernels.nvfp4_linear")
    assert lin.default_form(16, 4096, native_nvfp4_mma=False) == "dequant_decode"
    assert lin.default_form(64, 4096, native_nvfp4_mma=False) == "dequant_decode"
    assert lin.default_form(65, 4096, native_nvfp4_mma=False) == "dequant_gemm"
    assert lin.default_form(16, 384, native_nvfp4_mma=False) == "mixed"  # K % 256 != 0: decode cannot tile it
    assert lin.default_form(16, 4096, native_nvfp4_mma=True) == "fused"


def test_linear_rejects_unknown_form_naming_the_choices():
    lin = importlib.import_module("bwtriton.kernels.nvfp4_linear")
    with pytest.raises(InputError, match="form must be one of 'auto', 'fused', 'two_kernel', 'dequant_decode'"):
        lin.nvfp4_linear(torch.zeros(1, 128, dtype=torch.bfloat16), None, form="decode")


def test_dequant_gemm_dispatch_by_shape():
    bs = importlib.import_module("bwtriton.kernels.blockscaled")
    assert bs.use_dequant_gemm(8192, 8192, 8192, native_nvfp4_mma=False, capability=90)
    assert bs.use_dequant_gemm(256, 256, 4096, native_nvfp4_mma=False, capability=90)
    assert not bs.use_dequant_gemm(64, 8192, 8192, native_nvfp4_mma=False, capability=90)  # small M: dot_scaled
    assert not bs.use_dequant_gemm(8192, 8192, 8192, native_nvfp4_mma=True, capability=100)
    assert not bs.use_dequant_gemm(8192, 8192, 8192, native_nvfp4_mma=False, capability=80)  # no TMA


def test_nvfp4_matmul_rejects_unknown_method():
    bs = importlib.import_module("bwtriton.kernels.blockscaled")
    a = quantize_nvfp4(torch.randn(64, 128))
    with pytest.raises(InputError, match="method must be 'auto', 'dot_scaled' or 'dequant'"):
        bs.nvfp4_matmul(a, a, method="bf16")


_GEMV_SIG = {"x_ptr": "*i32", "w_ptr": "*u8", "ws_ptr": "*fp8e4nv", "out_ptr": "*fp32", "alpha_ptr": "*fp32",
             "bias_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32", "stride_wn": "i32",
             "stride_om": "i32"}


@pytest.mark.emulated
@pytest.mark.parametrize("split", [1])
def test_decode_gemv_bias_epilogue_emulated(split):
    """The decode GEMV with the linear's epilogue (alpha from the caller, bias in fp32 before the store), compiled
    for sm_90a and run in bwtriton's emulator. Split-K (bias from K slice 0 only) is checked on the GPU
    (`test_decode_bias_added_once_with_split_k`): its `atom.global.add.v2.f32` is outside the emulator's ISA."""
    import bwtriton
    import bwtriton.emu as emu
    decode = importlib.import_module("bwtriton.kernels.decode")
    torch.manual_seed(26)
    m, n, k = 2, 32, 2048
    x = torch.randn(m, k).to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k) * 0.05)
    bias = (torch.randn(n) * 4).to(torch.bfloat16)
    alpha = torch.tensor([0.625])
    const = dict(SCALE_BLOCKED=False, BLOCK_M=2, ROWS_PER_THREAD=2, THREADS_N=1, SPLIT_K=split, HAS_BIAS=True)
    compiled = bwtriton.compile(decode.nvfp4_gemv_kernel, signature=_GEMV_SIG, constexprs=const, target="sm_90a",
                                num_warps=4, divisible_by_16=[a for a in _GEMV_SIG if a != "M"])
    out = torch.zeros(m, n)
    xp = x.view(torch.int32)
    emu.run(compiled, (n // 8, split), xp, w_q.data, w_q.scales, out, alpha, bias, m, n, k, xp.stride(0),
            w_q.data.stride(0), out.stride(0))
    w = e2m1_times_scale(w_q).double()
    ref = (x.double() @ w.T) * 0.625 + bias.double()
    bound = 1e-6 * ((x.double().abs() @ w.abs().T) * 0.625 + bias.double().abs())  # fp32 sums, K = 2048
    assert ((out.double() - ref).abs() <= bound).all(), (out.double() - ref).abs().max().item()


@pytest.mark.parametrize("kernel,sig,const", [
    ("dequant_nvfp4_bf16_kernel", {"q_ptr": "*u8", "s_ptr": "*fp8e4nv", "out_ptr": "*bf16", "R": "i32", "K": "i32"},
     dict(SCALE_BLOCKED=True, BLOCK_R=64, BLOCK_K=128)),
    ("quant_dequant_nvfp4_kernel", {"x_ptr": "*bf16", "s_enc_ptr": "*fp32", "w_dec_ptr": "*fp32",
                                    "alpha_ptr": "*fp32", "out_ptr": "*bf16", "M": "i32", "K": "i32",
                                    "stride_xm": "i32"}, dict(BLOCK_M=16, BLOCK_K=128)),
])
def test_dequant_kernels_compile_for_hopper_without_spills(kernel, sig, const):
    import re

    import bwtriton
    dq = importlib.import_module("bwtriton.kernels.nvfp4_dequant")
    res = bwtriton.compile(getattr(dq, kernel), signature=sig, constexprs=const, target="sm_90a", num_warps=4)
    assert not re.search(r"\b(STL|LDL)\b", res.asm["sass"])  # no register spills
    assert re.search(r"st\.global(\.\w+)*\.v4\.b32", res.asm["ptx"])  # 16-byte bf16 stores


# ------------------------------------------------------------------------------------------------------ GPU
def _ref_check():
    return importlib.import_module("test_kernels_blockscaled").assert_close_to_reference


@pytest.mark.gpu
def test_dequantize_kernel_is_exact_for_both_scale_layouts():
    dq = importlib.import_module("bwtriton.kernels.nvfp4_dequant")
    torch.manual_seed(21)
    w = torch.randn(192, 512, device="cuda") * torch.logspace(-5, 2, 512, device="cuda")
    for blocked in (False, True):
        q = quantize_nvfp4(w, blocked=blocked)
        out = dq.dequantize_nvfp4_bf16(q)
        assert torch.equal(out.float().cpu(), e2m1_times_scale(q.to_plain()).cpu())


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 4, 16, 64])
@pytest.mark.parametrize("with_bias,amax", [(False, True), (True, False), (True, True)])
def test_linear_dequant_decode_form(m, with_bias, amax):
    lin = importlib.import_module("bwtriton.kernels.nvfp4_linear")
    torch.manual_seed(22)
    n, k = 512, 2048
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16) if with_bias else None
    gs = None if amax else float(x.float().abs().max()) / 2688 * 1.5
    x_q = quantize_nvfp4(x.float()) if amax else quantize_nvfp4(x.float(), global_scale=gs)
    out = lin.nvfp4_linear(x, w_q, bias, x_global_scale=gs, form="dequant_decode")
    _ref_check()(out, x_q.dequantize(torch.float64), w_q.dequantize(torch.float64), bias)
    other = lin.nvfp4_linear(x, w_q, bias, x_global_scale=gs, form="two_kernel")
    # same products, fp32 sums in another order: within 2 bf16 ulps of each other
    torch.testing.assert_close(out.float(), other.float(), rtol=2 ** -7, atol=1e-3)
    again = lin.nvfp4_linear(x, w_q, bias, x_global_scale=gs, form="dequant_decode")  # plan path
    _ref_check()(again, x_q.dequantize(torch.float64), w_q.dequantize(torch.float64), bias)


def _auto_tuned(seed: int, m: int, n: int, k: int) -> tuple:
    """(nvfp4_linear module, x, w_q, the forms' tuning times) after one auto call on random CUDA inputs."""
    lin = importlib.import_module("bwtriton.kernels.nvfp4_linear")
    torch.manual_seed(seed)
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05)
    lin.nvfp4_linear(x, w_q)
    key = next(key for key in lin.TUNING_LOG if key[1:4] == (lin._m_bucket(m), n, k))
    return lin, x, w_q, lin.TUNING_LOG[key]


@pytest.mark.gpu
def test_linear_auto_considers_dequant_decode_and_graphs_replay_it():
    m, n, k = 8, 1024, 4096
    lin, x, w_q, times = _auto_tuned(23, m, n, k)
    assert "dequant_decode" in times
    graph = torch.cuda.CUDAGraph()
    x2 = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    with torch.cuda.graph(graph):
        captured = lin.nvfp4_linear(x2, w_q)  # amax on the device: capturable
    x2.copy_(x)
    graph.replay()
    _ref_check()(captured, quantize_nvfp4(x.float()).dequantize(torch.float64), w_q.dequantize(torch.float64))


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [{"path": "gemv", "ROWS_PER_THREAD": 2, "SPLIT_K": 4},
                                 {"path": "mma", "BLOCK_N": 32, "SPLIT_K": 2}, {"path": "mma", "SPLIT_K": 1}])
def test_decode_bias_added_once_with_split_k(cfg):
    decode = importlib.import_module("bwtriton.kernels.decode")
    torch.manual_seed(27)
    m, n, k = 3, 256, 4096
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05)
    bias = (torch.randn(n, device="cuda") * 4).to(torch.bfloat16)
    alpha = torch.tensor([0.625], device="cuda")
    full = decode._user_config("t", cfg, m, n, k, torch.cuda.get_device_properties(0).multi_processor_count)
    out, _ = decode._decode("t", x, w_q, full, torch.bfloat16, x.device, alpha, bias)
    w = e2m1_times_scale(w_q.to_plain()).double().cpu()
    _ref_check()(out, x.double().cpu() * 0.625, w, bias)


@pytest.mark.gpu
def test_device_amax_scale_is_bit_equal_to_torch():
    dq = importlib.import_module("bwtriton.kernels.nvfp4_dequant")
    torch.manual_seed(24)
    for shape in ((1, 128), (33, 4096), (64, 8192)):
        x = (torch.randn(shape, device="cuda") * 7).to(torch.bfloat16)
        assert torch.equal(dq.device_encode_scale(x).reshape(()), nvfp4_global_encode_scale(x))


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,blocked", [(256, 256, 512, False), (512, 384, 1024, True)])
def test_nvfp4_matmul_dequant_method(m, n, k, blocked):
    bs = importlib.import_module("bwtriton.kernels.blockscaled")
    torch.manual_seed(25)
    a_q = quantize_nvfp4(torch.randn(m, k, device="cuda"), blocked=blocked)
    b_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.1, blocked=blocked)
    out = bs.nvfp4_matmul(a_q, b_q, method="dequant")
    _ref_check()(out, a_q.dequantize(torch.float64), b_q.dequantize(torch.float64))
    fp32 = bs.nvfp4_matmul(a_q, b_q, torch.float32, method="dequant")
    _ref_check()(fp32, a_q.dequantize(torch.float64), b_q.dequantize(torch.float64), out_bits=22)


if __name__ == "__main__":
    print(json.dumps(run_interpreted()))


@pytest.mark.gpu
@pytest.mark.parametrize("form", ["dequant_decode", "two_kernel", "fused"])
def test_linear_plan_scratch_and_in_kernel_amax_across_calls_and_streams(form):
    """Back-to-back plan calls reuse their stream's intermediates (x_dq/alpha, x_q/scales/S_enc) and compute
    S_enc from amax inside the first kernel (x of 4096 elements): every result still matches its own reference,
    and a call on a second stream gets the same bits as on the first."""
    lin = importlib.import_module("bwtriton.kernels.nvfp4_linear")
    torch.manual_seed(24)
    m, n, k = 8, 256, 512
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05)
    xs = [torch.randn(m, k, device="cuda").to(torch.bfloat16) * (i + 1) for i in range(3)]
    lin.nvfp4_linear(xs[0], w_q, form=form)  # slow path + plan
    outs = [lin.nvfp4_linear(x, w_q, form=form) for x in xs]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        side_out = lin.nvfp4_linear(xs[1], w_q, form=form)
    torch.cuda.synchronize()
    for x, out in zip(xs, outs):
        _ref_check()(out, quantize_nvfp4(x.float()).dequantize(torch.float64), w_q.dequantize(torch.float64))
    assert torch.equal(side_out, outs[1])


# --------------------------------------------------------- 'qdq_decode': x quantized in the frag kernel's prologue
FRAG_CFGS = [{"path": "frag", "TILES_PER_THREAD": 2, "CHUNKS_PER_STEP": 2, "num_warps": 4, "SPLIT_K": 8, "FIXUP": True},
             {"path": "frag", "TILES_PER_THREAD": 4, "CHUNKS_PER_STEP": 2, "num_warps": 4, "SPLIT_K": 32,
              "FIXUP": True}]


@pytest.mark.gpu
@pytest.mark.parametrize("m,cfg,with_bias,amax", [(1, FRAG_CFGS[1], False, True), (4, FRAG_CFGS[0], True, True),
                                                   (16, FRAG_CFGS[0], True, False), (16, FRAG_CFGS[1], False, False)],
                         ids=["m1-split32-amax", "m4-split8-amax-bias", "m16-split8-bias", "m16-split32"])
def test_linear_qdq_decode_matches_the_two_launch_form(m, cfg, with_bias, amax):
    """One launch (quantize-dequantize of x in the prologue, split-K reduced in the launch) against the separate
    quantize-dequantize kernel + the same frag config: the same bf16 x values, so the outputs differ only by the
    order of the split-K atomics (within 2 bf16 ulps), and both are within the reference bound."""
    decode = importlib.import_module("bwtriton.kernels.decode")
    dq = importlib.import_module("bwtriton.kernels.nvfp4_dequant")
    torch.manual_seed(40 + m)
    n, k = 1024, 8192 if m == 1 else 4096
    x = (torch.randn(m, k, device="cuda") * 2).to(torch.bfloat16)
    assert not amax or x.numel() <= dq.IN_KERNEL_AMAX_MAX_ELEMENTS  # S_enc from amax(x) inside the kernel
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16) if with_bias else None
    gs = None if amax else float(x.float().abs().max()) / 2688 * 1.5
    s_enc = None if amax else 1.0 / torch.tensor([gs], device="cuda")
    w_dec = decode.decode_scale_arg(w_q, x.device)
    out, launch = decode.decode_qdq(x, w_q, s_enc, w_dec, bias, cfg, x.device)
    xd, alpha, _ = dq.quant_dequant_nvfp4(x, s_enc, w_dec)
    two, _ = decode._decode("t", xd, w_q, cfg, torch.bfloat16, x.device, alpha, bias)
    torch.testing.assert_close(out.float(), two.float(), rtol=2 ** -7, atol=1e-3)
    x_q = quantize_nvfp4(x.float()) if amax else quantize_nvfp4(x.float(), global_scale=gs)
    _ref_check()(out, x_q.dequantize(torch.float64), w_q.dequantize(torch.float64), bias)
    fw = importlib.import_module("bwtriton.kernels._decode_frag").frag_weight(w_q)
    for _ in range(3):  # the scratch is back to zero after each launch: replays agree
        torch.testing.assert_close(launch.run(x, fw, w_dec, bias, s_enc).float(), out.float(), rtol=2 ** -7,
                                   atol=1e-3)


@pytest.mark.gpu
def test_linear_qdq_decode_split_one_is_bit_equal_to_the_two_launch_form():
    """Without split-K the summation order is fixed: bit-equal outputs."""
    decode = importlib.import_module("bwtriton.kernels.decode")
    dq = importlib.import_module("bwtriton.kernels.nvfp4_dequant")
    torch.manual_seed(44)
    m, n, k = 7, 512, 1024
    cfg = {"path": "frag", "TILES_PER_THREAD": 1, "CHUNKS_PER_STEP": 2, "num_warps": 8, "SPLIT_K": 1}
    x = (torch.randn(m, k, device="cuda") * 2).to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    w_dec = decode.decode_scale_arg(w_q, x.device)
    out, _ = decode.decode_qdq(x, w_q, None, w_dec, bias, cfg, x.device)
    xd, alpha, _ = dq.quant_dequant_nvfp4(x, None, w_dec)
    two, _ = decode._decode("t", xd, w_q, cfg, torch.bfloat16, x.device, alpha, bias)
    assert torch.equal(out, two)


@pytest.mark.gpu
def test_linear_auto_times_qdq_decode_and_graphs_replay_it():
    m, n, k = 1, 2048, 4096
    lin, x, w_q, times = _auto_tuned(45, m, n, k)
    assert any(name.startswith("qdq_decode frag") for name in times)
    out = lin.nvfp4_linear(x, w_q, form="qdq_decode")
    graph = torch.cuda.CUDAGraph()
    x2 = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    with torch.cuda.graph(graph):
        captured = lin.nvfp4_linear(x2, w_q, form="qdq_decode")
    x2.copy_(x)
    for _ in range(2):
        graph.replay()
        torch.testing.assert_close(captured.float(), out.float(), rtol=2 ** -7, atol=1e-3)
    _ref_check()(captured, quantize_nvfp4(x.float()).dequantize(torch.float64), w_q.dequantize(torch.float64))
