"""P15 (generic -> async proxy ordering): the verifier and the emulator agree on every racy and correct form, under
both emulator schedules, and a kernel bwtriton repairs runs exactly on the emulated B200.

Kernels: the hand-written lit kernels (a loop whose fence sits above it, a loop-carried store, 4 warps storing an
operand with a fence but no CTA barrier) and the recurrence kernel `delta_state_kernel` compiled by the running
Triton (tests/fixtures/recurrence_kernels.py: racy as Triton 3.6.0 emits it, correct from 3.7.1 on).
"""
from __future__ import annotations

import pytest
import torch

import bwtriton
import bwtriton.emu as emu
from bwtriton.emu.errors import MissingProxyFenceError, UnorderedGenericStoreError
from bwtriton.verify import verify_ptx
from fixtures import recurrence_kernels as rk
from passes.test_insert_proxy_fence import _proven, _run_pass, lit_kernel

SCHEDULES = ("latest", "eager")
NT = 3   # chunks: the race needs a second iteration (the first one is fenced before the loop)


def _emulate(ptx: str, schedule: str, *args) -> None:
    emu.run(ptx, (1,), *args, triton_abi=False, schedule=schedule)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("name", ["insert_proxy_fence/hoisted_fence.ptx", "insert_proxy_fence/loop_carried.ptx"])
def test_loop_race_both_tools_then_repaired(name, schedule):
    text = lit_kernel(name)
    (finding,) = verify_ptx(text).by_check("missing-proxy-fence")
    assert finding.severity == "error"
    with pytest.raises(MissingProxyFenceError) as err:
        _emulate(text, schedule, NT)
    # the emulator names the same reader and store as the verifier (lines of the same text)
    assert f"PTX line {finding.line}:" in str(err.value) and f"PTX line {finding.related_line} " in str(err.value)
    repaired, _ = _run_pass(text)
    assert verify_ptx(repaired).ok
    _emulate(repaired, schedule, NT)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_cross_warp_needs_the_barrier_in_both_tools(schedule):
    racy, good = (lit_kernel("verify_tcgen05/proxy_fence_cross_warp.ptx", i) for i in (0, 1))
    (finding,) = verify_ptx(racy).by_check("proxy-fence-unsynced")
    assert finding.severity == "error"
    with pytest.raises(UnorderedGenericStoreError, match=rf"PTX line {finding.line}: .* stored through the generic "
                                                        rf"proxy at PTX line {finding.related_line},"):
        _emulate(racy, schedule)
    assert verify_ptx(good).ok
    _emulate(good, schedule)
    repaired, _ = _run_pass(racy)
    _emulate(repaired, schedule)


def _reference(k: torch.Tensor, v: torch.Tensor, bt: int) -> torch.Tensor:
    """float64 state update with the kernel's two bf16 roundings (the state fed to the first dot, and the tile
    fed to the second), so only the accumulation precision differs from the kernel's fp32."""
    h = torch.zeros(128, v.shape[1], dtype=torch.float64)
    for t in range(k.shape[0] // bt):
        kt = k[t * bt:(t + 1) * bt].double()
        vb = (v[t * bt:(t + 1) * bt].double() - kt @ h.to(torch.bfloat16).double()).float().to(torch.bfloat16)
        h = h + kt.T @ vb.double()
    return h


@pytest.fixture(scope="module")
def delta_inputs():
    gen = torch.Generator().manual_seed(0)
    k = (torch.randn(NT * 64, 128, generator=gen) / 8).to(torch.bfloat16)
    v = torch.randn(NT * 64, 64, generator=gen).to(torch.bfloat16)
    return k, v


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_recurrence_kernel_race_and_exact_repair(schedule, delta_inputs):
    k, v = delta_inputs
    spec = rk.BWTRITON_SPECS["delta_state_kernel"]
    res = bwtriton.compile(rk.delta_state_kernel, **spec)
    triton_ptx = res.asm["ptx_triton"]
    hazards = _proven(triton_ptx)
    if hazards:   # this Triton hoists the fence: both tools must name the race, the pipeline must repair it
        out = torch.zeros(128, 64)
        with pytest.raises(MissingProxyFenceError) as err:
            emu.run(triton_ptx, (1,), k, v, out, NT, schedule=schedule)
        msg = str(err.value)
        assert any(f"PTX line {h.reader.line}:" in msg for h in hazards)
        stores = {h.write.line for h in hazards}
        assert any(f"at PTX line {n} " in msg for n in range(min(stores), max(stores) + 4))  # a v4 store group
        assert res.summary()["repairs"]["insert-proxy-fence"] >= 1
    out = torch.zeros(128, 64)
    emu.run(res, (1,), k, v, out, NT, schedule=schedule)
    ref = _reference(k, v, 64)
    # fp32 accumulation of 64-term dot products against float64 (the bf16 roundings are reproduced): relative
    # error of order 64 * 2**-24 per step; 1e-5 of the largest value leaves room for NT steps, far below a bf16
    # ulp (2**-8), so a stale tile (a missed fence) could not pass
    assert (out.double() - ref).abs().max().item() <= 1e-5 * ref.abs().max().item()
