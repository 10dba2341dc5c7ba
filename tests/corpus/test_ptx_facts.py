"""The corpus's text-level PTX facts (corpus/blackwell_bugs/ptx_facts.py) on small hand-written bodies: which
async-proxy readers follow a st.shared with no fence.proxy.async, inside a loop and across its back edge, and
which tcgen05.st follows a tcgen05.ld with no barrier."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "corpus" / "blackwell_bugs" / "ptx_facts.py"
_SPEC = importlib.util.spec_from_file_location("_bwbug_ptx_facts", _PATH)
facts_module = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = facts_module  # dataclasses look their module up while the class is built
_SPEC.loader.exec_module(facts_module)
ptx_facts = facts_module.ptx_facts

MMA = "@%p1 tcgen05.mma.cta_group::1.kind::f16 [%r1 + 0], %rd1, %rd2, %r2, %p2;"
ST = "st.shared.v4.b32 [%r3], {%r4, %r5, %r6, %r7};"
FENCE = "fence.proxy.async.shared::cta;"


def _loop(*body: str) -> str:
    return "\n".join(["$L__BB0_1:", *body, "@%p3 bra $L__BB0_1;", "ret;"])


@pytest.mark.parametrize("body, unfenced", [
    ((ST, MMA), [3]),                      # written then read in the same iteration, no fence
    ((ST, FENCE, MMA), []),                # fenced
    ((MMA, ST), [2]),                      # written at the end of one iteration, read at the top of the next
    ((FENCE, MMA, ST), []),                # the fence at the top covers the back edge
    ((MMA, "add.s32 %r1, %r1, 1;"), []),  # no shared-memory write at all
])
def test_unfenced_mma_in_loop(body, unfenced):
    assert ptx_facts(_loop(*body)).unfenced_mma_in_loop == unfenced


def test_mma_outside_a_loop_is_not_a_loop_fact():
    assert ptx_facts("\n".join([ST, MMA, "ret;"])).unfenced_mma_in_loop == []


def test_tma_store_after_st_shared():
    store = "@%p1 cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd1, {%r1, %r2}], [%r3];"
    assert ptx_facts("\n".join([ST, store])).unfenced_tma_store == [2]
    assert ptx_facts("\n".join([ST, FENCE, store])).unfenced_tma_store == []


def test_tmem_store_after_load_without_a_barrier():
    ld = "tcgen05.ld.sync.aligned.16x32bx2.x16.b32 {%r1, %r2}, [%r9 + 0], 16;"
    wait = "tcgen05.wait::ld.sync.aligned;"
    st = "tcgen05.st.sync.aligned.16x32bx2.x8.b32 [%r8 + 0], 8, {%r3, %r3};"
    assert ptx_facts("\n".join([ld, wait, st])).tmem_st_after_ld_unsynced == [(1, 3)]  # wait::ld is per thread
    assert ptx_facts("\n".join([ld, wait, "bar.sync 0;", st])).tmem_st_after_ld_unsynced == []


def test_counts_and_mma_sync_forms():
    text = "\n".join(["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1}, {%r1}, {%r2}, {%f2};"] * 2
                     + [FENCE, "bar.sync 0;", "mbarrier.arrive.shared.b64 _, [%r1];"])
    f = ptx_facts(text)
    assert (f.mma_sync, f.fence_proxy_async, f.bar_sync, f.mbarrier_arrive) == (2, 1, 1, 1)
    assert f.mma_sync_forms == {"m16n8k16.row.col.f32.bf16.bf16.f32": 2}
