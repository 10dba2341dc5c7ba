"""pair-ctas-scaled: 2-CTA (cta_group::2, M = 256) block-scaled MMAs for tl.dot_scaled (NVFP4 and MXFP4), made by
pairing the PTX of the 1-CTA 128-row kernel (docs/two_cta.md, "Block-scaled pairs").

The kernel is test_lit/pair_ctas/Inputs/scaled_tma.py (TMA operands, 5-D blocked scales copied to TMEM with
tcgen05.cp), one 256 x 128 pair tile, K = 3 x 256. Numerics: e2m1 operands and their scales are exact, the fp32
accumulation differs from float64 only by rounding, the fp16 output rounds to half an ulp (`out_tolerance`); the
paired kernel must also give the 1-CTA kernel's fp16 output bit for bit (each CTA's half of D is the same sum of
the same MMAs). Faults are single edits of the paired PTX that must each fail the emulated run.
"""
from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

import pytest
import torch
from triton.tools.tensor_descriptor import TensorDescriptor

import bwtriton
import bwtriton.emu as emu
import emu_cases as ec
from bwtriton.emu.errors import DeadlockError, PoisonReadError, TmemRaceError
from bwtriton.errors import CompileError
from bwtriton.ptx.descriptors import decode_idesc
from bwtriton.verify import verify_ptx
from fixtures import ws_mutants as wm

_INPUT = Path(__file__).resolve().parents[2] / "test_lit" / "pair_ctas" / "Inputs" / "scaled_tma.py"
_spec = importlib.util.spec_from_file_location("scaled_tma_input", _INPUT)
scaled_tma = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scaled_tma)

M, N, K, BM, BN, BK = 256, 128, 768, 128, 128, 256
FORMATS = {"nvfp4": (16, "fp8e4nv"), "mxfp4": (32, "u8")}


def _compile(fmt: str, passes=("+pair-ctas-scaled", "+verify-tcgen05")):
    vec, _ = FORMATS[fmt]
    return bwtriton.compile(scaled_tma.scaled_tma_kernel, passes=list(passes), **scaled_tma.spec(vec))


@pytest.fixture(scope="module", params=list(FORMATS))
def paired(request):
    return request.param, _compile(request.param)


@functools.lru_cache(maxsize=None)
def _one_cta(fmt: str):
    """Triton's own 1-CTA kernel (no pairing), verified."""
    return _compile(fmt, passes=("+verify-tcgen05",))


