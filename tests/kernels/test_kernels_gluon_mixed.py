"""The Gluon mixed-input NVFP4 GEMM (`kernels.gluon_mixed`): sm_90a code generation on the CPU, the natural-k
weight repack, config validation, and numerics on a GPU and (the same test bodies, fewer cases) on the emulated
H200.

What is pinned: the decoded weight is wgmma's *register* A operand and the loop keeps one wgmma group in flight
(`wgmma.wait_group 1` before the loop's back edge); a thread's weight words come in 16-byte loads; no tuner
candidate spills. Products are exact (e2m1 * e4m3 in bf16, bf16 x bf16 in fp32), so one-hot activations give the
dequantized weight bit for bit; general inputs are held to `assert_close_to_reference` (fp32 accumulation over K
plus one rounding to the output type); split-K slices are summed in a fixed order (two runs are bit-equal).
"""
from __future__ import annotations

import importlib
import re

import pytest
import torch
from triton.experimental.gluon import language as gl

import bwtriton
from bwtriton.errors import InputError
from bwtriton.formats import QuantizedTensor, quantize_nvfp4
from bwtriton.kernels._tiles import swap_ab_block_m
from test_kernels_blockscaled import assert_close_to_reference

gm = importlib.import_module("bwtriton.kernels.gluon_mixed")
frag = importlib.import_module("bwtriton.kernels._decode_frag")
decode = importlib.import_module("bwtriton.kernels.decode")

_SIG = {"x_ptr": "*i32", "w_ptr": "*i32", "s_ptr": "*i32", "out_ptr": "*bf16", "alpha_ptr": "*fp32",
        "bias_ptr": "*bf16", "table_ptr": "*i32", "work_ptr": "*fp32", "count_ptr": "*i32", "M": "i32",
        "N": "i32", "K": "i32", "stride_xm": "i32", "stride_om": "i32"}


def _compile(block_n: int, block_m: int, block_k: int, warps: int, split: bool = False, stages: int = 0,
             x_tma: bool = False, sum_in_kernel: bool = True):
    const = dict(BLOCK_N=block_n, BLOCK_M=block_m, BLOCK_K=block_k, SPLIT=split, STAGES=stages,
                 SUM_IN_KERNEL=sum_in_kernel)
    sig = dict(_SIG)
    if x_tma:
        layout = gl.NVMMASharedLayout(swizzle_byte_width=min(128, 2 * block_k), element_bitwidth=16, rank=2)
        sig["x_desc"] = f"tensordesc<bf16[{block_m}, {block_k}],{layout!r}>"
    else:
        const["x_desc"] = None
    return bwtriton.compile(gm.gluon_mixed_kernel, signature=sig, constexprs=const, target="sm_90a",
                            num_warps=warps, num_stages=1,
                            divisible_by_16=[a for a in sig if a != "M" and not a.endswith("desc")])


def _loop(sass: str) -> str:
    """The SASS of the main K loop (between its label and its back edge)."""
    start = sass.index("LBB1:")
    return sass[start:sass.index("BRA LBB1", start)]


def _dest_regs(line: str) -> set[int]:
    """Registers an instruction writes (its first operand), widened for 64/128-bit results."""
    body = line.split("\t", 1)[-1].strip().rstrip(";")
    body = re.sub(r"^@!?U?P\w+\s+", "", body)
    m = re.match(r"([A-Z0-9_.]+)\s+(R\d+)\b", body)
    if not m or m.group(1).startswith(("HGMMA", "STS", "STG", "ST.", "RED", "BAR", "WARPGROUP")):
        return set()
    op, base = m.group(1), int(m.group(2)[1:])
    width = 4 if ".128" in op else 2 if (".64" in op or op.startswith(("CS2R", "IMAD.WIDE", "LEA.HI.X.64"))) else 1
    return set(range(base, base + width))


