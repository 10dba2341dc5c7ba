"""The 2-CTA hand-off faults of docs/two_cta.md that are statically decidable are verifier errors on the real
`pair-ctas-handoff` output (the TMA matmul with B read as b.T, one 256x128 pair tile, 3 stages), and the
rewritten kernel stays clean. The same edits make the emulated run fail (tests/passes/test_passes_pair_ctas_handoff.py).
"""
from __future__ import annotations

import functools
import re

import pytest

import bwtriton
from bwtriton.examples.tma_matmul import matmul_tma_bt_kernel, tma_bt_spec
from bwtriton.verify import verify_ptx

#: one CTA's TMA bytes per stage: (128 rows of A + 64 columns of B) x 64 fp16
_CTA_BYTES = (128 + 64) * 64 * 2


@functools.lru_cache(maxsize=None)
def _ptx() -> str:
    return bwtriton.compile(matmul_tma_bt_kernel, two_cta=True, **tma_bt_spec("fp16", block_k=64)).asm["ptx"]


def _mutate(ptx: str, pattern: str, repl: str) -> str:
    new, n = re.subn(pattern, repl, ptx)
    assert n, f"{pattern!r} not in the kernel: its PTX changed shape"
    return new


def test_handoff_kernel_is_clean():
    report = verify_ptx(_ptx())
    assert [f.format() for f in report.findings if f.severity in ("error", "warning")] == []


def test_triton_own_two_cta_mainloop_is_clean():
    """Without the hand-off pass each CTA's TMAs complete on its own barrier, which expects that CTA's half; the
    peer's half reaches the leader's MMAs through Triton's cluster barrier per K step. Not a short count."""
    ptx = bwtriton.compile(matmul_tma_bt_kernel, two_cta=True, passes=["-pair-ctas-handoff", "-verify-tcgen05"],
                           **tma_bt_spec("fp16", block_k=64)).asm["ptx"]
    assert "mapa" not in ptx and f", {_CTA_BYTES};" in ptx
    assert [f.format() for f in verify_ptx(ptx).findings if f.check == "tma-bytes-short"] == []


def test_leader_expecting_only_its_own_bytes_is_an_error():
    n = _CTA_BYTES
    ptx = _mutate(_ptx(), rf"selp\.b32 \t%bwho_tx{n}, {2 * n},", f"selp.b32 \t%bwho_tx{n}, {n},")
    errors = verify_ptx(ptx).errors
    assert [e.check for e in errors] and {e.check for e in errors} == {"tma-bytes-short"}
    # the pair's 4 MMAs of a stage read 4 x (256 + 128) x 32 bytes
    assert f"read {4 * (256 + 128) * 32} bytes" in errors[0].message and f"at most {n}" in errors[0].message


@pytest.mark.parametrize("mask", [1, 2])
def test_multicast_commit_missing_a_cta_is_an_error(mask):
    ptx = _mutate(_ptx(), r"mov\.b16 \t(%rs\d+), 3;", rf"mov.b16 \t\1, {mask};")
    errors = verify_ptx(ptx).errors
    assert errors and {e.check for e in errors} == {"cta-mask-partial"}
    assert f"mask is {mask:#04b}" in errors[0].message


def test_dropped_peer_arrival_is_an_error():
    """Every TMA left on its own CTA's barrier (mov instead of mapa, as the emulated fault): per phase the leader
    expects both halves and gets its own, the peer expects 0 and gets its half."""
    ptx = _mutate(_ptx(), r"mapa\.shared::cluster\.u32 \t(%bwho_bar), (%r\d+), %bwho_leader;", r"mov.u32 \t\1, \2;")
    errors = verify_ptx(ptx).errors
    assert errors and {e.check for e in errors} == {"tma-bytes-unbalanced"}
    lines = ptx.splitlines()
    # one error per barrier with an expect_tx (3 prologue stages and the loop's refill), each at a TMA load
    assert len(errors) == 4 and all("cp.async.bulk.tensor" in lines[e.line - 1] for e in errors)
    n = 2 * _CTA_BYTES
    assert f"CTA rank 0 expects {n} bytes and receives the TMAs of rank(s) 0;" in errors[0].message
    assert "CTA rank 1 expects 0 bytes and receives the TMAs of rank(s) 1" in errors[0].message


_WAIT_SCOPE = (r"\{\s*\.reg \.pred complete;\s*waitLoop:\s*mbarrier\.try_wait\.parity\.shared\.b64 complete, "
               r"\[(%r\d+)\], (%r\d+);\s*@!complete bra\.uni waitLoop;\s*\}")


def test_early_refill_is_an_error():
    """The in-loop wait on the MMA barrier before the refill dropped: the refill overwrites the stage the
    previous iteration's pair MMA may still read (P16 across iterations)."""
    ptx = _ptx()
    scopes = list(re.finditer(_WAIT_SCOPE, ptx))
    refill_waits = [m for m in scopes if re.search(r"^[^\n]*expect_tx", ptx[m.end():].split("tcgen05.mma")[0], re.M)]
    assert refill_waits, "no wait before a refill found: the kernel's PTX changed shape"
    m = refill_waits[-1]
    mutant = ptx[:m.start()] + ptx[m.end():]
    errors = verify_ptx(mutant).errors
    lines = mutant.splitlines()
    assert errors and {e.check for e in errors} == {"stage-reuse"}
    assert all("cp.async.bulk.tensor" in lines[e.line - 1] for e in errors)