def _problem(fmt: str, seed: int = 0):
    vec, scale_ty = FORMATS[fmt]
    a, b, sa, sb, ref = ec._scaled_problem("e2m1", "e2m1", M, N, K, scale_ty, vec, torch.Generator().manual_seed(seed))
    rep_k = BK // vec // 4
    sa5 = ec.to_blocked(sa).reshape(1, M // 128, K // vec // 4, 2, 256)
    sb5 = ec.to_blocked(sb).reshape(1, N // 128, K // vec // 4, 2, 256)
    c = torch.zeros(M, N, dtype=torch.float16)
    args = (TensorDescriptor.from_tensor(a, [BM, BK // 2]), TensorDescriptor.from_tensor(sa5, [1, 1, rep_k, 2, 256]),
            TensorDescriptor.from_tensor(b, [BN, BK // 2]), TensorDescriptor.from_tensor(sb5, [1, 1, rep_k, 2, 256]),
            TensorDescriptor.from_tensor(c, [BM, BN]))
    return args, c, ref


def _emulate(res, fmt: str, ptx: str | None = None, *, pairs: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(C, float64 reference). Paired: one cluster of 2 CTAs (emu grids count clusters); 1-CTA: 2 CTAs."""
    args, c, ref = _problem(fmt)
    md = dict(res.metadata)
    emu.run(ptx or res.asm["ptx"], (1,) if pairs else (2,), *args, num_warps=4, num_ctas=2 if pairs else 1,
            shared=md["shared"], tensordesc_meta=md["tensordesc_meta"])
    return c, ref


# ---------------------------------------------------------------------------------------------------------------
# PTX, SASS, verifier
# ---------------------------------------------------------------------------------------------------------------

def _lines(ptx: str) -> list[str]:
    return [ln.strip() for ln in ptx.splitlines() if ln.strip() and not ln.strip().startswith(("//", ".loc"))]


def test_every_tcgen05_op_is_cta_group_2_in_a_cluster_of_2(paired):
    _, res = paired
    lines = _lines(res.asm["ptx"])
    assert ".reqnctapercluster 2" in lines and ".explicitcluster" in lines
    ops = [s for s in lines if re.search(r"tcgen05\.(alloc|dealloc|relinquish|mma|commit|cp)", s)]
    assert {re.search(r"tcgen05\.(\w+)", s).group(1) for s in ops} >= {"alloc", "dealloc", "mma", "commit", "cp"}
    assert all("cta_group::2" in s for s in ops), [s for s in ops if "cta_group::2" not in s]


def test_idesc_m_is_256_and_the_rest_unchanged(paired):
    fmt, res = paired
    one = _compile(fmt, passes=())
    kind = "mxf4nvf4" if fmt == "nvfp4" else "mxf4"

    def idescs(ptx):
        consts = dict(re.findall(r"mov\.b32\s+(%r\d+),\s*(-?\d+);", ptx))
        regs = re.findall(rf"tcgen05\.mma\.cta_group::\d\.kind::{kind}\S*\s+\[[^\]]*\],\s*%rd\d+,\s*%rd\d+,\s*(%r\d+)",
                          ptx)
        return [decode_idesc(int(consts[r]) & 0xFFFFFFFF, kind) for r in regs]
    new, old = idescs(res.asm["ptx"]), idescs(one.asm["ptx"])
    assert new and len(new) == len(old)
    assert {d.m for d in new} == {256} and {d.m for d in old} == {128}
    for a, b in zip(new, old):
        others = [{k: v for k, v in d.fields.items() if k != "m_dim"} for d in (a, b)]
        assert others[0] == others[1]
        assert a.n == N


def test_only_the_leader_issues_and_commits_multicast(paired):
    _, res = paired
    ptx = res.asm["ptx"]
    commits = re.findall(r"tcgen05\.commit\.cta_group::2\S*multicast::cluster\.b64 \[%rd?\d+\], (%bwps_mask);", ptx)
    assert commits and re.search(r"mov\.b16\s+%bwps_mask, 3;", ptx)
    assert re.search(r"xor\.b32\s+%bwps_lead1, %bwho_odd, 1;", ptx)
    assert re.search(r"and\.b32\s+%bwho_odd, %bwho_rank, 1;", ptx) and "mov.u32 \t%bwho_rank, %cluster_ctarank;" in ptx
    for op in ("tcgen05.cp", "tcgen05.commit"):
        guards = re.findall(rf"@(%\w+) {re.escape(op)}\.", ptx)
        assert guards and all(g.startswith("%bwps_g") for g in guards), (op, guards)
        for g in set(guards):
            t = re.search(rf"setp\.ne\.b32\s+{g}, (%bwps_t\d+), 0;", ptx).group(1)
            assert re.search(rf"selp\.b32\s+{t}, %bwps_lead1, 0, %p\d+;", ptx)


def test_peer_loads_the_second_half_of_b(paired):
    _, res = paired
    ptx = res.asm["ptx"]
    assert re.search(rf"mul\.lo\.u32\s+%bwps_bshift, %bwho_odd, {N // 2};", ptx)
    b_loads = re.findall(r"cp\.async\.bulk\.tensor\.2d\S* \[%r\d+\], \[(%rd\d+), \{%r\d+, (%bwps_n\d+)\}\]", ptx)
    assert b_loads and len({m for m, _ in b_loads}) == 1  # one tensor map: B
    for _, reg in b_loads:
        assert re.search(rf"add\.s32\s+{reg}, %r\d+, %bwps_bshift;", ptx)


def test_verifier_clean_and_sass_is_2cta(paired):
    fmt, res = paired
    assert res.reports["verify-tcgen05"]["counts"] == {"error": 0, "warning": 0, "note": 0}
    rep = res.reports["pair-ctas-scaled"]
    assert rep["paired"] and rep["N"] == N and rep["b_box_checked"]
    assert "already hands off" in res.reports["pair-ctas-handoff"]["reason"]
    sass = res.asm["sass"]
    mmas = re.findall(r"\bUTC\w*MMA[\w.]*", sass)
    assert mmas and all(".2CTA" in m for m in mmas), set(mmas)
    assert "UTCCP.T.S.2CTA" in sass and "UTMALDG.5D.2CTA" in sass and "UTMALDG.2D.2CTA" in sass


def test_verifier_catches_the_peer_issuing_mmas(paired):
    _, res = paired
    ptx = re.sub(r"selp\.b32 \t(%bwps_t\d+), %bwps_lead1, 0, (%p\d+);", r"selp.b32 \t\1, 1, 0, \2;", res.asm["ptx"])
    checks = {f.check for f in verify_ptx(ptx, "sm_100a").errors}
    assert "cta-group2-leader" in checks


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_one_cta_kernel_verifies_clean_and_its_exit_wait_is_checked(fmt):
    """Triton 3.8+ lays the k-loop out with its latch branching to the exit and falling through to the header;
    the accumulator wait after it (parity 1 on the barrier of k-steps 0 and 2) is the loop's own next wait. With
    the other parity it waits for the peeled k-step's phase and T6 must fire on every release."""
    res = _one_cta(fmt)
    assert res.reports["verify-tcgen05"]["counts"]["error"] == 0
    flipped = wm.FAULTS["flip_acc_parity"](res.asm["ptx"])
    assert flipped is not None and flipped != res.asm["ptx"]
    assert "mbarrier-parity-stale" in {f.check for f in verify_ptx(flipped, "sm_100a").errors}


def test_refusals():
    from bwtriton.examples.tma_matmul import matmul_tma_bt_kernel, tma_bt_spec
    with pytest.raises(CompileError, match=r"pair-ctas-scaled\] cannot pair .*not every MMA is block-scaled"):
        bwtriton.compile(matmul_tma_bt_kernel, passes=["+pair-ctas-scaled"], **tma_bt_spec("fp16", block_m=128))
    from bwtriton.examples.matmul import matmul_constexprs, matmul_kernel, matmul_signature
    with pytest.raises(CompileError, match=r"already (launched in clusters|has cta_group::2)"):
        # the pointer matmul: every supported Triton compiles it at num_ctas=2 (3.8 not the TMA one)
        bwtriton.compile(matmul_kernel, signature=matmul_signature("fp16"), constexprs=matmul_constexprs(256, 128, 64),
                         two_cta=True, passes=["+pair-ctas-scaled"])


# ---------------------------------------------------------------------------------------------------------------
# Emulated
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.emulated
def test_paired_matches_float64_and_the_1cta_kernel(paired):
    fmt, res = paired
    c, ref = _emulate(res, fmt)
    err = (c.double() - ref).abs()
    assert (err <= ec.out_tolerance(ref, "fp16", K)).all(), f"max err {err.max().item()}"
    c1, _ = _emulate(_one_cta(fmt), fmt, pairs=False)
    assert torch.equal(c, c1)


@pytest.mark.emulated
def test_one_cta_flipped_exit_parity_races():
    """The verifier's T6 mutant of the 1-CTA kernel is a real race: the epilogue's tcgen05.ld reads the
    accumulator while the last k-step's MMAs run."""
    res = _one_cta("nvfp4")
    flipped = wm.FAULTS["flip_acc_parity"](res.asm["ptx"])
    with pytest.raises(TmemRaceError, match=r"tcgen05\.ld reads TMEM .* still in flight"):
        _emulate(res, "nvfp4", flipped, pairs=False)


@pytest.mark.emulated
def test_peer_without_its_b_shift_gives_wrong_columns():
    """Both CTAs supply B's first half: the upper 64 columns of D are wrong (numerics, not a protocol error)."""
    res = _compile("nvfp4")
    ptx = res.asm["ptx"].replace(f"mul.lo.u32 \t%bwps_bshift, %bwho_odd, {N // 2};", "mov.u32 \t%bwps_bshift, 0;")
    assert ptx != res.asm["ptx"]
    c, ref = _emulate(res, "nvfp4", ptx)
    bad = (c.double() - ref).abs() > ec.out_tolerance(ref, "fp16", K)
    assert not bad[:, :N // 2].any() and bad[:, N // 2:].any()


@pytest.mark.emulated
def test_peer_issuing_too_reads_tiles_early():
    res = _compile("nvfp4", passes=("+pair-ctas-scaled",))
    ptx = re.sub(r"selp\.b32 \t(%bwps_t\d+), %bwps_lead1, 0, (%p\d+);", r"selp.b32 \t\1, 1, 0, \2;", res.asm["ptx"])
    with pytest.raises(PoisonReadError, match=r"tcgen05\.(cp|mma) reads shared memory"):
        _emulate(res, "nvfp4", ptx)


@pytest.mark.emulated
@pytest.mark.parametrize("fault", ["wrong_cta_mask", "dropped_peer_arrival"])
def test_protocol_faults_deadlock(fault):
    res = _compile("mxfp4", passes=("+pair-ctas-scaled",))
    ptx = res.asm["ptx"]
    if fault == "wrong_cta_mask":
        new = ptx.replace("mov.b16 \t%bwps_mask, 3;", "mov.b16 \t%bwps_mask, 1;")
    else:
        new = re.sub(r"mapa\.shared::cluster\.u32 \t(%bwho_bar), (%r\d+), %bwho_leader;", r"mov.u32 \t\1, \2;", ptx)
    assert new != ptx
    with pytest.raises(DeadlockError):
        _emulate(res, "mxfp4", new)
