"""The mixed-input NVFP4 GEMM (`kernels.mixed_gemm`): sm_90a code generation (CPU compile), the same kernel on the
emulated B200 (CPU), and numerics on a GPU.

What is pinned: on sm_90a the dequantized weight is wgmma's *register* A operand (`{%r..}` A, a descriptor B),
with the weight bytes read from shared memory as 16-byte vectors (the MMA K order, `_mma_k_order`); products are
exact (e2m1 * e4m3 in bf16, bf16 x bf16 in fp32), so one-hot activations give the dequantized weight bit for bit,
and with a split K the in-kernel reduction sums the slices in a fixed order (two runs are bit-equal). General
inputs are checked with `assert_close_to_reference` (fp32 accumulation + one bf16 rounding).
"""
from __future__ import annotations

import importlib
import re

import pytest
import torch

import bwtriton
from bwtriton.formats import QuantizedTensor, quantize_nvfp4
from test_kernels_blockscaled import assert_close_to_reference

mixed = importlib.import_module("bwtriton.kernels.mixed_gemm")
decode = importlib.import_module("bwtriton.kernels.decode")
linear = importlib.import_module("bwtriton.kernels.nvfp4_linear")

_SIG = {"x_ptr": "*bf16", "w_ptr": "*u8", "ws_ptr": "*fp8e4nv", "out_ptr": "*bf16", "scale_ptr": "*fp32",
        "w_dec_ptr": "*fp32", "bias_ptr": "*bf16", "work_ptr": "*fp32", "count_ptr": "*i32", "M": "i32",
        "N": "i32", "K": "i32", "stride_xm": "i32", "stride_om": "i32"}


def _compile(block_m: int, quant_x: bool = False, k_order: bool = True, split: int = 1):
    const = dict(SCALE_BLOCKED=False, BLOCK_N=64, BLOCK_M=block_m, BLOCK_K=128, SPLIT=split > 1, QUANT_X=quant_x,
                 K_ORDER=k_order)
    return bwtriton.compile(mixed.nvfp4_mixed_gemm_kernel, signature=_SIG, constexprs=const, target="sm_90a",
                            num_warps=4, num_stages=3, divisible_by_16=[a for a in _SIG if a != "M"])


# --------------------------------------------------------------------------------------------- sm_90a (CPU)

@pytest.mark.parametrize("block_m,quant_x", [(16, False), (16, True), (64, False)])
def test_weight_is_the_register_a_operand_of_wgmma(block_m, quant_x):
    ptx = _compile(block_m, quant_x).asm["ptx"]
    wgmma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.bf16\.bf16\s+\{[^}]*\},\s*"
                       r"\{(%r\d+),\s*%r\d+,\s*%r\d+,\s*%r\d+\},\s*%rd\d+", ptx)
    assert wgmma, "expected wgmma with four A registers and a shared-memory descriptor for B"
    assert {int(n) for n, _ in wgmma} == {block_m}  # the activation tile is the N side: no padding to 64 rows


def test_mma_k_order_turns_byte_loads_into_vector_loads():
    """Natural K order: every weight byte is its own ld.shared.b8 (a thread's fragment bytes are 4 apart);
    in the MMA K order the weight tile comes out of shared memory in 16-byte loads."""
    natural, ordered = (_compile(16, k_order=o).asm["ptx"] for o in (False, True))
    assert natural.count("ld.shared.b8") >= 32
    assert ordered.count("ld.shared.b8") <= 8  # what is left: the scale bytes
    assert ordered.count("ld.shared.v4.b32") >= 2


def test_split_k_reduces_in_kernel_with_a_release_acquire_counter():
    ptx = _compile(16, split=4).asm["ptx"]
    assert re.search(r"atom\.global\.gpu\.acq_rel\.add\.[su]32", ptx)
    assert "red.global.add.f32" not in ptx and "atom.global.add.f32" not in ptx  # no fp32 atomics


def test_candidates_tile_and_cover_every_m():
    for m in (1, 16, 17, 64, 65, 200, 4096):
        for n, k in ((4096, 4096), (7168, 2048), (192, 256)):
            cands = mixed.mixed_candidates(m, n, k)
            assert cands, (m, n, k)
            for cfg in cands:
                assert mixed.mixed_tiles(cfg, m, n, k) and cfg["BLOCK_M"] >= min(m, 16)
                assert cfg["BLOCK_M"] <= max(16, 2 * m)


def test_decode_tuner_offers_wgmma_past_the_frag_range():
    assert not any(c["path"] == "wgmma" for c in decode.decode_candidates(16, 4096, 4096))
    assert any(c["path"] == "wgmma" for c in decode.decode_candidates(17, 4096, 4096))
    large = decode.decode_candidates(1024, 4096, 4096)
    # past MAX_DECODE_M: the GEMMs for any M (on Hopper also the shared-memory decode GEMM)
    assert {c["path"] for c in large} == {"wgmma", "dequant_gemm", "dq_wgmma"}
    assert {c["path"] for c in decode.decode_candidates(1024, 4096, 4096, hopper=False)} == {"wgmma", "dequant_gemm"}
    assert decode.default_config(300, 4096, 4096)["path"] == "wgmma"


