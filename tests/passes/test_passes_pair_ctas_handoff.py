"""pair-ctas-handoff: the 2-CTA TMA mainloop without a cluster barrier per K step, checked on PTX and SASS and by
the adversarial emulator (docs/two_cta.md, "The mainloop handoff").

The emulated kernel is the TMA matmul with B read as b.T, one 256x128 pair tile, K = 4 x 64 (4 K steps over 3
smem stages, so stages are refilled). Each fault is one edit of the rewritten PTX; each must make the emulated run
fail with the error that names it. Tolerance of the numerics: exact fp16 operands, fp32 accumulation in another
order than float64 (K * 2^-24 * |A| @ |B|^T) and the fp16 output rounding (2^-11 relative).
"""
from __future__ import annotations

import re

import pytest
import torch
from triton.tools.tensor_descriptor import TensorDescriptor

import bwtriton
from bwtriton.compat.cga import tma_bt_num_ctas2_compiles, tma_emulation_supported
import bwtriton.emu as emu
from bwtriton.emu.errors import AsyncOverwriteError, DeadlockError, PoisonReadError
from bwtriton.examples.tma_matmul import matmul_tma_bt_kernel, tma_bt_spec
from bwtriton.passes.pair_ctas.handoff import plan_handoff

M, N, BLOCK_K = 256, 128, 64
# The blocking wait Triton emits, as a whole `{ ... }` scope.
_LOCS = r"\s*(?:\.loc[^\n]*\s*)*"  # Triton 3.9 puts .loc lines inside the inline asm
_WAIT_SCOPE = (r"\{" + _LOCS + r"\.reg \.pred complete;" + _LOCS + r"waitLoop:" + _LOCS +
               r"mbarrier\.try_wait\.parity\.shared(?:::cta)?\.b64 complete, \[(%r\d+)\], (%r\d+);" + _LOCS +
               r"@!complete bra\.uni waitLoop;" + _LOCS + r"\}")


def _compile(dtype: str, block_k: int, passes=()):
    if not tma_bt_num_ctas2_compiles():
        pytest.skip("this Triton's make_ttgir rejects the TMA b.T matmul at num_ctas=2 (docs/two_cta.md)")
    return bwtriton.compile(matmul_tma_bt_kernel, two_cta=True, passes=list(passes),
                            **tma_bt_spec(dtype, block_k=block_k))


@pytest.fixture(scope="module")
def fp16():
    return _compile("fp16", BLOCK_K)


@pytest.fixture(scope="module")
def fp16_barrier():
    """The same kernel with Triton's cluster barrier per K step (the handoff pass turned off)."""
    return _compile("fp16", BLOCK_K, passes=("-pair-ctas-handoff",))


def _code(ptx: str) -> list[str]:
    return [ln.strip() for ln in ptx.splitlines() if ln.strip() and not ln.strip().startswith(("//", ".loc"))]


def _run(res, ptx: str, dtype=torch.float16, block_k: int = BLOCK_K, k: int = 4 * BLOCK_K):
    if not tma_emulation_supported():
        pytest.skip("bwtriton's emulator does not run this Triton's TMA kernels (docs/two_cta.md, Triton versions)")
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(M, k, generator=gen).to(dtype)
    b = torch.randn(N, k, generator=gen).to(dtype)
    c = torch.zeros(M, N, dtype=torch.float16)
    emu.run(ptx, (1, 1), TensorDescriptor.from_tensor(a, [M, block_k]), TensorDescriptor.from_tensor(b, [N, block_k]),
            TensorDescriptor.from_tensor(c, [M, N]), k, num_warps=4, num_ctas=2, shared=res.metadata["shared"],
            tensordesc_meta=res.metadata["tensordesc_meta"])
    ref = a.double() @ b.double().T
    bound = ref.abs() * 2.0 ** -11 + k * 2.0 ** -24 * (a.double().abs() @ b.double().abs().T)
    return (c.double() - ref).abs(), bound


# ---------------------------------------------------------------------------------------------------------------
# PTX and SASS
# ---------------------------------------------------------------------------------------------------------------

def test_no_cluster_barrier_between_first_tma_and_last_mma(fp16, fp16_barrier):
    lines = _code(fp16.asm["ptx"])
    first_tma = next(i for i, s in enumerate(lines) if "cp.async.bulk.tensor" in s and ".global.mbarrier" in s)
    last_mma = max(i for i, s in enumerate(lines) if "tcgen05.mma" in s)
    barriers = [i for i, s in enumerate(lines) if s.startswith("barrier.cluster.wait")]
    # setup barrier(s) before the first load (Triton 3.9 has one of its own besides the handoff's), exit after
    assert barriers[0] < first_tma and barriers[-1] > last_mma, barriers
    assert not [i for i in barriers if first_tma < i < last_mma], barriers
    setup = max(i for i in barriers if i < first_tma)
    assert lines[setup - 1] == "barrier.cluster.arrive.release.aligned;"
    assert any(s.startswith("fence.mbarrier_init.release.cluster") for s in lines[:setup])
    # The report names what went, and the kernel without the pass still has the per-K-step barriers.
    rep = fp16.reports["pair-ctas-handoff"]
    old = _code(fp16_barrier.asm["ptx"])
    old_first_tma = next(i for i, s in enumerate(old) if "cp.async.bulk.tensor" in s and ".global.mbarrier" in s)
    old_last_mma = max(i for i, s in enumerate(old) if "tcgen05.mma" in s)
    per_k = [i for i, s in enumerate(old) if s.startswith("barrier.cluster.wait") and old_first_tma < i < old_last_mma]
    # (on 3.9 the handoff also drops Triton's own setup barrier, replaced by its own)
    assert rep["applied"] and len(rep["removed_cluster_barriers"]) >= len(per_k) >= 2
    assert "pair-ctas-handoff" not in fp16_barrier.reports


