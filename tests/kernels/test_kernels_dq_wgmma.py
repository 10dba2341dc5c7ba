"""The shared-memory decode NVFP4 GEMM (`kernels.dq_wgmma`): sm_90a code generation on the CPU, the weight repack,
config validation, and numerics on a GPU.

What is pinned: both wgmma operands come from shared memory (x by TMA, the weight's words by TMA and decoded by the
CTA's own threads into a bf16 buffer, 16-byte shared stores), no cp.async in the loop, the loop keeps one wgmma
group in flight, and no candidate spills. Products are exact (e2m1 * e4m3 in bf16, bf16 x bf16 in fp32), so one-hot
activations give the dequantized weight bit for bit; general inputs are held to `assert_close_to_reference` (fp32
accumulation over K plus one rounding to the output type). K is never split, so two runs are bit-equal.
"""
from __future__ import annotations

import importlib
import re

import pytest
import torch
from triton.experimental.gluon import language as gl

import bwtriton
from bwtriton.errors import InputError
from bwtriton.formats import from_blocked_scales, quantize_nvfp4
from test_kernels_blockscaled import assert_close_to_reference
from test_kernels_gluon_mixed import _hopper, _one_hot_weight, check_bias_and_replay, check_refused_off_hopper

dq = importlib.import_module("bwtriton.kernels.dq_wgmma")
ws = importlib.import_module("bwtriton.kernels.dq_wgmma_ws")
frag = importlib.import_module("bwtriton.kernels._decode_frag")
decode = importlib.import_module("bwtriton.kernels.decode")


def _compile_signature(block_m: int, block_n: int) -> dict:
    layout = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    p32 = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
    return {"x_desc": f"tensordesc<bf16[{block_m}, 64],{layout!r}>",
            "w_desc": f"tensordesc<i32[{block_n}, 8],{p32!r}>", "s_desc": f"tensordesc<i32[1, {block_n}],{p32!r}>",
            "out_ptr": "*bf16", "alpha_ptr": "*fp32", "bias_ptr": "*bf16", "table_ptr": "*i32", "M": "i32",
            "N": "i32", "K": "i32", "stride_om": "i32"}


def _compile(block_m: int, block_n: int, stages: int):
    sig = _compile_signature(block_m, block_n)
    return bwtriton.compile(dq.dq_wgmma_kernel, signature=sig, target="sm_90a", num_warps=8, num_stages=1,
                            constexprs=dict(BLOCK_M=block_m, BLOCK_N=block_n, STAGES=stages, GROUP_M=dq.GROUP_M),
                            divisible_by_16=[a for a in sig if not a.endswith("desc") and a != "M"])


def _loops(sass: str) -> list[str]:
    """The SASS of every loop (a backward branch's body)."""
    out = []
    for back in re.finditer(r"@!?P\d BRA (?:`\()?(\.?L_x_\d+|LBB\d+)", sass):
        start = sass.find(back.group(1) + ":")
        if 0 <= start < back.start():
            out.append(sass[start:back.end()])
    return out


def _loop(sass: str) -> str:
    """The SASS of the main K loop: the loop whose body holds the wgmmas."""
    loop = next((lp for lp in _loops(sass) if "HGMMA" in lp), None)
    assert loop is not None, "no K loop with wgmmas in the SASS"
    return loop


# --------------------------------------------------------------------------------------------- sm_90a (CPU)

@pytest.mark.parametrize("block_m,block_n,stages", sorted({(c["BLOCK_M"], c["BLOCK_N"], c["STAGES"])
                                                            for c in dq.dq_candidates(1024, 4096, 4096)
                                                            if not c["DEC"]}))
