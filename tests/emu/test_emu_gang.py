"""Gangs (bwtriton.emu.gang): running the same warp of many CTAs together must not change what a kernel computes
or which errors it gets. Every kernel here runs on a multi-CTA grid twice -- in gangs and warp by warp
(`gang_lanes=0`) -- and the outputs must be equal bit for bit (the same fp32 operations in the same order), and
within the format's tolerance of the float64 reference."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import bwtriton.emu as emu
import emu_cases as ec
from bwtriton.emu.machine import gang
from bwtriton.emu.errors import MissingProxyFenceError, PoisonReadError
from test_emu_faults import _cut, _line_of, _loop_tma_wait

pytestmark = pytest.mark.emulated

CASES = {
    # FMA path: cp.async pipeline, ld.shared, packed fma.rn.f32x2; 16 CTAs
    "fma_fp32_32x32": lambda: ec.case_matmul("fp32", "fp32", M=128, N=128, K=64, bm=32, bn=32, bk=32),
    # mma.sync m16n8k8 tf32, ldmatrix-free 32-bit operands; 4 CTAs
    "mma_sync_tf32": lambda: ec.case_matmul("fp32", "fp32", M=64, N=64, K=64, bm=32, bn=32, bk=32, prec="tf32"),
    # tcgen05.mma from cp.async-filled shared memory, TMEM accumulator; 4 CTAs
    "tcgen05_bf16": lambda: ec.case_matmul("bf16", "bf16", M=256, N=256, K=128),
    # TMA loads and a TMA-store epilogue, mbarrier pipeline; 4 CTAs
    "tma_bf16": lambda: ec.case_tma_matmul(M=256, N=256, K=256),
    # warp-specialised (a TMA producer warp, an MMA warp, epilogue warps): a gang of whole CTAs splits; 4 CTAs
    "ws_fp16": lambda: ec.case_ws_matmul(M=256, N=256, K=256),
}


def _run(case, gang_lanes: int, text=None):
    args, out, ref, tol = case.make()
    md = case.kernel.metadata._asdict()
    stats = emu.run(text or case.kernel.asm["ptx"], case.grid, *args, num_warps=md["num_warps"],
                    shared=md["shared"], tensordesc_meta=md.get("tensordesc_meta"), gang_lanes=gang_lanes)
    return out, ref, tol, stats


def _spy(monkeypatch) -> dict:
    """Record the gangs built (their warps per CTA) and the splits of gangs of whole CTAs."""
    seen: dict = {"warps_per_cta": [], "splits": 0}
    real_build, real_split = gang.build_gang, gang.split

    def build(clusters, whole_ctas=False):
        gws = real_build(clusters, whole_ctas)
        seen["warps_per_cta"] += [g.warps_per_cta for g in gws]
        return gws

    def split(gws, gw):
        seen["splits"] += 1
        real_split(gws, gw)
    monkeypatch.setattr(gang, "build_gang", build)
    monkeypatch.setattr(gang, "split", split)
    return seen


@pytest.mark.parametrize("whole_ctas", [True, False], ids=["cta_gangs", "warp_gangs"])
@pytest.mark.parametrize("name", list(CASES))
def test_gang_and_warp_by_warp_agree_bit_for_bit(name, whole_ctas, monkeypatch):
    case = CASES[name]()
    assert case.grid[0] * case.grid[1] > 1, "a gang needs several CTAs"
    monkeypatch.setattr(gang, "CTA_GANGS", whole_ctas)
    seen = _spy(monkeypatch)
    out_gang, ref, tol, stats = _run(case, gang.DEFAULT_GANG_LANES)
    monkeypatch.undo()
    out_warp, _, _, _ = _run(case, 0)
    assert torch.equal(out_gang.view(torch.uint8), out_warp.view(torch.uint8))
    assert float((out_gang.double() - ref).abs().max()) <= tol
    assert stats.ctas == case.grid[0] * case.grid[1]
    assert seen["warps_per_cta"] and set(seen["warps_per_cta"]) == {case.kernel.metadata.num_warps if whole_ctas else 1}
    # The FMA and mma.sync kernels' warps run one path (they stay gangs of whole CTAs); the warp-specialised
    # kernel's split where its warps take their roles. (tcgen05 kernels split too: one warp allocates TMEM.)
    if not whole_ctas or name.startswith(("fma", "mma_sync")):
        assert seen["splits"] == 0
    elif name == "ws_fp16":
        assert seen["splits"] == 1


def test_a_gang_step_counts_every_ctas_warp_instruction():
    """The instructions-per-second figure stays comparable: a gang executing one instruction for 16 CTAs counts
    16 warp-instructions, so both modes report the same total for the same work."""
    case = CASES["fma_fp32_32x32"]()
    _, _, _, warp_stats = _run(case, 0)
    _, _, _, gang_stats = _run(case, gang.DEFAULT_GANG_LANES)
    assert gang_stats.instructions == warp_stats.instructions


# --- CTAs that disagree --------------------------------------------------------------------------------------
# Branches that go different ways in different CTAs stay in the gang (lanes of one CTA take one path, as lanes of
# a warp do); per-CTA steps with different outcomes (one CTA's barrier releases, another's does not) dissolve it.
@triton.jit
def _uneven_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if pid % 3 == 2:  # a third of the CTAs leave at once
        return
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(pid % 4):  # per-CTA trip counts
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0) * (i + 1)
    tl.store(out_ptr + offs, acc, mask=offs < n)


def _uneven_reference(x: torch.Tensor, block: int) -> torch.Tensor:
    out = torch.full_like(x, -1.0)
    for pid in range((x.numel() + block - 1) // block):
        if pid % 3 == 2:
            continue
        sl = slice(pid * block, min((pid + 1) * block, x.numel()))
        out[sl] = x[sl] * sum(i + 1 for i in range(pid % 4))
    return out


def test_cta_divergent_control_flow_runs_in_the_gang(monkeypatch):
    n, block = 1000, 128  # masked tail in the last CTA
    x = torch.randn(n)
    results, dissolved = {}, []
    real_dissolve = gang.dissolve
    monkeypatch.setattr(gang, "dissolve", lambda gws, d=None: (dissolved.append(d), real_dissolve(gws, d)))
    for lanes in (gang.DEFAULT_GANG_LANES, 0):
        monkeypatch.setenv("BWTRITON_EMU_GANG_LANES", str(lanes))
        out = torch.full_like(x, -1.0)
        with emu.emulated_gpu("sm_100a"):
            _uneven_kernel[(triton.cdiv(n, block),)](x, out, n, BLOCK=block, num_warps=4)
        results[lanes] = out
    assert not dissolved, "divergent branches are lane divergence, not a reason to dissolve"
    assert torch.equal(results[0], results[gang.DEFAULT_GANG_LANES])
    assert torch.equal(results[0], _uneven_reference(x, block))


# --- the strict model keeps catching races inside gangs -------------------------------------------------------
def test_missing_tma_wait_is_caught_in_a_gang():
    case = CASES["tma_bf16"]()
    text = case.kernel.asm["ptx"]
    with pytest.raises(PoisonReadError, match=r"tcgen05\.mma reads shared memory .* never observed"):
        _run(case, gang.DEFAULT_GANG_LANES, _cut(text, _loop_tma_wait(text)))


def test_missing_fence_before_tma_store_is_caught_in_a_gang():
    case = CASES["tma_bf16"]()
    text = case.kernel.asm["ptx"]
    fence = _line_of(text, r"fence\.proxy\.async")
    lines = text.splitlines()
    bad = "\n".join(lines[:fence - 1] + lines[fence:])
    with pytest.raises(MissingProxyFenceError, match="fence.proxy.async"):
        _run(case, gang.DEFAULT_GANG_LANES, bad)


def test_bad_gang_lanes_are_refused(monkeypatch):
    case = CASES["mma_sync_tf32"]()
    with pytest.raises(Exception, match="gang_lanes must be a non-negative int"):
        _run(case, -1)
    monkeypatch.setenv("BWTRITON_EMU_GANG_LANES", "many")
    args, _, _, _ = case.make()
    md = case.kernel.metadata._asdict()
    with pytest.raises(Exception, match="BWTRITON_EMU_GANG_LANES='many'"):
        emu.run(case.kernel.asm["ptx"], case.grid, *args, num_warps=md["num_warps"], shared=md["shared"])


@pytest.mark.parametrize("name", ["fma_fp32_32x32", "tma_bf16"])
@pytest.mark.parametrize("after_rounds", [1, 3])
def test_dissolving_mid_run_keeps_the_results(name, after_rounds, monkeypatch):
    """Dissolve every gang after a few rounds (wherever its warps are: inside the pipelined K loop, between a
    barrier's arrivals, with copies in flight): the CTAs' warps must take over their state exactly."""
    case = CASES[name]()
    real_step, rounds = gang.step_gang, []

    def step_then_dissolve(gws, clusters, budget):
        rounds.append(1)
        if len(rounds) % (after_rounds + 1) == 0:
            gang.dissolve(gws)
            return 0, True
        return real_step(gws, clusters, 7)  # a small quantum: stop warps at many different places
    monkeypatch.setattr(gang, "step_gang", step_then_dissolve)
    out_gang, ref, tol, _ = _run(case, gang.DEFAULT_GANG_LANES)
    monkeypatch.undo()
    out_warp, _, _, _ = _run(case, 0)
    assert rounds
    assert torch.equal(out_gang.view(torch.uint8), out_warp.view(torch.uint8))
    assert float((out_gang.double() - ref).abs().max()) <= tol


def test_progress_is_shown_while_a_gang_runs(monkeypatch):
    """A gang finishes all its clusters at once, so progress must also be redrawn between rounds: a line
    'clusters 0/16' can only come from such a redraw."""
    import functools
    import io

    from bwtriton.emu.integration import run as runner
    from bwtriton.emu.machine.scheduler import ProgressMeter
    buf = io.StringIO()
    monkeypatch.setattr(runner, "ProgressMeter", functools.partial(ProgressMeter, after_s=0.0, interval_s=0.0, stream=buf))
    case = CASES["fma_fp32_32x32"]()
    args, _, _, _ = case.make()
    md = case.kernel.metadata._asdict()
    emu.run(case.kernel.asm["ptx"], case.grid, *args, num_warps=md["num_warps"], shared=md["shared"], progress=True)
    assert "[emu] clusters 0/16" in buf.getvalue() and "clusters 16/16" in buf.getvalue()


def test_a_commit_covers_only_its_own_ctas_mmas_in_a_gang():
    """The clusters of a gang share one asynchronous engine, and the same warp of every CTA issues MMAs; a
    tcgen05.commit must still cover only its own CTA's (each CTA commits to, and waits on, its own mbarrier)."""
    from types import SimpleNamespace as NS

    from bwtriton.emu.machine.async_engine import AsyncEngine, AsyncOp, issuer_of
    launch = NS(progress=0)
    warps = [NS(cta=NS(ctaid=(i, 0, 0), rank=0), wid=0, launch=launch) for i in range(2)]
    engine = AsyncEngine()
    mmas = [engine.issue(w, AsyncOp(kind="tcgen05.mma", line=1, text="", issuer=issuer_of(w),
                                    tracked_by_commit=True)) for w in warps]
    commit = engine.issue(warps[0], AsyncOp(kind="tcgen05.commit", line=2, text="", issuer=issuer_of(warps[0])))
    assert commit.covers == [mmas[0]]
    engine.complete(commit)
    assert mmas[0].done and not mmas[1].done
