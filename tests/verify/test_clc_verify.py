"""The CLC protocol checks (C1-C5) on what the compiler really emits: clean as emitted, and each mutation of
the emitted round trip is caught (the hand-written mutants are in test_lit/clc/verify_*.ptx)."""
from __future__ import annotations

import functools

import pytest

import bwtriton
from bwtriton.kernels.clc_schedule import SIGNATURE, clc_schedule_kernel
from bwtriton.verify import verify_ptx


@functools.lru_cache(maxsize=None)
def _ptx(num_ctas: int) -> str:
    return bwtriton.compile(clc_schedule_kernel, signature=SIGNATURE, target="sm_100a", num_ctas=num_ctas,
                            constexprs={"USE_CLC": True, "NUM_CTAS": num_ctas}).asm["ptx"]


def _clc_findings(ptx: str) -> list:
    return [f for f in verify_ptx(ptx).findings if f.check.startswith("clc-")]


@pytest.mark.parametrize("num_ctas", [1, 2])
def test_emitted_round_trip_is_clean(num_ctas):
    assert _clc_findings(_ptx(num_ctas)) == []


@pytest.mark.parametrize("old,new,check", [
    ("@%bwclc_lead clusterlaunchcontrol", "clusterlaunchcontrol", "clc-request-threads"),
    ("[bwclc_bar], 0;", "[bwclc_bar], 1;", "clc-wait-phase"),
    ("expect_tx.shared::cta.b64 _, [bwclc_bar], 16;", "expect_tx.shared::cta.b64 _, [bwclc_bar], 32;",
     "clc-expect-tx"),
    ("clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %bwclc_ok, %bwclc_r;",
     "setp.ne.u64 %bwclc_ok, %bwclc_hi, 0;", "clc-raw-decode"),
    ("bwclc_wait:\n", "ld.shared.v2.b64 {%bwclc_lo, %bwclc_hi}, [bwclc_resp];\nbwclc_wait:\n",
     "clc-read-before-wait"),
])
def test_mutated_round_trip_is_caught(old, new, check):
    ptx = _ptx(1)
    assert old in ptx
    found = _clc_findings(ptx.replace(old, new, 1))
    assert [f.check for f in found if f.severity == "error"] == [check], found


def test_cluster_issuer_guard_or_is_not_one_thread():
    # the emitted guard is and.pred(%cluster_ctarank == 0, %tid.x == 0); an or.pred of them is a thread per CTA
    ptx = _ptx(2).replace("and.pred %bwclc_issuer, %bwclc_rank0, %bwclc_lead;",
                          "or.pred %bwclc_issuer, %bwclc_rank0, %bwclc_lead;")
    assert [f.severity for f in _clc_findings(ptx)] == ["warning"]
