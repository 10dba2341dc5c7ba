"""The frag decode path's weight repack (`kernels._decode_frag`), checked on the CPU against the layout its PTX
assumes: mma.m16n8k16's A-fragment positions, magnitude bits as prmt selectors, signs in the selectors' mode bits,
the byte tables, and the 16-byte grouping of a lane's words. The kernel itself runs in the emulated tests and
on the GPU (tests/kernels/test_emulated_kernels_blockscaled.py, tests/kernels/test_kernels_blockscaled.py)."""
from __future__ import annotations

import re

import pytest
import torch

import bwtriton
from bwtriton.formats import e2m1_decode, quantize_nvfp4
from bwtriton.kernels import _decode_frag as frag


def _codes(data: torch.Tensor) -> torch.Tensor:
    """uint8 [N, K/2] -> 4-bit codes [N, K] (low nibble first)."""
    return torch.stack((data & 15, data >> 4), dim=-1).reshape(data.shape[0], -1).to(torch.int64)


def test_fragment_positions_cover_each_tile_once_and_pair_with_the_b_operand():
    row, k = frag._fragment_index()
    assert sorted((row * 16 + k).flatten().tolist()) == list(range(256))  # a permutation of the 16x16 tile
    lane = torch.arange(32)
    # registers a0a1 / a2a3 are rows g / g+8, a4a5 / a6a7 the same rows: the mma.m16n8k16 A layout
    assert torch.equal(row[:, 0], lane // 4) and torch.equal(row[:, 2], lane // 4 + 8)
    # lane t's four k (one per register pair position) are 4t..4t+3: its B operand is one 8-byte load of x
    assert torch.equal(k[:, [0, 1, 4, 5]], 4 * (lane % 4)[:, None] + torch.arange(4))
    assert torch.equal(k[:, [2, 3, 6, 7]], k[:, [0, 1, 4, 5]])


def test_repack_places_magnitudes_signs_and_scales_where_the_decode_reads_them():
    gen = torch.Generator().manual_seed(0)
    n, k = 32, 256
    w_q = quantize_nvfp4(torch.randn(n, k, generator=gen))
    words, pairs = frag.repack(w_q.data, w_q.scales)
    assert words.shape == (n // 16, k // 64, 32, 4) and words.dtype == torch.int32
    assert pairs.shape == (n // 16, k // 64, 8, 4) and pairs.dtype == torch.int16
    codes = _codes(w_q.data)
    row, kk = frag._fragment_index()
    u = words.to(torch.int64) & 0xFFFFFFFF
    for tile, chunk, j in ((0, 0, 0), (1, 3, 2), (0, 2, 3)):
        kc = 4 * chunk + j
        for s in range(8):
            mag = (u[tile, chunk, :, j] >> (4 * s)) & 7
            sign = (u[tile, chunk, :, j] >> frag.SIGN_BITS[s]) & 1
            want = codes[16 * tile + row[:, s], 16 * kc + kk[:, s]]
            assert torch.equal(mag | (sign << 3), want)
        sc = w_q.scales.view(torch.uint8).to(torch.int64)
        p = pairs[tile, chunk, :, j].to(torch.int64) & 0xFFFF
        assert torch.equal(p & 0xFF, sc[16 * tile + torch.arange(8), kc])
        assert torch.equal(p >> 8, sc[16 * tile + 8 + torch.arange(8), kc])


def test_sign_bits_fill_exactly_the_selector_mode_bits():
    assert sorted(frag.SIGN_BITS) == [4 * i + 3 for i in range(8)]
    # codes 0..3 go to the high-byte lookup of the low selector half as bit 7 of their byte, 4..7 after << 4
    assert [b // 8 for b in frag.SIGN_BITS[:4]] == [0, 1, 2, 3] and all(b % 8 == 7 for b in frag.SIGN_BITS[:4])
    assert [(b + 4) // 8 for b in frag.SIGN_BITS[4:]] == [0, 1, 2, 3]


def test_byte_tables_give_every_e2m1_magnitude_in_bf16():
    """prmt's 8-byte source is (register a = codes 0..3, b = codes 4..7): a from the kernel's table argument, b
    the immediate the PTX moves into th1 / tl1."""
    ptx = frag._mma_asm(1)[0]
    upper = {name: int(re.search(rf"mov\.b32 {name}, (0x[0-9A-F]+);", ptx).group(1), 16) for name in ("th1", "tl1")}
    hi = list((frag.TABLE_HI & 0xFFFFFFFF).to_bytes(4, "little")) + list(upper["th1"].to_bytes(4, "little"))
    lo = list((frag.TABLE_LO & 0xFFFFFFFF).to_bytes(4, "little")) + list(upper["tl1"].to_bytes(4, "little"))
    bits = torch.tensor([(h << 8) | low for h, low in zip(hi, lo)], dtype=torch.int32)
    values = (bits << 16).view(torch.float32)
    assert torch.equal(values, e2m1_decode(torch.arange(8, dtype=torch.uint8)).float())


def test_blocked_scales_repack_like_plain_ones():
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(128, 256, generator=gen)
    plain, blocked = quantize_nvfp4(w), quantize_nvfp4(w, blocked=True)
    a, b = frag.frag_weight(plain), frag.frag_weight(blocked)
    assert torch.equal(a.words, b.words) and torch.equal(a.scales, b.scales)


@pytest.mark.parametrize("act_rows", [1, 8, 16])
def test_frag_kernel_compiles_to_wide_loads_and_mma_without_spills(act_rows):
    sig = {"x_ptr": "*i64", "w_ptr": "*i64", "s_ptr": "*i32", "out_ptr": "*fp32", "alpha_ptr": "*fp32",
           "bias_ptr": "*fp32", "table_ptr": "*i32", "M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32",
           "stride_om": "i32", "split_k": "i32", "xsrc_ptr": "*bf16", "xd_ptr": "*bf16", "s_enc_ptr": "*fp32",
           "stride_srcm": "i32", "acc_ptr": "*fp32", "count_ptr": "*i32"}
    const = dict(TILES_PER_THREAD=4, CHUNKS_PER_STEP=4, ACT_ROWS=act_rows, ATOMIC=True)
    res = bwtriton.compile(frag.nvfp4_frag_kernel, signature=sig, constexprs=const, target="sm_90a", num_warps=8,
                           num_stages=1, divisible_by_16=["x_ptr", "w_ptr", "s_ptr", "out_ptr", "N", "K",
                                                          "stride_xm", "stride_om"])
    sass = res.asm["sass"]
    assert "LDG.E.128" in sass                     # a lane's 4 words (4 K tiles) in one 16-byte load
    # per iteration: 4 tiles x 4 chunks x 4 K tiles, one MMA each per 8 activation rows (the loop may be unrolled)
    mmas = sass.count("HMMA.16816.F32.BF16")
    assert mmas and mmas % (64 * (2 if act_rows == 16 else 1)) == 0
    assert not re.search(r"\b(STL|LDL)\b", sass)   # no register spills
    assert "convert_layout" not in res.asm["ttgir"] and "local_alloc" not in res.asm["ttgir"]


@pytest.mark.parametrize("act_rows", [1, 16])
def test_frag_kernel_with_the_x_prologue_and_split_k_fixup_compiles_without_spills(act_rows):
    """QUANT_X + FIXUP (the W4A4 linear in one launch): the prologue's block amax is lane shuffles, not shared
    memory; one scalar release arrival per CTA, an acquire in the last slice, which reads the accumulator from L2."""
    sig = {"x_ptr": "*i64", "w_ptr": "*i64", "s_ptr": "*i32", "out_ptr": "*bf16", "alpha_ptr": "*fp32",
           "bias_ptr": "*bf16", "table_ptr": "*i32", "M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32",
           "stride_om": "i32", "split_k": "i32", "xsrc_ptr": "*bf16", "xd_ptr": "*bf16", "s_enc_ptr": "*fp32",
           "stride_srcm": "i32", "acc_ptr": "*fp32", "count_ptr": "*i32"}
    const = dict(TILES_PER_THREAD=4, CHUNKS_PER_STEP=2, ACT_ROWS=act_rows, ATOMIC=True, FIXUP=True, QUANT_X=True,
                 S_ENC_FROM_AMAX=True, HAS_BIAS=True, QDQ_KQ=frag.qdq_kq(act_rows, 256, 4))
    res = bwtriton.compile(frag.nvfp4_frag_kernel, signature=sig, constexprs=const, target="sm_90a", num_warps=4,
                           num_stages=1, divisible_by_16=["x_ptr", "w_ptr", "s_ptr", "out_ptr", "N", "K",
                                                          "stride_xm", "stride_om"])
    ptx, sass = res.asm["ptx"], res.asm["sass"]
    assert not re.search(r"\b(STL|LDL)\b", sass)
    assert "convert_layout" not in res.asm["ttgir"] and "local_alloc" not in res.asm["ttgir"]
    assert ptx.count("atom.global.gpu.release.add.u32") == 1 and ptx.count("atom.global.gpu.acquire.exch.b32") == 1
    assert "SHFL.BFLY" in sass
    assert "ld.global.cg" in ptx and "mma.sync.aligned.m16n8k16" in ptx


def test_repacked_copy_is_made_once_per_weight_and_again_after_an_in_place_edit():
    w_q = quantize_nvfp4(torch.randn(32, 128))
    first = frag.frag_weight(w_q)
    assert frag.frag_weight(w_q) is first  # a second lookup of a multi-element tensor key (was a RuntimeError)
    w_q.data[0, 0] ^= 0x11
    again = frag.frag_weight(w_q)
    assert again is not first and not torch.equal(again.words, first.words)
    key = (id(w_q.data), False)
    del w_q, first, again
    import gc
    gc.collect()
    assert key not in frag._FRAG  # dropped with the weight


def test_decode_tuner_warns_about_and_records_a_failing_candidate(monkeypatch):
    from bwtriton.kernels import decode
    calls = []

    def fake_decode(op, x, w_q, cfg, out_dtype, device, *rest):
        calls.append(cfg["path"])
        if cfg["path"] == "frag":
            raise RuntimeError("frag broke")
        return None, None
    monkeypatch.setattr(decode, "_decode", fake_decode)
    monkeypatch.setattr(decode, "rotated_kernel_time_us", lambda calls: 1.0)
    monkeypatch.setattr(decode.torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(decode, "_TUNED", {})
    monkeypatch.setattr(decode, "TUNING_FAILURES", {})
    w_q = quantize_nvfp4(torch.randn(8192, 256))
    with pytest.warns(RuntimeWarning, match="candidate frag .* failed .* skipped .*frag broke"):
        cfg = decode._tuned("nvfp4_decode_matmul", None, w_q, 1, 8192, 8192, torch.bfloat16, torch.device("cpu"), 132)
    assert cfg["path"] != "frag" and "frag" in calls
    (failures,) = decode.TUNING_FAILURES.values()
    assert failures and all(label.startswith("frag") and "frag broke" in err for label, err in failures.items())


def test_tuner_rotates_over_weight_copies_that_exceed_l2(monkeypatch):
    """The tuner times each candidate over copies of the weight putting 1.5 L2 caches of weight bytes between two
    uses of one copy (at most 16 copies; off CUDA, the weight alone)."""
    from types import SimpleNamespace

    from bwtriton.kernels import decode
    monkeypatch.setattr(decode.torch.cuda, "get_device_properties",
                        lambda device: SimpleNamespace(L2_cache_size=1 << 20))
    cuda = torch.device("cuda", 0)
    w_q = quantize_nvfp4(torch.randn(1024, 1024))  # 0.5625 MB of codes and scales
    copies = decode.tuning_copies(w_q, cuda)
    assert len(copies) == 1 + 3 and copies[0] is w_q  # 3 x 0.5625 MB >= 1.5 MB
    assert len({c.data.data_ptr() for c in copies}) == 4 and all(torch.equal(c.data, w_q.data) for c in copies)
    assert all(torch.equal(c.scales.view(torch.uint8), w_q.scales.view(torch.uint8)) for c in copies)
    assert len(decode.tuning_copies(quantize_nvfp4(torch.randn(32, 256)), cuda)) == decode.TUNING_MAX_COPIES
    assert len(decode.tuning_copies(quantize_nvfp4(torch.randn(2048, 2048)), cuda)) == 2
    assert decode.tuning_copies(w_q, torch.device("cpu")) == [w_q]


def test_repack_in_row_blocks_equals_one_pass(monkeypatch):
    w_q = quantize_nvfp4(torch.randn(96, 128, generator=torch.Generator().manual_seed(2)))
    whole = frag.FragWeight(w_q.data, w_q.scales, "plain", (96, 128))
    monkeypatch.setattr(frag, "REPACK_BYTES", 16 * 128 * 32)  # 32 rows per block: 3 blocks
    blocks = frag.FragWeight(w_q.data, w_q.scales, "plain", (96, 128))
    assert torch.equal(blocks.words, whole.words) and torch.equal(blocks.scales, whole.scales)


def test_activations_view_as_words_or_copy_when_the_view_is_impossible():
    from bwtriton.kernels._common import view_as_words
    x = torch.randn(3, 66).bfloat16()
    ok = x[:, :64]                      # row stride 66: no int64 view -> a contiguous copy
    words = view_as_words(ok, torch.int64)
    assert words.shape == (3, 16) and torch.equal(words.view(torch.bfloat16), ok)
    y = torch.randn(2, 64).bfloat16()
    assert view_as_words(y, torch.int32).data_ptr() == y.data_ptr()  # a view when allowed
