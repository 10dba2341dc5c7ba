"""pair-ctas: 2-CTA (cta_group::2) tcgen05 MMAs for plain tl.dot kernels, checked on PTX, SASS and reports.

Kernels compile for sm_100a on the CPU (no GPU). Each compile happens once per module (fixtures). What is checked is
the PTX protocol of issue 7 (every tcgen05 op cta_group::2, cluster launch directive, leader issue after a cluster
barrier for pointer loads, multicast commit, idesc M = 256 decoded from the PTX constant, alloc in both CTAs, exit handshake before the
dealloc) and SASS (UTC*MMA.2CTA).
"""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

import bwtriton
from bwtriton.compat.cga import (lowering_syncs_pair_exit, tma_bt_num_ctas2_compiles, triton_pairs_kn_dot,
                                 unpaired_tma_bt_aborts)
from bwtriton.errors import CompileError, InputError
from bwtriton.examples.tma_matmul import matmul_tma_bt_kernel
from bwtriton.mlir.encodings import cga_split, tmem_fields
from bwtriton.mlir.mma import find_mma_lines
from bwtriton.pairing import should_pair, tail_waste
from bwtriton.passes.pair_ctas.eligibility import MmaSummary, eligibility_problems
from bwtriton.passes.pair_ctas.layouts import add_unit_attr, with_two_ctas
from bwtriton.ptx.descriptors import decode_idesc
from fixtures.kernels import scaled_kernel


def tma_signature(dtype: str, block_m: int, block_n: int, block_k: int) -> dict:
    return {"a_desc": f"tensordesc<{dtype}[{block_m},{block_k}]>", "b_desc": f"tensordesc<{dtype}[{block_n},{block_k}]>",
            "c_desc": f"tensordesc<fp16[{block_m},{block_n}]>", "K": "i32"}


