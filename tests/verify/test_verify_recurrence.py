"""The recurrence kernels (tests/fixtures/recurrence_kernels.py: a chunked gated-delta-rule state update with the
state carried as two 64-row tl.dot accumulators) compiled by the installed Triton: Triton packs the two
accumulators into the same TMEM columns at lane offsets 0 and 16, and neither the verifier (P9/P11/P13) nor the
emulator may report a race between them.

Triton 3.6 also hoists the generic -> async proxy fence of the register-computed tile out of the loop (a real
race, the proxy-fence rule's business): the emulator may stop there, but never at a TMEM race."""
from __future__ import annotations

import pytest
import torch

import bwtriton
import bwtriton.emu as emu
from bwtriton.emu.errors import MissingProxyFenceError
from bwtriton.ptx import parse_ptx
from bwtriton.verify import function_contexts, verify_ptx
from bwtriton.verify.checks.tmem_regions import tmem_region
from fixtures import recurrence_kernels as rk

KERNELS = ["delta_state_kernel", "gated_delta_state_kernel"]


def _compile(name: str):
    spec = rk.BWTRITON_SPECS[name]
    return bwtriton.compile(getattr(rk, name), signature=spec["signature"], constexprs=spec["constexprs"],
                            num_warps=spec["num_warps"], num_stages=spec["num_stages"], passes="none")


@pytest.fixture(scope="module", params=KERNELS)
def compiled(request):
    return request.param, _compile(request.param)


def test_triton_packs_the_two_state_accumulators_by_lanes(compiled):
    """The premise: MMA D tiles that share columns at disjoint lanes (else this file tests nothing)."""
    _, r = compiled
    [ctx] = function_contexts(parse_ptx(r.asm["ptx"]))
    tiles = {tmem_region(ctx, i)[1] for i in ctx.func.instructions if i.opcode == "tcgen05.mma"}
    assert None not in tiles
    assert any(a.shares_columns(b) and not a.overlaps(b) for a in tiles for b in tiles)


def test_no_false_tmem_errors(compiled):
    _, r = compiled
    report = verify_ptx(r.asm["ptx"])
    tmem_rules = [f.format() for f in report.errors if f.rule in ("P9", "P11", "P13")]
    assert tmem_rules == []


def test_default_pipeline_compiles_the_kernel():
    """verify-tcgen05 (on by default) used to refuse the kernel with the false P11 errors."""
    spec = rk.BWTRITON_SPECS["delta_state_kernel"]
    r = bwtriton.compile(rk.delta_state_kernel, signature=spec["signature"], constexprs=spec["constexprs"],
                         num_warps=spec["num_warps"], num_stages=spec["num_stages"])
    assert "verify-tcgen05" in r.reports
    assert "tcgen05.mma" in r.asm["ptx"]


def _reference(k: torch.Tensor, v: torch.Tensor, nt: int, bt: int) -> torch.Tensor:
    """H <- H + K_t^T bf16(V_t - K_t bf16(H)), in float64 from the same bf16-rounded operands the kernel uses."""
    h = torch.zeros(k.shape[1], v.shape[1], dtype=torch.float64)
    for t in range(nt):
        kt = k[t * bt:(t + 1) * bt].double()
        hb = h.to(torch.bfloat16).double()
        vb = (v[t * bt:(t + 1) * bt].double() - kt @ hb).to(torch.float32).to(torch.bfloat16).double()
        h = h + kt.T @ vb
    return h


@pytest.mark.emulated
def test_emulator_gets_past_the_packed_accumulators():
    r = _compile("delta_state_kernel")
    bt, v_cols, nt = 64, 64, 2
    g = torch.Generator().manual_seed(0)
    k = (0.25 * torch.randn(nt * bt, rk.K_DIM, generator=g)).to(torch.bfloat16)
    v = torch.randn(nt * bt, v_cols, generator=g).to(torch.bfloat16)
    out = torch.zeros(rk.K_DIM, v_cols, dtype=torch.float32)
    try:
        emu.run(r, (1,), k, v, out, nt)
    except MissingProxyFenceError as exc:   # Triton 3.6's hoisted fence: the real race, reported by its own rule
        assert "tcgen05.mma reads shared memory written through the generic proxy" in str(exc)
        return
    ref = _reference(k, v, nt, bt)
    # bf16(H) and bf16(v_new) are rounded from fp32 sums whose order differs from the reference's: a value on a
    # rounding boundary may round one bf16 ulp (2^-8 relative) the other way, which K^T spreads over a column
    err = float((out.double() - ref).abs().max())
    assert err <= 2 ** -7 * float(ref.abs().max()), err