def test_both_operands_from_shared_memory_one_group_in_flight_no_spills(block_m, block_n, stages):
    res = _compile(block_m, block_n, stages)
    sass, ptx = res.asm["sass"], res.asm["ptx"]
    assert not re.search(r"\b(STL|LDL)\b", sass)
    wgmma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.bf16\.bf16\s+\{[^}]*\},\s*%rd\d+,"
                       r"\s*%rd\d+", ptx)
    assert wgmma and {int(n) for n in wgmma} == {block_n}  # A and B are both shared-memory descriptors
    loop = _loop(sass)
    # per K step and warpgroup: BLOCK_M / 128 row blocks x 4 k16 steps
    assert loop.count("HGMMA.64x%dx16" % block_n) == 4 * block_m // 128
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in loop and "DEPBAR.LE gsb0, 0x0" not in loop
    # x, the weight words and the scale words by TMA, waited on the step's mbarrier; no cp.async (the fence that
    # publishes the decoded tile would wait for it) and no other global load
    assert loop.count("UTMALDG.2D") == 3 and "SYNCS.PHASECHK" in loop
    assert not re.search(r"\b(LDGSTS|LDG)\b", loop) and "LDS.128" in loop
    # the decoded tile: 16-byte stores, BLOCK_N * 64 bf16 over 256 threads
    assert loop.count("STS.128") == block_n * 64 * 2 // (16 * 256)
    assert loop.count("HMUL2.BF16") == block_n * 64 // (2 * 256)       # one scale multiply per bf16 pair


def _compile_ws(block_m: int, block_n: int, stages: int, dec: int):
    sig = _compile_signature(block_m, block_n)
    return bwtriton.compile(ws.dq_ws_kernel, signature=sig, target="sm_90a", num_warps=8, num_stages=1,
                            maxnreg=ws.MAXNREG,
                            constexprs=dict(BLOCK_M=block_m, BLOCK_N=block_n, STAGES=stages, GROUP_M=dq.GROUP_M,
                                            DEC=dec),
                            divisible_by_16=[a for a in sig if not a.endswith("desc") and a != "M"])


@pytest.mark.parametrize("block_m,block_n,stages,dec", sorted({(c["BLOCK_M"], c["BLOCK_N"], c["STAGES"], c["DEC"])
                                                                for c in dq.dq_candidates(1024, 4096, 4096)
                                                                if c["DEC"]}))
def test_warp_specialized_form_keeps_decode_and_mma_in_separate_loops(block_m, block_n, stages, dec):
    res = _compile_ws(block_m, block_n, stages, dec)
    sass, ptx = res.asm["sass"], res.asm["ptx"]
    assert not re.search(r"\b(STL|LDL)\b", sass)
    # 16 warps; the decode warpgroup gets DECODE_REGS, the TMA warp's the least, the MMA warpgroups the rest
    assert ".reqntid 512" in ptx and f".maxnreg {ws.MAXNREG}" in ptx
    regs = {int(r) for r in re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+);", ptx)}
    mma_regs = (65536 - 128 * (ws.LOAD_REGS.value + ws.DECODE_REGS.value)) // 256
    assert {ws.LOAD_REGS.value, ws.DECODE_REGS.value, mma_regs} <= regs
    loops = _loops(sass)
    mma = [lp for lp in loops if "HGMMA" in lp]
    dec_loops = [lp for lp in loops if "HMUL2.BF16" in lp]
    tma = [lp for lp in loops if "UTMALDG.2D" in lp]
    assert len(mma) == len(dec_loops) == len(tma) == 1
    mma, dec_loop, tma = mma[0], dec_loops[0], tma[0]
    # the MMA loop: wgmmas on two shared-memory operands, one group in flight, no decode, no copies
    assert mma.count("HGMMA.64x%dx16" % block_n) == 4 * block_m // 128
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in mma
    assert not re.search(r"\b(STS|LDS|UTMALDG|HMUL2)", mma)
    # the decode loop: the whole tile over one warpgroup (128 threads), 16-byte stores, its fence; no wgmma
    assert dec_loop.count("STS.128") == block_n * 64 * 2 // (16 * 128)
    assert dec_loop.count("HMUL2.BF16") == block_n * 64 // (2 * 128)
    assert "MEMBAR" in dec_loop or "FENCE.VIEW.ASYNC.S" in dec_loop
    assert "HGMMA" not in dec_loop and "UTMALDG" not in dec_loop
    # the TMA loop: the step's three copies
    assert tma.count("UTMALDG.2D") == 3 and "HGMMA" not in tma