def compile_tma(dtype="fp16", block_m=256, block_n=128, block_k=64, *, num_ctas=2, passes=("+pair-ctas",),
                target="sm_100a", **kw):
    if num_ctas == 2 and block_m == 256 and target == "sm_100a" and not tma_bt_num_ctas2_compiles():
        pytest.skip("this Triton's make_ttgir rejects the TMA b.T matmul at num_ctas=2 (docs/two_cta.md)")
    return bwtriton.compile(matmul_tma_bt_kernel, signature=tma_signature(dtype, block_m, block_n, block_k),
                            constexprs={"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k},
                            num_ctas=num_ctas, passes=list(passes), target=target, **kw)


@pytest.fixture(scope="module")
def paired_fp16():
    return compile_tma("fp16")


@pytest.fixture(scope="module")
def paired_fp8():
    return compile_tma("fp8e4nv", block_k=128)


@pytest.fixture(scope="module")
def paired_bf16_native():
    """The pointer-load tutorial matmul: Triton 3.6 pairs it by itself; the pass adds only the exit handshake."""
    from bwtriton.examples.matmul import matmul_constexprs, matmul_kernel, matmul_signature
    return bwtriton.compile(matmul_kernel, signature=matmul_signature("bf16"), constexprs=matmul_constexprs(256, 128, 64),
                            num_ctas=2, passes=["+pair-ctas"])


PAIRED = {"paired_fp16": ("f16", "UTCHMMA"), "paired_fp8": ("f8f6f4", "UTCQMMA"),
          "paired_bf16_native": ("f16", "UTCHMMA")}


# ---------------------------------------------------------------------------------------------------------------
# PTX helpers
# ---------------------------------------------------------------------------------------------------------------

def code_lines(ptx: str) -> list[str]:
    return [ln.strip() for ln in ptx.splitlines() if ln.strip() and not ln.strip().startswith(("//", ".loc"))]


def first_index(lines, pred) -> int:
    return next(i for i, ln in enumerate(lines) if pred(ln))


def last_index(lines, pred) -> int:
    return max(i for i, ln in enumerate(lines) if pred(ln))


def mma_idescs(ptx: str) -> list[tuple[str, int]]:
    """(kind, idesc constant) of every tcgen05.mma, following the idesc register back to its `mov.b32` constant."""
    consts = dict(re.findall(r"mov\.b32\s+(%r\d+),\s*(-?\d+);", ptx))
    out = []
    for kind, reg in re.findall(r"tcgen05\.mma\.cta_group::\d\.kind::(\w+)\s+\[[^\]]*\],\s*%rd\d+,\s*%rd\d+,\s*(%r\d+)",
                                ptx):
        assert reg in consts, f"idesc register {reg} is not a constant in this PTX"
        out.append((kind, int(consts[reg]) & 0xFFFFFFFF))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Paired kernels: PTX protocol
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", PAIRED)
def test_every_tcgen05_op_is_cta_group_2(name, request):
    ptx = request.getfixturevalue(name).asm["ptx"]
    ops = [ln for ln in code_lines(ptx) if re.search(r"tcgen05\.(alloc|dealloc|relinquish|mma|commit|cp|shift)", ln)]
    kinds = {re.search(r"tcgen05\.(\w+)", ln).group(1) for ln in ops}
    assert {"alloc", "dealloc", "relinquish_alloc_permit", "mma", "commit"} <= kinds
    assert all("cta_group::2" in ln for ln in ops), [ln for ln in ops if "cta_group::2" not in ln]


@pytest.mark.parametrize("name", PAIRED)
def test_cluster_launch_and_multicast_commit(name, request):
    ptx = request.getfixturevalue(name).asm["ptx"]
    assert re.search(r"^\.explicitcluster$", ptx, re.M) and re.search(r"^\.reqnctapercluster 2$", ptx, re.M)
    commits = [ln for ln in code_lines(ptx) if "tcgen05.commit" in ln]
    assert commits and all(".multicast::cluster" in ln and ".shared::cluster" in ln for ln in commits)


@pytest.mark.parametrize("name", PAIRED)
def test_idesc_m_is_the_pairs_256(name, request):
    kind, _ = PAIRED[name]
    idescs = mma_idescs(request.getfixturevalue(name).asm["ptx"])
    assert idescs
    for k, value in idescs:
        d = decode_idesc(value, k)
        assert k == kind and d.m == 256 and d.n == 128, d.summary()


def test_pointer_load_leader_issues_after_cluster_barrier(paired_bf16_native):
    """Pointer loads (st.shared operands): between the previous commit (or the kernel start) and each MMA group
    there is a cluster barrier wait, the only way the peer's tiles are handed to the leader. (TMA-fed kernels hand
    off through the leader's mbarrier instead: tests/test_passes_pair_ctas_handoff.py.)"""
    assert paired_bf16_native.reports["pair-ctas-handoff"]["applied"] is False
    lines = code_lines(paired_bf16_native.asm["ptx"])
    waited = False
    for ln in lines:
        if "barrier.cluster.wait" in ln:
            waited = True
        elif "tcgen05.mma" in ln:
            assert waited, "tcgen05.mma issued without a cluster barrier since the last commit"
        elif "tcgen05.commit" in ln:
            waited = False


@pytest.mark.parametrize("name", PAIRED)
def test_alloc_in_both_ctas_and_exit_handshake(name, request):
    lines = code_lines(request.getfixturevalue(name).asm["ptx"])
    alloc = first_index(lines, lambda s: "tcgen05.alloc" in s)
    # Nothing that depends on the CTA's rank in the cluster can guard the alloc: both CTAs execute it.
    rank_reads = [i for i, s in enumerate(lines) if "%cluster_ctarank" in s]
    assert not rank_reads or alloc < rank_reads[0]
    dealloc = last_index(lines, lambda s: "tcgen05.dealloc" in s)
    last_mma = last_index(lines, lambda s: "tcgen05.mma" in s)
    exit_wait = last_index(lines, lambda s: "barrier.cluster.wait" in s)
    assert last_mma < exit_wait < dealloc, "no cluster barrier between the last MMA and the TMEM dealloc"
    assert "barrier.cluster.arrive" in lines[exit_wait - 1]


@pytest.mark.parametrize("name", PAIRED)
def test_sass_has_2cta_mma(name, request):
    _, mma = PAIRED[name]
    sass = request.getfixturevalue(name).asm["sass"]
    assert f"{mma}.2CTA" in sass and "UTCBAR.2CTA.MULTICAST" in sass
    assert not re.search(rf"{mma}(?!\.2CTA)\b", sass), "a 1-CTA MMA left in the SASS"


def test_report_for_repaired_and_native(paired_fp16, paired_bf16_native):
    rep = paired_fp16.reports["pair-ctas"]
    assert rep["paired"] and rep["num_ctas"] == 2
    assert not any(m["two_ctas_from_triton"] for m in rep["mmas"])
    assert any("twoCTAs = true" in c for c in rep["changes"])
    assert sum("two_ctas" in c and "tc_gen5_mma" in c for c in rep["changes"]) == len(rep["mmas"])
    assert 'twoCTAs = true' in paired_fp16.asm["ttgir"] and '"ttng.two-ctas" = true' in paired_fp16.asm["ttgir"]
    native = paired_bf16_native.reports["pair-ctas"]
    assert native["paired"]
    if triton_pairs_kn_dot():  # 3.6 marks this one itself; later releases broadcast B and mark nothing
        assert all(m["two_ctas_from_triton"] for m in native["mmas"])
        assert native["changes"] == ["exit cluster barrier before tt.return"]
    else:
        assert not any(m["two_ctas_from_triton"] for m in native["mmas"])
        assert any("B split along N" in c for c in native["changes"])
    assert any("exit cluster barrier" in c for c in rep["changes"]) != lowering_syncs_pair_exit()
    # B as Triton laid it out: split on N (3.6) or broadcast (3.7+, then the pass splits it)
    assert all(m["M"] == 256 and m["acc_split"] == [2, 1] and m["b_split"] in ([1, 2], [1, 1]) for m in rep["mmas"])
    assert any("B split along N" in c for c in rep["changes"]) == (rep["mmas"][0]["b_split"] == [1, 1])


# ---------------------------------------------------------------------------------------------------------------
# Without the pass; ineligible kernels; other targets
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.skipif(not unpaired_tma_bt_aborts(), reason="only Triton 3.6 aborts on it; later releases need the pass "
                    "for B's split (test_passes_pair_ctas_versions.py)")
def test_without_the_pass_triton_fails_on_this_kernel():
    """The reason the pass exists (and a tripwire for a Triton upgrade that fixes it). Run in a subprocess: LLVM
    fatal errors may abort the process."""
    code = textwrap.dedent(f"""
        import sys; sys.path[:0] = {[str(__import__('pathlib').Path(__file__).parent), str(__import__('pathlib').Path(__file__).parents[1])]!r}
        import test_pair_ctas as t
        t.compile_tma("fp16", passes=("none",))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "Failed to find a valid layout" in proc.stderr + proc.stdout


def test_block_m_128_refused_with_reason():
    with pytest.raises(CompileError, match=r"BLOCK_M is 128, the pair tile needs BLOCK_M = 256"):
        compile_tma(block_m=128)


def test_auto_mode_leaves_ineligible_kernel_alone():
    res = compile_tma(block_m=128, passes=("+pair-ctas{mode=auto}",))
    rep = res.reports["pair-ctas"]
    assert rep["paired"] is False and rep["warnings"] and "BLOCK_M is 128" in rep["warnings"][0]
    ptx = res.asm["ptx"]
    assert "tcgen05.mma.cta_group::1" in ptx and "cta_group::2" not in ptx


def test_num_ctas_1_refused():
    with pytest.raises(CompileError, match=r"num_ctas=1; a CTA pair needs num_ctas=2"):
        compile_tma(num_ctas=1)


def test_small_n_refused():
    with pytest.raises(CompileError, match=r"BLOCK_N is 32"):
        compile_tma(block_n=32)


def test_block_scaled_refused_cleanly():
    """NVFP4 tl.dot_scaled with num_ctas=2: refused before Triton's lowering (which fails on it) is reached."""
    sig = {"a_ptr": "*u8", "as_ptr": "*fp8e4nv", "b_ptr": "*u8", "bs_ptr": "*fp8e4nv", "c_ptr": "*fp32", "K": "i32"}
    with pytest.raises(CompileError, match=r"block-scaled tl.dot_scaled cannot be paired"):
        bwtriton.compile(scaled_kernel, signature=sig, constexprs={"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 256},
                         num_ctas=2, num_stages=2, passes=["+pair-ctas"])


def test_bad_mode_option():
    with pytest.raises((CompileError, bwtriton.UnknownPassError), match=r"mode"):
        compile_tma(passes=("+pair-ctas{mode=sometimes}",))


def test_same_source_on_sm90a_is_untouched():
    res = compile_tma(num_ctas=1, target="sm_90a")
    assert "pair-ctas" not in res.reports
    assert "wgmma.mma_async" in res.asm["ptx"] and "tcgen05" not in res.asm["ptx"]


# ---------------------------------------------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------------------------------------------

def test_cga_split_and_tmem_fields():
    assert cga_split("#ttg.nvmma_shared<{swizzlingByteWidth = 128, CGALayout = [[1, 0]]}>") == (2, 1)
    assert cga_split("#ttg.blocked<{order = [1, 0], CGALayout = [[0, 1]]}>") == (1, 2)
    assert cga_split("#ttg.blocked<{order = [1, 0], CGALayout = [[0, 0]]}>") == (1, 1)
    assert cga_split("#ttg.blocked<{CGALayout = [[1, 0], [0, 1]]}>") == (2, 2)
    assert cga_split("#ttg.swizzled_shared<{vec = 1, order = [0]}>") is None
    enc = "#ttng.tensor_memory_encoding<blockM = 128, blockN = 64, colStride = 1, CTASplitN = 2>"
    assert tmem_fields(enc) == {"blockM": 128, "blockN": 64, "colStride": 1, "CTASplitN": 2}
    assert cga_split(enc) == (1, 2)
    two = with_two_ctas(enc)
    assert tmem_fields(two)["twoCTAs"] == 1 and with_two_ctas(two) == two
    with pytest.raises(ValueError):
        with_two_ctas("#ttg.blocked<{order = [1, 0]}>")


def test_add_unit_attr_and_mma_parsing():
    line = ("      ttng.tc_gen5_mma %a, %b, %acc, %t, %t, %bar[%t] {is_async} : !ttg.memdesc<256x64xf16, #shared, "
            "#smem>, !ttg.memdesc<64x128xf16, #shared1, #smem>, !ttg.memdesc<256x128xf32, #tmem, "
            "#ttng.tensor_memory, mutable>, !ttg.memdesc<1xi64, #shared2, #smem, mutable> loc(#loc3)")
    new = add_unit_attr(line, "two_ctas")
    assert "{is_async, two_ctas} : !ttg.memdesc<256x64xf16" in new and new.endswith("loc(#loc3)")
    assert add_unit_attr(new, "two_ctas") == new
    bare = line.replace(" {is_async}", "")
    assert "%bar[%t] {two_ctas} : " in add_unit_attr(bare, "two_ctas")
    (mma,) = find_mma_lines("module {\n" + new + "\n}")
    assert mma.two_ctas and mma.a.shape == (256, 64) and mma.b.encoding == "#shared1" and mma.acc.in_tmem


def _mma(**kw):
    base = dict(m=256, n=128, acc_split=(2, 1), a_split=(2, 1), b_split=(1, 2))
    return MmaSummary(**{**base, **kw})


@pytest.mark.parametrize("kw, needle", [
    (dict(m=128), "BLOCK_M is 128"), (dict(n=32), "BLOCK_N is 32"), (dict(acc_split=(1, 2)), "not along M"),
    (dict(b_split=(2, 1)), "operand B is split (2, 1)"), (dict(a_split=(1, 1)), "operand A is split"),
    (dict(scaled=True), "block-scaled")])
def test_eligibility_problems(kw, needle):
    assert eligibility_problems("sm_100a", 2, [_mma()]) == []
    probs = eligibility_problems("sm_100a", 2, [_mma(**kw), _mma(**kw)])
    assert len(probs) == 1 and needle in probs[0]  # pipelined copies of one MMA: reported once


def test_eligibility_kernel_level():
    assert "num_ctas=1" in eligibility_problems("sm_100a", 1, [_mma()])[0]
    assert "no tcgen05 MMA" in eligibility_problems("sm_103a", 2, [])[0]
    assert "sm_90a" in eligibility_problems("sm_90a", 2, [_mma()])[0]


def test_should_pair_heuristic():
    assert should_pair(8192, 8192, 8192)
    assert should_pair(1536, 4096, 4096)                       # 192 clusters: 2.6 waves, last wave 86% full
    assert not should_pair(256, 8192, 8192)                    # one 256-row tile: small M
    assert not should_pair(8192, 8192, 512)                    # short K
    assert not should_pair(1300, 4096, 4096)                   # 15% of the last M tile is padding
    assert tail_waste(1300, 256) > 0.125 > tail_waste(1536, 256)
    assert not should_pair(1280, 1920, 4096)                   # 75 clusters on 74 pair slots: last wave 1% full
    assert not should_pair(8192, 8192, 8192, block_m=128)      # not a pair tile
    assert not should_pair(8192, 8192, 8192, block_n=32)
    with pytest.raises(InputError):
        should_pair(0, 8192, 8192)


def test_tcgen05_verifier_accepts_paired_kernel():
    from bwtriton.passes import all_passes
    if "verify-tcgen05" not in all_passes():
        pytest.skip("verify-tcgen05 pass not available")
    res = compile_tma("fp16", passes=("+pair-ctas", "+verify-tcgen05"))
    counts = res.reports["verify-tcgen05"]["counts"]
    assert counts["error"] == 0 and counts["warning"] == 0, res.reports["verify-tcgen05"]
    assert "cta_group::2" in res.asm["ptx"]


def test_broadcast_b_is_eligible():
    """Triton 3.7+ broadcast B to both CTAs; the pass splits it along N (b_split.py), so it is no problem."""
    assert eligibility_problems("sm_100a", 2, [_mma(b_split=(1, 1))]) == []