def wgmma_register_hazards(loop: str) -> list[str]:
    """Instructions of a K loop's SASS that write an A register of an HGMMA group before the second
    `WARPGROUP.DEPBAR.LE gsb0, 0x1` after it (the first wait that proves that group complete), the loop taken
    as circular (the back edge leads to its top)."""
    lines = [ln for ln in loop.splitlines() if "\t" in ln]
    groups, current = [], None
    for i, ln in enumerate(lines):
        if "HGMMA" in ln:
            a = int(re.search(r"HGMMA\.\S+\s+R\d+,\s+R(\d+)", ln).group(1))
            if current is None:
                current = (i, set())
                groups.append(current)
            current[1].update(range(a, a + 4))
        elif "DEPBAR" in ln:
            current = None
    waits = [i for i, ln in enumerate(lines) if "DEPBAR.LE gsb0, 0x1" in ln]
    found = []
    n = len(lines)
    for start, regs in groups:
        after = sorted(((w - start) % n) for w in waits)
        end = after[1] if len(after) > 1 else n   # the second wait after the group
        for d in range(1, end):
            ln = lines[(start + d) % n]
            if "HGMMA" not in ln and _dest_regs(ln) & regs:
                found.append(ln.strip())
    return found


# --------------------------------------------------------------------------------------------- sm_90a (CPU)

@pytest.mark.parametrize("block_m,split,stages", [(16, False, 0), (64, True, 0), (64, True, 4), (16, True, 6)])
def test_register_a_wgmma_with_one_group_in_flight(block_m, split, stages):
    res = _compile(128, block_m, 64, 4, split, stages)
    ptx = res.asm["ptx"]
    wgmma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.bf16\.bf16\s+\{[^}]*\},\s*"
                       r"\{%r\d+,\s*%r\d+,\s*%r\d+,\s*%r\d+\},\s*%rd\d+", ptx)
    assert wgmma and {int(n) for n in wgmma} == {block_m}  # A from registers, x^T (N = BLOCK_M) from smem
    assert "wgmma.wait_group.sync.aligned 1;" in ptx
    loop = _loop(res.asm["sass"])
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in loop and "DEPBAR.LE gsb0, 0x0" not in loop
    if not stages:  # the register loop: the weight words (and x) as 16-byte vectors, never in shared memory
        assert loop.count("LDG.E.128") >= 2 and not re.search(r"\bLDS\S*\s+R\d", loop) and "LDGSTS" not in loop
    else:  # the staged loop: weight words and x by 16-byte cp.async, read back from shared memory; no plain LDG
        assert "LDGSTS.E.BYPASS.128" in loop and "LDS.128" in loop and not re.search(r"\bLDG\b", loop)
        assert "DEPBAR.LE SB0" in loop        # the cp.async group wait
    assert not wgmma_register_hazards(loop)