# ----------------------------------------------------------------------------------------------- repack (CPU)

def test_repack_puts_each_code_and_sign_where_the_decode_reads_them():
    w_q = quantize_nvfp4(torch.randn(32, 256, generator=torch.Generator().manual_seed(0)), blocked=True)
    dw = dq.dq_weight_of(w_q.data, w_q.scales, w_q.scale_layout, (32, 256))
    assert dw.words.shape == (32, 32) and dw.scales.shape == (32, 4)
    assert dq.dq_weight_of(w_q.data, w_q.scales, w_q.scale_layout, (32, 256)) is dw  # cached
    codes = torch.stack((w_q.data & 15, w_q.data >> 4), dim=-1).reshape(32, 256).to(torch.int64)
    u = dw.words.to(torch.int64) & 0xFFFFFFFF
    for s in range(8):
        got = ((u >> (4 * s)) & 7) | (((u >> frag.SIGN_BITS[s]) & 1) << 3)
        assert torch.equal(got, codes[:, s::8])
    sb = dw.scales.to(torch.int64) & 0xFFFFFFFF
    scale_bytes = torch.stack([(sb >> (8 * b)) & 0xFF for b in range(4)], dim=-1).reshape(32, 16)
    assert torch.equal(scale_bytes, from_blocked_scales(w_q.scales, 32, 16).view(torch.uint8).to(torch.int64))


# ------------------------------------------------------------------------------------------- validation (CPU)

def test_config_validation_names_the_problem():
    cfg = dq.dq_candidates(1024, 4096, 4096)[0]
    with pytest.raises(InputError, match="BLOCK_M must be 128 or 256"):
        dq.check_dq_config("op", dict(cfg, BLOCK_M=64), 1024, 4096, 4096)
    with pytest.raises(InputError, match="128 accumulator registers"):
        dq.check_dq_config("op", dict(cfg, BLOCK_M=256, BLOCK_N=256), 1024, 4096, 4096)
    with pytest.raises(InputError, match="STAGES must be 2 .. 6"):
        dq.check_dq_config("op", dict(cfg, STAGES=8), 1024, 4096, 4096)
    with pytest.raises(InputError, match="SPLIT_K must be 1"):
        dq.check_dq_config("op", dict(cfg, SPLIT_K=2), 1024, 4096, 4096)
    with pytest.raises(InputError, match=r"DEC \(bf16 buffers of the warp-specialized form\)"):
        dq.check_dq_config("op", dict(cfg, DEC=3, BLOCK_M=128, BLOCK_N=256), 1024, 4096, 4096)
    with pytest.raises(InputError, match="DEC"):
        dq.check_dq_config("op", dict(cfg, DEC=1), 1024, 4096, 4096)
    dq.check_dq_config("op", dict(cfg, DEC=3, BLOCK_M=256, BLOCK_N=128, STAGES=4), 1024, 4096, 4096)
    with pytest.raises(InputError, match="N must be a multiple of BLOCK_N"):
        dq.check_dq_config("op", cfg, 1024, 4096 + 64, 4096)
    assert decode._user_config("op", {"path": "dq_wgmma"}, 300, 4096, 4096, 132)["BLOCK_M"] in (128, 256)
    with pytest.raises(InputError, match="dq_wgmma path needs N % 128"):
        decode._user_config("op", {"path": "dq_wgmma"}, 300, 4096 + 64, 4096, 132)