def test_every_tma_load_completes_on_the_leaders_mbarrier(fp16):
    lines = _code(fp16.asm["ptx"])
    loads = [i for i, s in enumerate(lines) if "cp.async.bulk.tensor" in s and "global.mbarrier" in s]
    assert len(loads) == fp16.reports["pair-ctas-handoff"]["tma_loads"] == 8
    leader = next(s for s in lines if s.startswith("and.b32") and "%bwho_leader" in s.split(",")[0])
    assert re.fullmatch(r"and\.b32\s+%bwho_leader, %bwho_rank, -2;", leader)  # the even CTA of the pair
    assert any(re.fullmatch(r"mov\.u32\s+%bwho_rank, %cluster_ctarank;", s) for s in lines)
    for i in loads:
        assert ".2d.cta_group::2.shared::cluster" in lines[i] and lines[i].endswith("[%bwho_bar];"), lines[i]
        assert re.fullmatch(r"mapa\.shared::cluster\.u32\s+%bwho_bar, %r\d+, %bwho_leader;", lines[i - 1])


def test_leader_expects_both_ctas_bytes_and_the_peer_none(fp16, fp16_barrier):
    old = {int(b) for b in re.findall(r"mbarrier\.arrive\.expect_tx\.shared(?:::cta)?\.b64 _, \[%r\d+\], (\d+);",
                                      fp16_barrier.asm["ptx"])}
    assert old == {(128 + 64) * BLOCK_K * 2}  # one CTA: its 128 rows of A and 64 columns of B, fp16
    (n,) = old
    ptx = fp16.asm["ptx"]
    assert re.search(rf"selp\.b32\s+%bwho_tx{n}, {2 * n}, 0, %bwho_isleader;", ptx)
    arrives = [s for s in _code(ptx) if "mbarrier.arrive.expect_tx" in s]
    assert arrives and all(s.endswith(f"%bwho_tx{n};") for s in arrives)


def test_stages_are_freed_in_both_ctas_by_the_multicast_commit(fp16):
    ptx = fp16.asm["ptx"]
    commits = re.findall(r"tcgen05\.commit\.cta_group::2\.mbarrier::arrive::one\.shared::cluster\.multicast::cluster"
                         r"\.b64 \[%rd?\d+\], (%rs\d+);", ptx)
    assert commits
    for reg in commits:
        assert re.search(rf"mov\.b16\s+{reg}, 3;", ptx), f"CTA mask of {reg} is not 0b11"


def test_sass_pair_tma_and_mma_without_cluster_barrier_in_between(fp16, fp16_barrier):
    sass = fp16.asm["sass"].splitlines()
    tma = [i for i, s in enumerate(sass) if "UTMALDG" in s]
    mma = [i for i, s in enumerate(sass) if "UTCHMMA" in s]
    bars = [i for i, s in enumerate(sass) if "UCGABAR_WAIT" in s]
    assert tma and all("UTMALDG.2D.2CTA" in sass[i] for i in tma)
    assert mma and all("UTCHMMA.2CTA" in sass[i] for i in mma)
    assert bars and bars[0] < min(tma) and bars[-1] > max(mma)
    assert not [i for i in bars if min(tma) < i < max(mma)], bars
    old = fp16_barrier.asm["sass"].splitlines()
    old_mma = [i for i, s in enumerate(old) if "UTCHMMA" in s]
    assert any(min(old_mma) - 40 < i < max(old_mma) for i, s in enumerate(old) if "UCGABAR_WAIT" in s)


def test_verifier_clean(fp16):
    res = _compile("fp16", BLOCK_K, passes=("+verify-tcgen05",))
    counts = res.reports["verify-tcgen05"]["counts"]
    assert counts["error"] == 0 and counts["warning"] == 0, res.reports["verify-tcgen05"]
    assert res.asm["ptx"] == fp16.asm["ptx"]


