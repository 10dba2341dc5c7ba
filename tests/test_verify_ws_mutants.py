"""Faults planted into the PTX of our warp-specialized kernels (`fixtures.ws_mutants`) must be verifier errors,
and the unmutated kernels must stay clean.

Kernels: the tutorial-09-style warp-specialized K loop (`t09_ws_tile`: one tile per CTA, loader / MMA / epilogue
partitions under Triton 3.6's brx dispatch) and the persistent warp-specialized GEMM (`t09_persistent_desc_ws`,
double-buffered accumulator). `EXPECTED` lists the (kernel, fault) pairs the verifier catches; the pairs it
does not catch yet are in `NOT_YET` with why, so a change that catches one must move it. The caught rate is
printed (pytest -s) and asserted per pair.
"""
from __future__ import annotations

import functools

import pytest

import bwtriton
from bwtriton.verify import verify_ptx
from fixtures import upstream_style as us
from fixtures import ws_mutants as wm

KERNELS = ("t09_ws_tile", "t09_persistent_desc_ws")

#: (kernel, fault) -> why the verifier does not decide it yet
NOT_YET = {
    ("t09_persistent_desc_ws", "ld_lane_plus32"):
        "the epilogue's TMEM address is base + loop-carried buffer * 128: the lane expression is not modelled",
}


@functools.lru_cache(maxsize=None)
def _ptx(kernel: str) -> str:
    return bwtriton.compile(us.CASES[kernel][0], **us.options(kernel, True, 3, 4, 1)).asm["ptx"]


def _pairs():
    return [(k, f) for k in KERNELS for f in wm.FAULTS]


@pytest.mark.parametrize("kernel", KERNELS)
def test_unmutated_kernel_is_clean(kernel):
    report = verify_ptx(_ptx(kernel))
    assert [f.format() for f in report.findings if f.severity in ("error", "warning")] == []


@pytest.mark.parametrize("kernel,fault", _pairs(), ids=[f"{k}-{f}" for k, f in _pairs()])
def test_planted_fault_is_an_error(kernel, fault):
    mutated = wm.FAULTS[fault](_ptx(kernel))
    if mutated is None:
        pytest.skip(f"{kernel} has no place for {fault}")
    assert mutated != _ptx(kernel)
    errors = verify_ptx(mutated).errors
    if (kernel, fault) in NOT_YET:
        assert not errors, f"now caught ({errors[0].check}): move it out of NOT_YET"
        pytest.xfail(NOT_YET[(kernel, fault)])
    assert errors, f"{fault} planted into {kernel} is not reported"


def test_caught_rate_report(capsys):
    """The rate over all applicable (kernel, fault) pairs, printed for the record; at least the EXPECTED share."""
    applicable = caught = 0
    for kernel, fault in _pairs():
        mutated = wm.FAULTS[fault](_ptx(kernel))
        if mutated is None:
            continue
        applicable += 1
        caught += bool(verify_ptx(mutated).errors)
    with capsys.disabled():
        print(f"\nwarp-specialized planted faults caught: {caught}/{applicable}")
    assert caught == applicable - sum(1 for p in NOT_YET if wm.FAULTS[p[1]](_ptx(p[0])) is not None)