def test_linear_default_form_without_native_nvfp4_mma():
    assert linear.default_form(16, 384, False) == "mixed"
    assert linear.default_form(4096, 4096, False) == "dequant_gemm"
    assert linear.default_form(16, 4096, True) == "fused"


# ------------------------------------------------------------------------------------ emulated B200 (CPU)

def _one_hot_weight(n: int, k: int, device) -> QuantizedTensor:
    """Every byte value in every row, scales down to the UE4M3 subnormals."""
    g = torch.Generator().manual_seed(7)
    data = torch.stack([torch.randperm(256, generator=g)[torch.arange(k // 2) % 256] for _ in range(n)])
    scales = torch.randint(0, 0x7F, (n, k // 16), generator=g, dtype=torch.uint8)  # 0x7F is NaN
    return QuantizedTensor(data=data.to(torch.uint8).to(device), scales=scales.view(torch.float8_e4m3fn).to(device),
                           scale_layout="plain", global_scale=torch.tensor(0.75, device=device), format="nvfp4",
                           shape=(n, k))


def _cfg(block_m: int, split: int, block_k: int = 64) -> dict:
    return {"path": "wgmma", "BLOCK_N": 64, "BLOCK_M": block_m, "BLOCK_K": block_k, "SPLIT_K": split,
            "num_warps": 4, "num_stages": 2, "K_ORDER": True}


@pytest.mark.emulated
@pytest.mark.emulated
@pytest.mark.usefixtures("emulated_b200_module")
@pytest.mark.parametrize("split", [1, 4])
def test_emulated_one_hot_rows_pick_weights_exactly(split):
    n, k = 64, 512
    w_q = _one_hot_weight(n, k, "cpu")
    cols = torch.tensor([0, 3, 130, 511])
    x = torch.zeros(4, k, dtype=torch.bfloat16)
    x[torch.arange(4), cols] = 1.0
    out = decode.nvfp4_decode_matmul(x, w_q, out_dtype=torch.float32, config=_cfg(16, split))
    assert torch.equal(out.double(), w_q.dequantize(torch.float64)[:, cols].T)


@pytest.mark.emulated
@pytest.mark.emulated
@pytest.mark.usefixtures("emulated_b200_module")
def test_emulated_split_k_is_deterministic_and_close():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(20, 512, generator=g).to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(128, 512, generator=g) * 0.05)
    cfg = _cfg(32, 4)
    first = decode.nvfp4_decode_matmul(x, w_q, out_dtype=torch.float32, config=cfg)
    second = decode.nvfp4_decode_matmul(x, w_q, out_dtype=torch.float32, config=cfg)
    assert torch.equal(first, second)  # counters were reset; slices summed in the same order
    assert_close_to_reference(first, x.double(), w_q.dequantize(torch.float64), out_bits=20)


@pytest.mark.emulated
@pytest.mark.emulated
@pytest.mark.usefixtures("emulated_b200_module")
@pytest.mark.parametrize("calibrated", [True, False])
def test_emulated_linear_mixed_form_quantizes_x_in_the_prologue(calibrated, monkeypatch):
    """One launch: x quantized with the `formats.quantize_nvfp4` recipe inside the GEMM (calibrated scale, or
    S_enc from amax(x) in every program), bias in the epilogue."""
    monkeypatch.setenv("BWTRITON_LINEAR_TUNE", "0")
    g = torch.Generator().manual_seed(2)
    m, n, k = 3, 128, 512
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, generator=g) * 0.05)
    bias = torch.randn(n, generator=g).to(torch.bfloat16)
    gs = float(x.float().abs().max()) / 2688 if calibrated else None
    launches = mixed._LAUNCHER.jit_launches
    out = linear.nvfp4_linear(x, w_q, bias, x_global_scale=gs, form="mixed")
    assert mixed._LAUNCHER.jit_launches == launches + 1
    x_q = quantize_nvfp4(x.float(), global_scale=gs) if calibrated else quantize_nvfp4(x.float())
    assert_close_to_reference(out, x_q.dequantize(torch.float64), w_q.dequantize(torch.float64), bias)


# ------------------------------------------------------------------------------------------------------ GPU

@pytest.mark.gpu
@pytest.mark.parametrize("split", [1, 8])
def test_gpu_one_hot_rows_pick_weights_exactly(split):
    n, k = 128, 2048
    w_q = _one_hot_weight(n, k, "cuda")
    cols = torch.tensor([0, 17, 1030, 2047])
    x = torch.zeros(4, k, device="cuda", dtype=torch.bfloat16)
    x[torch.arange(4), cols.cuda()] = 1.0
    out = decode.nvfp4_decode_matmul(x, w_q, out_dtype=torch.float32, config=_cfg(16, split, 128))
    assert torch.equal(out.double().cpu(), w_q.dequantize(torch.float64)[:, cols.cuda()].T.cpu())


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 64, 200, 1024])
def test_gpu_every_wgmma_candidate_is_correct(m):
    torch.manual_seed(11)
    n, k = 512, 4096
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05, blocked=m == 200)
    ref_w = w_q.dequantize(torch.float64)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for cfg in [c for c in decode.decode_candidates(m, n, k, sms) if c["path"] in ("wgmma", "dequant_gemm")]:
        out = decode.nvfp4_decode_matmul(x, w_q, config=cfg)
        assert_close_to_reference(out, x.double(), ref_w)
        again = decode.nvfp4_decode_matmul(x, w_q, config=cfg)
        assert torch.equal(out, again)  # split-K slices are summed in a fixed order


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 64, 300])
@pytest.mark.parametrize("form", ["auto", "mixed", "dequant_decode", "dequant_gemm"])
def test_gpu_linear_forms(m, form):
    torch.manual_seed(13)
    n, k = 512, 1024
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    ref_a = quantize_nvfp4(x.float()).dequantize(torch.float64)
    out = linear.nvfp4_linear(x, w_q, bias, form=form)
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    assert_close_to_reference(out, ref_a, w_q.dequantize(torch.float64), bias)
    again = linear.nvfp4_linear(x, w_q, bias, form=form)  # plan path (or the same launches again)
    if form in ("mixed", "dequant_gemm"):  # a fixed summation order: the same bits
        torch.testing.assert_close(again, out, rtol=0, atol=0)
    else:  # the decode config the tuner keeps may add its split-K slices with fp32 atomics (arrival order)
        assert_close_to_reference(again, ref_a, w_q.dequantize(torch.float64), bias)