@pytest.mark.parametrize("warps", [4, 8])
def test_x_by_tma_leaves_no_proxy_fence_in_the_staged_loop(warps):
    """With x^T by TMA the loop has no `fence.proxy.async` (MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC.S in SASS), which
    would wait for the weight's cp.asyncs in flight; the weight words still come by 16-byte cp.async."""
    from test_kernels_dq_wgmma import _loop as wgmma_loop  # noqa: PLC0415 - the loop finder of the TMA kernels
    res = _compile(64 * warps // 4, 64, 64, warps, True, 4, x_tma=True)
    loop = wgmma_loop(res.asm["sass"])
    assert "MEMBAR" not in loop and "FENCE.VIEW.ASYNC" not in loop
    assert loop.count("UTMALDG.2D") == 2 and "SYNCS.PHASECHK" in loop and "LDGSTS.E.BYPASS.128" in loop
    assert not wgmma_register_hazards(loop)
    assert "MEMBAR.ALL.CTA" in _loop(_compile(64, 64, 64, 4, True, 4).asm["sass"])  # the cp.async form has it


def test_split_partials_for_a_second_kernel_end_without_an_arrival_or_a_gpu_fence():
    """A split launch whose slices are summed by `_slice_sum` stores its fp32 partial and exits: no atomic arrival
    and no GPU-scope fence (MEMBAR.ALL.GPU), which the in-launch sum has and every CTA waits out."""
    in_launch = _compile(64, 64, 64, 4, True, 4).asm["sass"]
    assert "ATOMG.E.ADD" in in_launch and "MEMBAR.ALL.GPU" in in_launch
    second = _compile(64, 64, 64, 4, True, 4, sum_in_kernel=False).asm["sass"]
    assert not re.search(r"\b(ATOMG|RED|MEMBAR\.ALL\.GPU|MEMBAR\.SC)\b", second)
    assert re.search(r"STG\.E\.64", second)  # the partial: fp32 pairs of the wgmma accumulator


def test_hazard_check_sees_a_decode_into_the_registers_of_a_wgmma_in_flight():
    """The check the kernel's two-step loop is held to: with one K step per iteration the decode of step k + 1
    wrote the A registers of step k's wgmma before the wait that retires it (wrong output rows on the H200)."""
    loop = ("LBB1:\n--:-:-:-:1\tPRMT R88, R2, 0x5140, R89;\n"
            "--:-:-:-:1\tHGMMA.64x64x16.F32.BF16 R56, R88, gdesc[UR12], R56;\n"
            "--:-:-:-:1\tWARPGROUP.DEPBAR.LE gsb0, 0x1;\n")
    found = wgmma_register_hazards(loop)
    assert len(found) == 1 and "PRMT R88" in found[0]
    safe = loop.replace("PRMT R88", "PRMT R92")
    assert not wgmma_register_hazards(safe)


def test_tuner_candidates_compile_without_spills_or_register_hazards_in_few_instructions():
    shapes = {(c["BLOCK_N"], c["BLOCK_M"], c["BLOCK_K"], c["num_warps"], c["STAGES"])
              for m in (16, 32, 64, 128, 256) for c in gm.gluon_candidates(m, 8192, 8192)}
    assert {stages for *_, stages in shapes} >= {0, 4}  # both K loops are tuned
    for bn, bm, bk, w, stages in sorted(shapes):
        sass = _compile(bn, bm, bk, w, split=True, stages=stages).asm["sass"]
        assert not re.search(r"\b(STL|LDL)\b", sass), (bn, bm, bk, w, stages)
        loop = _loop(sass)
        assert not wgmma_register_hazards(loop), (bn, bm, bk, w, stages)
        instructions = len([line for line in loop.splitlines() if "\t" in line])
        weights_per_thread = 2 * bn * bk / (32 * w)  # the loop body is two K steps
        # decode ~2.6 per weight (21 per lane and 8 weights), plus x staging, addressing and the wgmmas
        assert instructions / weights_per_thread < 6.5, (bn, bm, bk, w, stages, instructions)


# ----------------------------------------------------------------------------------------------- repack (CPU)

def test_natural_k_repack_puts_each_code_at_its_wgmma_register_position():
    """Code s of lane 4g + t: row g + 8 ((s // 2) % 2), k 2t + s % 2 + 8 (s // 4), i.e. registers a0a1 .. a6a7."""
    row, k = frag._fragment_index(natural_k=True)
    assert sorted((row * 16 + k).flatten().tolist()) == list(range(256))
    lane = torch.arange(32)
    assert torch.equal(k[:, 0], 2 * (lane % 4)) and torch.equal(k[:, 4], 2 * (lane % 4) + 8)
    assert torch.equal(row[:, 2], lane // 4 + 8) and torch.equal(k[:, 2], k[:, 0])
    w_q = quantize_nvfp4(torch.randn(32, 256, generator=torch.Generator().manual_seed(0)))
    nat = frag.frag_weight_of(w_q.data, w_q.scales, "plain", (32, 256), natural_k=True)
    perm = frag.frag_weight_of(w_q.data, w_q.scales, "plain", (32, 256))
    assert nat is not perm and torch.equal(nat.scales, perm.scales)  # two copies; scales do not depend on k order
    codes = torch.stack((w_q.data & 15, w_q.data >> 4), dim=-1).reshape(32, 256).to(torch.int64)
    u = nat.words.to(torch.int64) & 0xFFFFFFFF
    for s in range(8):
        mag = (u[1, 2, :, 3] >> (4 * s)) & 7
        sign = (u[1, 2, :, 3] >> frag.SIGN_BITS[s]) & 1
        assert torch.equal(mag | (sign << 3), codes[16 + row[:, s], 16 * 11 + k[:, s]])


# ------------------------------------------------------------------------------------------- validation (CPU)

def test_config_validation_names_the_problem():
    cfg = gm.gluon_candidates(64, 4096, 4096)[0]
    with pytest.raises(InputError, match="M must be in 1 .. 256"):
        gm.check_config("op", cfg, 300, 4096, 4096)
    with pytest.raises(InputError, match="BLOCK_K must be"):
        gm.check_config("op", dict(cfg, BLOCK_K=32), 64, 4096, 4096)
    with pytest.raises(InputError, match="accumulator registers"):
        gm.check_config("op", dict(cfg, BLOCK_N=256, BLOCK_M=256, num_warps=8), 200, 4096, 4096)
    with pytest.raises(InputError, match="N must be a multiple of BLOCK_N"):
        gm.check_config("op", cfg, 64, 4096 + 32, 4096)
    with pytest.raises(InputError, match="STAGES must be one of"):
        gm.check_config("op", dict(cfg, STAGES=3), 64, 4096, 4096)
    with pytest.raises(InputError, match=r"SLICE_SUM must be one of \('last_slice', 'second_kernel'\) "
                                         r"\(got 'atomic'\)"):
        gm.check_config("op", dict(cfg, SLICE_SUM="atomic"), 64, 4096, 4096)
    # 8 slots of 256 x 64 x 128: 16 KB of words, 8 KB of scale pairs and 16 KB of x^T each
    with pytest.raises(InputError, match=r"STAGES \* 40960 bytes of ring <= 204800 \(got 8\)"):
        gm.check_config("op", dict(cfg, BLOCK_N=256, BLOCK_K=128, num_warps=8, STAGES=8), 64, 4096, 4096)
    with pytest.raises(InputError, match="gluon_mixed path takes M = 1 .. 256"):
        decode._user_config("op", {"path": "gluon_mixed"}, 300, 4096, 4096, 132)
    assert decode._user_config("op", {"path": "gluon_mixed"}, 8, 4096, 4096, 132)["BLOCK_M"] == 16
    assert decode._user_config("op", {"path": "gluon_mixed", "SPLIT_K": 2}, 64, 4096, 4096, 132)["SPLIT_K"] == 2


def test_tuner_offers_it_on_hopper_only_and_only_for_m_16_to_256():
    def paths(m, hopper=True):
        return {c["path"] for c in decode.decode_candidates(m, 4096, 4096, 132, hopper=hopper)}
    assert "gluon_mixed" in paths(16) and "gluon_mixed" in paths(256)
    assert "gluon_mixed" not in paths(8) and "gluon_mixed" not in paths(512)
    assert "gluon_mixed" not in paths(64, hopper=False)


# ------------------------------------------------------------------------------------------------------ GPU

def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


def _one_hot_weight(n: int, k: int) -> QuantizedTensor:
    """Every byte value in every row, scales down to the UE4M3 subnormals (0x7F, NaN, left out)."""
    g = torch.Generator().manual_seed(7)
    data = torch.stack([torch.randperm(256, generator=g)[torch.arange(k // 2) % 256] for _ in range(n)])
    scales = torch.randint(0, 0x7F, (n, k // 16), generator=g, dtype=torch.uint8)
    return QuantizedTensor(data=data.to(torch.uint8).cuda(), scales=scales.view(torch.float8_e4m3fn).cuda(),
                           scale_layout="plain", global_scale=torch.tensor(0.75, device="cuda"), format="nvfp4",
                           shape=(n, k))


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="wgmma: sm_90a")
@pytest.mark.parametrize("m,split", [(1, 2), (5, 1), (16, 1), (40, 4), (128, 8)])
@pytest.mark.parametrize("stages,x_tma", [(0, False), (4, False), (6, False), (4, True), (6, True)])
def test_gpu_one_hot_rows_pick_weights_exactly(m, split, stages, x_tma):
    n, k = 256, 2048
    w_q = _one_hot_weight(n, k)
    cols = torch.arange(m) * 37 % k
    x = torch.zeros(m, k, device="cuda", dtype=torch.bfloat16)
    x[torch.arange(m), cols.cuda()] = 1.0
    cfg = {"path": "gluon_mixed", "BLOCK_N": 128, "BLOCK_M": swap_ab_block_m(m), "BLOCK_K": 64,
           "SPLIT_K": split, "num_warps": 4 if m <= 64 else 8, "STAGES": stages, "X_TMA": x_tma}
    out = decode.nvfp4_decode_matmul(x, w_q, out_dtype=torch.float32, config=cfg)
    assert torch.equal(out.double().cpu(), w_q.dequantize(torch.float64)[:, cols.cuda()].T.cpu())


def _k_slice(w_q: QuantizedTensor, lo: int, hi: int) -> QuantizedTensor:
    """Columns lo .. hi of a plain-layout NVFP4 weight, global scale 1 (so the kernel's alpha is 1)."""
    return QuantizedTensor(data=w_q.data[:, lo // 2:hi // 2].contiguous(),
                           scales=w_q.scales[:, lo // 16:hi // 16].contiguous(), scale_layout="plain",
                           global_scale=torch.tensor(1.0, device="cuda"), format="nvfp4",
                           shape=(w_q.shape[0], hi - lo))


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="wgmma: sm_90a")
@pytest.mark.parametrize("split,block_m", [(2, 64), (3, 64), (4, 64), (5, 16), (4, 128)])
@pytest.mark.parametrize("slice_sum", ["last_slice", "second_kernel"])
def test_gpu_split_k_sums_the_slices_in_slice_order(split, block_m, slice_sum):
    """A split launch's fp32 output is bit-equal to ((p0 + p1) + p2) + .. of each K slice run alone: the last
    slice to arrive (whichever it is) or the second kernel sums the partials in slice order (odd splits and
    128-column tiles too)."""
    torch.manual_seed(3)
    n, block_k = 128, 64
    k = 2 * block_k * split * 2
    x = torch.randn(block_m, k, device="cuda").to(torch.bfloat16)
    w_q = _k_slice(quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05, blocked=False), 0, k)
    cfg = {"path": "gluon_mixed", "BLOCK_N": 64, "BLOCK_M": block_m, "BLOCK_K": block_k, "SPLIT_K": split,
           "num_warps": 4, "STAGES": 4, "X_TMA": False, "SLICE_SUM": slice_sum}
    out = decode.nvfp4_decode_matmul(x, w_q, out_dtype=torch.float32, config=cfg)
    span = k // split
    total = torch.zeros_like(out)
    for j in range(split):
        lo, hi = j * span, (j + 1) * span
        part = decode.nvfp4_decode_matmul(x[:, lo:hi].contiguous(), _k_slice(w_q, lo, hi),
                                          out_dtype=torch.float32, config=dict(cfg, SPLIT_K=1))
        total = total + part
    assert torch.equal(out, total)


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="wgmma: sm_90a")
@pytest.mark.parametrize("m", [16, 64, 100, 256])
def test_gpu_every_candidate_is_close_and_deterministic(m):
    torch.manual_seed(11)
    n, k = 512, 4096
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05, blocked=m == 100)
    ref_w = w_q.dequantize(torch.float64)
    cands = gm.gluon_candidates(m, n, k, torch.cuda.get_device_properties(0).multi_processor_count)
    # each also in the other K loop (x^T by cp.async there: the register loop has no TMA form)
    others = [dict(c, STAGES=0, X_TMA=False) if c["STAGES"] else dict(c, STAGES=4) for c in cands]
    for cfg in cands + [c for i, c in enumerate(others) if c not in cands and c not in others[:i]]:
        out = decode.nvfp4_decode_matmul(x, w_q, config=cfg)
        assert_close_to_reference(out, x.double(), ref_w)
        assert torch.equal(out, decode.nvfp4_decode_matmul(x, w_q, config=cfg))  # fixed slice order


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="wgmma: sm_90a")
@pytest.mark.parametrize("slice_sum", ["last_slice", "second_kernel"])
def test_gpu_bias_and_replay(slice_sum):
    torch.manual_seed(5)
    m, n, k = 48, 1024, 2048
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    cfg = dict(gm.gluon_candidates(m, n, k)[0], SPLIT_K=4, SLICE_SUM=slice_sum)
    check_bias_and_replay(gm.launch_gluon, cfg, x, w_q, bias)


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="wgmma: sm_90a")
def test_gpu_both_slice_sums_give_equal_bits_with_bias_and_scale():
    """The second kernel applies alpha and the bias as the in-launch sum does: equal bf16 outputs, bit for bit,
    also from the replayable launch on new activations."""
    from bwtriton.kernels._common import decode_scale_arg  # noqa: PLC0415 - a CUDA-only helper of the GPU tests
    torch.manual_seed(6)
    m, n, k = 100, 512, 4096
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    x2 = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.05 + 0.01)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    alpha = decode_scale_arg(w_q, x.device)
    cfg = dict(gm.gluon_config(m, n, k, 64, 64, 4, stages=4), SPLIT_K=4)
    first, replayed = [], []
    for slice_sum in gm.SLICE_SUMS:
        out, launch = gm.launch_gluon(x, w_q, alpha, bias, dict(cfg, SLICE_SUM=slice_sum))
        first.append(out)
        replayed.append(launch.run(x2, w_q.data, w_q.scales, alpha, bias))
    assert torch.equal(first[0], first[1]) and torch.equal(replayed[0], replayed[1])
    assert_close_to_reference(first[1], x.double(), w_q.dequantize(torch.float64), bias)


def check_bias_and_replay(launch_fn, cfg: dict, x: torch.Tensor, w_q, bias: torch.Tensor) -> None:
    """`launch_fn(x, w_q, alpha, bias, cfg)`'s output, then its replayable launch's on new activations, against
    the float64 reference with the bias."""
    from bwtriton.kernels._common import decode_scale_arg  # noqa: PLC0415 - a CUDA-only helper of the GPU tests
    alpha = decode_scale_arg(w_q, x.device)
    out, launch = launch_fn(x, w_q, alpha, bias, cfg)
    ref_w = w_q.dequantize(torch.float64)
    assert_close_to_reference(out, x.double(), ref_w, bias)
    x2 = torch.randn(x.shape, device="cuda").to(torch.bfloat16)
    assert_close_to_reference(launch.run(x2, w_q.data, w_q.scales, alpha, bias), x2.double(), ref_w, bias)


# ------------------------------------------------------------------- the GPU tests on the emulated H200 (CPU)
_ON_THE_EMULATED_H200 = (
    pytest.mark.emulated,
    pytest.mark.skipif(torch.cuda.is_available(), reason="the emulated H200 takes CPU tensors only on a CPU machine"),
    pytest.mark.usefixtures("emulated_h200_module"),
)


def _emulated_h200(test):
    for mark in _ON_THE_EMULATED_H200:
        test = mark(test)
    return test


@_emulated_h200
@pytest.mark.parametrize("m,split,stages,x_tma", [(16, 2, 4, False), (40, 4, 0, False), (128, 8, 6, True)])
def test_emulated_h200_one_hot_rows_pick_weights_exactly(m, split, stages, x_tma):
    test_gpu_one_hot_rows_pick_weights_exactly(m, split, stages, x_tma)


@_emulated_h200
@pytest.mark.parametrize("split,block_m", [(3, 64), (5, 16), (4, 128)])
@pytest.mark.parametrize("slice_sum", ["last_slice", "second_kernel"])
def test_emulated_h200_split_k_sums_the_slices_in_slice_order(split, block_m, slice_sum):
    test_gpu_split_k_sums_the_slices_in_slice_order(split, block_m, slice_sum)


@_emulated_h200
def test_emulated_h200_both_slice_sums_give_equal_bits_with_bias_and_scale():
    test_gpu_both_slice_sums_give_equal_bits_with_bias_and_scale()


@_emulated_h200
@pytest.mark.parametrize("slice_sum", ["last_slice", "second_kernel"])
def test_emulated_h200_bias_and_replay(slice_sum):
    test_gpu_bias_and_replay(slice_sum)


@pytest.mark.emulated
@pytest.mark.skipif(torch.cuda.is_available(), reason="the emulated B200 takes CPU tensors only on a CPU machine")
def test_explicit_gluon_mixed_on_a_non_hopper_device_is_refused():
    check_refused_off_hopper("gluon_mixed", 16, "wgmma")


def check_refused_off_hopper(path: str, m: int, instead: str) -> None:
    """An explicit config of `path` on the emulated B200 is an InputError that names sm_90 and `instead`."""
    from bwtriton.emu.driver import emulated_gpu  # noqa: PLC0415 - the emulator is needed by these tests alone
    w_q = quantize_nvfp4(torch.randn(128, 256))
    x = torch.randn(m, 256, dtype=torch.bfloat16)
    with emulated_gpu("sm_100a"):
        with pytest.raises(InputError, match=f"{path} path is written for sm_90 .* use path '{instead}'"):
            decode.nvfp4_decode_matmul(x, w_q, config={"path": path})