def test_plan_refuses_a_mainloop_that_reads_its_tiles_itself(fp16_barrier):
    """If the CTA's own threads read a TMA tile (not only the leader's MMA), the peer's own wait must keep meaning
    "landed": the handoff must not apply."""
    lines = fp16_barrier.asm["ptx"].split("\n")
    assert plan_handoff(lines)[0] is not None
    at = next(i for i, ln in enumerate(lines) if "@!complete bra.uni waitLoop;" in ln) + 2
    plan, why = plan_handoff(lines[:at] + ["\tld.shared.b32 \t%r400, [%r13];"] + lines[at:])
    assert plan is None and "shared memory read by the CTA's own threads in the mainloop" in why


def test_plan_refuses_kernels_it_cannot_rewrite():
    lines = ["//", ".visible .entry k(", ")", ".reqnctapercluster 2", "{", ".reg .b32 %r<4>;",
             "tcgen05.mma.cta_group::2.kind::f16 [%r1], %rd1, %rd2, %r2, %p1;", "ret;", "}"]
    plan, why = plan_handoff(lines)
    assert plan is None and "no TMA load feeds the MMAs" in why
    plan, why = plan_handoff([ln.replace(".reqnctapercluster 2", ".reqntid 128") for ln in lines])
    assert plan is None and "not a 2-CTA" in why


# ---------------------------------------------------------------------------------------------------------------
# Emulated: numerics and the adversarial faults
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.emulated
@pytest.mark.parametrize("dtype,block_k", [("fp16", 64), ("fp8e4nv", 128)])
def test_handoff_kernel_matches_float64(dtype, block_k):
    res = _compile(dtype, block_k)
    assert res.reports["pair-ctas-handoff"]["applied"]
    torch_dtype = {"fp16": torch.float16, "fp8e4nv": torch.float8_e4m3fn}[dtype]
    err, bound = _run(res, res.asm["ptx"], torch_dtype, block_k, k=4 * block_k)
    assert (err <= bound).all(), f"max err {err.max().item()}"


def _mutate(ptx: str, pattern: str, repl: str, count: int = 0) -> str:
    new, n = re.subn(pattern, repl, ptx, count=count)
    assert n, f"{pattern!r} not in the kernel: its PTX changed shape"
    return new


@pytest.mark.emulated
def test_unmutated_kernel_passes(fp16):
    err, bound = _run(fp16, fp16.asm["ptx"])
    assert (err <= bound).all()


@pytest.mark.emulated
def test_dropped_peer_arrival_deadlocks(fp16):
    """The peer's TMA completes on its own mbarrier instead of the leader's: the leader waits for bytes that
    never come."""
    ptx = _mutate(fp16.asm["ptx"], r"mapa\.shared::cluster\.u32 \t(%bwho_bar), (%r\d+), %bwho_leader;",
                  r"mov.u32 \t\1, \2;")
    with pytest.raises(DeadlockError, match=r"cluster rank 0\), warp 0 .*mbarrier\.try_wait"):
        _run(fp16, ptx)


@pytest.mark.emulated
def test_leader_expecting_only_its_own_bytes_reads_the_peers_tile_early(fp16):
    """expect_tx of one CTA's bytes on the leader: its phase completes before the peer's tile has landed, the
    MMA reads bytes the peer's TMA is still writing."""
    n = (128 + 64) * BLOCK_K * 2
    ptx = _mutate(fp16.asm["ptx"], rf"selp\.b32 \t%bwho_tx{n}, {2 * n},", f"selp.b32 \t%bwho_tx{n}, {n},")
    with pytest.raises(PoisonReadError, match=r"tcgen05\.mma reads shared memory .* of CTA [01]\) that the TMA load"):
        _run(fp16, ptx)


@pytest.mark.emulated
def test_early_refill_overwrites_the_tile_the_leader_still_reads(fp16):
    """Drop the wait on the MMA barrier before a stage is refilled: the peer's refill overwrites its half of B
    while the leader's MMA, issued from the other CTA, still reads it."""
    ptx = fp16.asm["ptx"]
    scopes = list(re.finditer(_WAIT_SCOPE, ptx))
    # The in-loop MMA-barrier wait: the one followed by a refill (expect_tx) before the next MMA.
    refill_waits = [m for m in scopes if re.search(r"^[^\n]*expect_tx", ptx[m.end():].split("tcgen05.mma")[0], re.M)]
    assert refill_waits, "no wait before a refill found: the kernel's PTX changed shape"
    m = refill_waits[-1]
    with pytest.raises(AsyncOverwriteError, match=r"overwrites shared memory .* of CTA 1\) that the tcgen05\.mma"):
        _run(fp16, ptx[:m.start()] + ptx[m.end():])


@pytest.mark.emulated
@pytest.mark.parametrize("mask", [1, 2])
def test_wrong_cta_mask_deadlocks(fp16, mask):
    """The commit frees the stage in only one CTA: the other waits forever before its refill or its epilogue."""
    ptx = _mutate(fp16.asm["ptx"], r"mov\.b16 \t(%rs\d+), 3;", rf"mov.b16 \t\1, {mask};")
    with pytest.raises(DeadlockError, match=r"mbarrier\.try_wait"):
        _run(fp16, ptx)