@pytest.mark.gpu
def test_gpu_mixed_form_replays_in_a_cuda_graph():
    torch.manual_seed(14)
    n, k = 1024, 2048
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05)
    x = torch.randn(8, k, device="cuda").to(torch.bfloat16)
    gs = float(x.float().abs().max()) / 2688
    linear.nvfp4_linear(x, w_q, x_global_scale=gs, form="mixed")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = linear.nvfp4_linear(x, w_q, x_global_scale=gs, form="mixed")
    x2 = (torch.randn(8, k, device="cuda") * 0.5).to(torch.bfloat16)
    x.copy_(x2)
    graph.replay()
    graph.replay()  # the split-K counters are back at zero after each replay
    ref_a = quantize_nvfp4(x2.float(), global_scale=gs).dequantize(torch.float64)
    assert_close_to_reference(captured, ref_a, w_q.dequantize(torch.float64))


@pytest.mark.emulated
@pytest.mark.emulated
@pytest.mark.usefixtures("emulated_b200_module")
def test_emulated_dequant_gemm_path_and_its_replay(monkeypatch):
    """The weight dequantized to bf16 + kernels.matmul (a decode-tuner path from M = 64): the direct call and the
    replay a plan keeps (which holds no launch entry), with a bias added before the one rounding to bf16. The
    GEMM config is pinned: autotuning would time every candidate on the emulator."""
    import functools
    from bwtriton.kernels import GemmConfig, matmul
    monkeypatch.setattr(decode, "matmul", functools.partial(matmul, config=GemmConfig(128, 128, 64, 2, 4)))
    g = torch.Generator().manual_seed(5)
    m, n, k = 64, 128, 256
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, generator=g) * 0.05)
    bias = torch.randn(n, generator=g).to(torch.bfloat16)
    ref_w = w_q.dequantize(torch.float64)
    out = decode.nvfp4_decode_matmul(x, w_q, config={"path": "dequant_gemm"})
    assert_close_to_reference(out, x.double(), ref_w)
    replay = decode.make_replay(w_q, {"path": "dequant_gemm", "SPLIT_K": 1}, None, m, torch.bfloat16, x.device)
    again = replay(x, w_q.global_scale.float().reshape(1), bias)
    assert_close_to_reference(again, x.double(), ref_w, bias)


@pytest.mark.emulated
@pytest.mark.emulated
@pytest.mark.usefixtures("emulated_b200_module")
def test_emulated_linear_dequant_gemm_form_rounds_once(monkeypatch):
    import functools
    from bwtriton.kernels import GemmConfig, matmul
    monkeypatch.setattr(linear, "matmul", functools.partial(matmul, config=GemmConfig(128, 128, 64, 2, 4)))
    g = torch.Generator().manual_seed(6)
    m, n, k = 64, 128, 256
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, generator=g) * 0.05)
    bias = torch.randn(n, generator=g).to(torch.bfloat16)
    out = linear.nvfp4_linear(x, w_q, bias, form="dequant_gemm")
    ref_a = quantize_nvfp4(x.float()).dequantize(torch.float64)
    assert_close_to_reference(out, ref_a, w_q.dequantize(torch.float64), bias)


@pytest.mark.emulated
@pytest.mark.emulated
@pytest.mark.usefixtures("emulated_b200_module")
def test_decode_small_m_paths_refuse_large_m_naming_the_alternatives():
    from bwtriton.errors import InputError
    w_q = quantize_nvfp4(torch.randn(128, 256) * 0.05)
    with pytest.raises(InputError, match="takes M <= 64.*'wgmma'"):
        decode.nvfp4_decode_matmul(torch.randn(65, 256).to(torch.bfloat16), w_q, config={"path": "mma"})
