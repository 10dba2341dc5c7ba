"""Instruction and shared-memory descriptors against worked examples (layouts: docs/tcgen05_facts.md, from PTX ISA
#tcgen05-instruction-descriptor and #tcgen05-shared-memory-descriptor; values computed independently of this
code), plus round trips and legality rules."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bwtriton.ptx.descriptors import (AB_FORMATS, SWIZZLES, decode_idesc, decode_smem_desc, encode_idesc,
                                      encode_smem_desc, idesc_problems, legal_m, legal_n, smem_desc_problems)

# reference §1d
WORKED = [
    ("f16", dict(m=128, n=256, a_type="bf16", b_type="bf16"), 0x08400490),
    ("f16", dict(m=64, n=64, a_type="f16", b_type="f16"), 0x04100010),
    ("tf32", dict(m=128, n=128, a_type="tf32", b_type="tf32"), 0x08200910),
    ("f8f6f4", dict(m=128, n=256, a_type="e4m3", b_type="e4m3"), 0x08400010),
    ("i8", dict(m=128, n=256, a_type="s8", b_type="s8", d_type="s32"), 0x084004A0),
    ("mxf8f6f4", dict(m=128, n=256, a_type="e4m3", b_type="e4m3", scale_type="ue8m0"), 0x08C00000),
    ("mxf4nvf4", dict(m=128, n=256, a_type="e2m1", b_type="e2m1", scale_type="ue4m3"), 0x08400480),
    ("mxf4", dict(m=256, n=256, a_type="e2m1", b_type="e2m1", scale_type="ue8m0"), 0x10C00480),
]


@pytest.mark.parametrize("kind,kw,value", WORKED, ids=[f"{k}-{v:#x}" for k, _, v in WORKED])
def test_worked_idesc_examples(kind, kw, value):
    assert encode_idesc(kind, **kw) == value
    d = decode_idesc(value, kind)
    assert (d.m, d.n) == (kw["m"], kw["n"])
    assert (d.a_type, d.b_type) == (kw["a_type"], kw["b_type"])
    assert d.reserved_bits_set() == 0
    if "scale_type" in kw:
        assert d.scale_type == kw["scale_type"]
    cg = 2 if kind == "mxf4" else 1      # the mxf4 example is the cta_group::2 M=256 case
    sv = {"mxf8f6f4": "scale_vec::1X", "mxf4": "scale_vec::2X", "mxf4nvf4": "scale_vec::4X"}.get(kind)
    assert idesc_problems(d, cta_group=cg, scale_vec=sv) == []


def test_worked_smem_desc_example():
    # reference §2a: K-major SW128 tile at 0x400, SBO=1024, LBO=16
    v = encode_smem_desc(0x400, 16, 1024, "128B")
    assert v == 0x4000404000010040
    d = decode_smem_desc(v)
    assert (d.start_address, d.lbo, d.sbo, d.swizzle) == (0x400, 16, 1024, "128B")
    assert d.fields["version"] == 1 and smem_desc_problems(d) == []


def test_smem_desc_problems():
    v = encode_smem_desc(0x400, 16, 1024, "128B")
    assert any("0b001" in p for p in smem_desc_problems(decode_smem_desc(v & ~(1 << 46))))
    assert any("53-60" in p for p in smem_desc_problems(decode_smem_desc(v | 1 << 55)))
    bad_swizzle = (v & ~(7 << 61)) | 3 << 61
    assert any("swizzle code 3" in p for p in smem_desc_problems(decode_smem_desc(bad_swizzle)))
    assert any("sm_103a" in p for p in smem_desc_problems(decode_smem_desc(v | 1 << 52), "sm_100a"))
    assert smem_desc_problems(decode_smem_desc(v | 1 << 52), "sm_103a") == []


def test_partial_knowledge():
    v = encode_smem_desc(0x400, 16, 1024, "128B")
    d = decode_smem_desc(v, known_mask=~0x3FFF & (2**64 - 1))
    assert d.start_address is None and d.sbo == 1024 and d.swizzle == "128B"


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(list(AB_FORMATS)), data=st.data())
def test_idesc_round_trip(kind, data):
    fmts = list(AB_FORMATS[kind].values())
    a = data.draw(st.sampled_from(fmts))
    b = data.draw(st.sampled_from(fmts))
    scaled = kind in ("mxf8f6f4", "mxf4", "mxf4nvf4")
    m = data.draw(st.sampled_from([128, 256] if scaled else [64, 128, 256]))
    n = data.draw(st.integers(1, 32)) * 8
    ta = data.draw(st.booleans())
    d_type = {"i8": "s32"}.get(kind, "f32")
    v = encode_idesc(kind, m, n, a, b, d_type, transpose_a=ta, sfa_id=data.draw(st.integers(0, 3)) if scaled else 0)
    d = decode_idesc(v, kind)
    assert (d.m, d.n, d.a_type, d.b_type, d.fields["transpose_a"]) == (m, n, a, b, int(ta))
    assert d.reserved_bits_set() == 0


@settings(max_examples=100, deadline=None)
@given(start=st.integers(0, 0x3FFF), lbo=st.integers(0, 0x3FFF), sbo=st.integers(0, 0x3FFF),
       sw=st.sampled_from(list(SWIZZLES.values())))
def test_smem_round_trip(start, lbo, sbo, sw):
    d = decode_smem_desc(encode_smem_desc(start * 16, lbo * 16, sbo * 16, sw))
    assert (d.start_address, d.lbo, d.sbo, d.swizzle) == (start * 16, lbo * 16, sbo * 16, sw)


def _problems(kind, value, **kw):
    return idesc_problems(decode_idesc(value, kind), **{"cta_group": 1, **kw})


def test_legality_rules():
    base = encode_idesc("f16", 128, 128, "f16", "f16")
    assert _problems("f16", base) == []
    assert any("M=256" in p for p in _problems("f16", encode_idesc("f16", 256, 128, "f16", "f16")))
    assert _problems("f16", encode_idesc("f16", 256, 128, "f16", "f16"), cta_group=2) == []
    assert any("M=64" in p for p in _problems("f16", base & ~(0x1F << 24) | 4 << 24, cta_group=2))
    assert any("N=" in p for p in _problems("f16", encode_idesc("f16", 128, 200, "f16", "f16"), cta_group=2))
    assert any("bf16 inputs" in p for p in _problems("f16", encode_idesc("f16", 128, 128, "bf16", "bf16", "f16")))
    assert any("negate" in p for p in _problems("i8", encode_idesc("i8", 128, 64, "s8", "s8", "s32", negate_a=True)))
    assert any("transpose" in p for p in _problems(
        "mxf4", encode_idesc("mxf4", 128, 128, "e2m1", "e2m1", transpose_b=True), scale_vec="scale_vec::2X"))
    assert any("sfa_id" in p for p in _problems(
        "mxf4nvf4", encode_idesc("mxf4nvf4", 128, 128, "e2m1", "e2m1", sfa_id=1), scale_vec="scale_vec::2X"))
    assert any("4X" in p for p in _problems(
        "mxf4nvf4", encode_idesc("mxf4nvf4", 128, 128, "e2m1", "e2m1", "f32", sfa_id=2, scale_type="ue4m3"),
        scale_vec="scale_vec::4X"))
    assert any("UE8M0" in p for p in _problems(
        "mxf4", encode_idesc("mxf4", 128, 128, "e2m1", "e2m1", scale_type="ue4m3"), scale_vec="scale_vec::2X"))
    assert any("sparsity" in p for p in _problems("f16", base | 1 << 2))
    assert any("K=96" in p for p in _problems(
        "mxf4", encode_idesc("mxf4", 256, 128, "e2m1", "e2m1", k96=True), cta_group=2, scale_vec="scale_vec::2X"))


def test_shape_tables():
    assert legal_m("mxf4", 1) == {128}
    assert legal_m("f16", 1, ws=True) == {32, 64, 128}
    assert legal_m("mxf8f6f4", 2, sparse=True) == {256}
    assert 40 not in legal_n("i8", 1) and {8, 16, 24, 32, 48} <= legal_n("i8", 1)
    assert 56 not in legal_n("i8", 1)
    assert legal_n("i8", 2) == set(range(32, 257, 32))
    assert 24 not in legal_n("f8f6f4", 1, transpose_b_8bit=True)