def test_tuner_offers_it_on_hopper_from_min_m():
    def paths(m, hopper=True):
        return {c["path"] for c in decode.decode_candidates(m, 4096, 4096, 132, hopper=hopper)}
    assert "dq_wgmma" in paths(dq.MIN_M) and "dq_wgmma" in paths(8192)
    assert "dq_wgmma" not in paths(dq.MIN_M - 1) and "dq_wgmma" not in paths(1024, hopper=False)


# ------------------------------------------------------------------------------------------------------ GPU

def _configs(m: int, n: int, k: int) -> list[dict]:
    extra = [{"path": "dq_wgmma", "BLOCK_M": 128, "BLOCK_N": 128, "STAGES": 2, "SPLIT_K": 1}]
    return dq.dq_candidates(max(m, dq.MIN_M), n, k) + extra


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="wgmma and TMA: sm_90a")
@pytest.mark.parametrize("m", [1, 200, 256, 700])
def test_gpu_one_hot_rows_pick_weights_exactly(m):
    n, k = 512, 2048
    w_q = _one_hot_weight(n, k)
    cols = torch.arange(m) * 37 % k
    x = torch.zeros(m, k, device="cuda", dtype=torch.bfloat16)
    x[torch.arange(m), cols.cuda()] = 1.0
    ref = w_q.dequantize(torch.float64)[:, cols.cuda()].T.cpu()
    for cfg in _configs(m, n, k):
        out = decode.nvfp4_decode_matmul(x, w_q, out_dtype=torch.float32, config=cfg)
        assert torch.equal(out.double().cpu(), ref), cfg


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="wgmma and TMA: sm_90a")
@pytest.mark.parametrize("m,blocked", [(256, False), (1000, True), (2048, False)])
def test_gpu_every_config_is_close_and_deterministic(m, blocked):
    torch.manual_seed(11)
    n, k = 1024, 4096
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05, blocked=blocked)
    ref_w = w_q.dequantize(torch.float64)
    for cfg in _configs(m, n, k):
        out = decode.nvfp4_decode_matmul(x, w_q, config=cfg)
        assert_close_to_reference(out, x.double(), ref_w)
        assert torch.equal(out, decode.nvfp4_decode_matmul(x, w_q, config=cfg))


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="wgmma and TMA: sm_90a")
def test_gpu_bias_strided_x_and_replay():
    torch.manual_seed(5)
    m, n, k = 384, 1024, 2048
    xs = torch.randn(m, k + 64, device="cuda").to(torch.bfloat16)
    x = xs[:, :k]                                                      # row stride K + 64: TMA takes it as is
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    plain, ws_cfg = (next(c for c in dq.dq_candidates(m, n, k) if bool(c["DEC"]) == w) for w in (False, True))
    check_bias_and_replay(dq.launch_dq, plain, x, w_q, bias)
    check_bias_and_replay(dq.launch_dq, ws_cfg, x, w_q, bias)


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="wgmma and TMA: sm_90a")
@pytest.mark.parametrize("m", [300, 2048])
def test_gpu_warp_specialized_form_equals_the_one_partition_kernel(m):
    """Same tiles, decode and wgmma order: bit-equal outputs, whatever the ring depths."""
    torch.manual_seed(3)
    n, k = 1024, 4096
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05)
    for cfg in (c for c in dq.dq_candidates(m, n, k) if c["DEC"]):
        out = decode.nvfp4_decode_matmul(x, w_q, out_dtype=torch.float32, config=cfg)
        one = decode.nvfp4_decode_matmul(x, w_q, out_dtype=torch.float32, config=dict(cfg, DEC=0, STAGES=3))
        assert torch.equal(out, one), cfg


@pytest.mark.emulated
@pytest.mark.skipif(torch.cuda.is_available(), reason="the emulated B200 takes CPU tensors only on a CPU machine")
def test_explicit_dq_wgmma_on_a_non_hopper_device_is_refused():
    check_refused_off_hopper("dq_wgmma", 256, "dequant_gemm")
