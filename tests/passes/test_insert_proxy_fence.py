"""The `insert-proxy-fence` PTX pass on the recurrence kernels (tests/fixtures/recurrence_kernels.py) and on the
hand-written lit kernels: it repairs exactly the proven P15 races, inside the loop, and leaves correct PTX alone.

Which Triton versions emit the race is a fact about their PTX, not something these tests assume: Triton 3.6.0
hoists the fence above the loop (the pass inserts one fence per kernel), 3.7.1, 3.8.0 and 3.9.0 emit it inside
the loop (the pass changes nothing). The assertions below hold on either kind of output, so the file runs under
every supported Triton; the per-version outcome is recorded in docs/verifier.md (P15).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import bwtriton
from bwtriton.passes import PIPELINE, Stage
from bwtriton.passes.base import PassContext
from bwtriton.passes.insert_proxy_fence import FENCE, InsertProxyFence
from bwtriton.ptx import parse_ptx
from bwtriton.ptx.cfg import cyclic_blocks
from bwtriton.targets import get_target
from bwtriton.verify import function_contexts, verify_ptx
from bwtriton.verify.checks.proxy_fence import proxy_fence_hazards
from fixtures import recurrence_kernels as rk

LIT = Path(__file__).resolve().parents[2] / "test_lit"


def _run_pass(text: str):
    ctx = PassContext(InsertProxyFence.name, get_target("sm_100a"))
    return InsertProxyFence().run(text, ctx), ctx.report


def _proven(text: str) -> list:
    return [h for ctx in function_contexts(parse_ptx(text), "sm_100a", drop_dead=True)
            for h in proxy_fence_hazards(ctx) if h.proven]


def lit_kernel(name: str, case: int = 0) -> str:
    """The PTX of one `// -----` case of a lit file (its comments dropped up to `.version`)."""
    piece = re.split(r"^// -----$", (LIT / name).read_text(), flags=re.M)[case]
    return piece[piece.index(".version"):]


@pytest.fixture(scope="module", params=["delta_state_kernel", "gated_delta_state_kernel"])
def recurrence(request):
    spec = rk.BWTRITON_SPECS[request.param]
    return bwtriton.compile(getattr(rk, request.param), **spec)


def test_pipeline_order():
    row = [cls.name for cls in PIPELINE[Stage.PTX]]
    assert row.index("insert-proxy-fence") < row.index("verify-tcgen05")   # the verifier sees the repair


def test_recurrence_repaired_inside_the_loop_or_left_alone(recurrence):
    triton_ptx = recurrence.asm["ptx_triton"]
    hazards = _proven(triton_ptx)
    report = recurrence.reports["insert-proxy-fence"]
    final = recurrence.asm["ptx"]
    assert not [f for f in verify_ptx(final).findings if f.rule == "P15" and f.severity != "note"]
    if not hazards:   # Triton's PTX is already correct: nothing inserted, no repair in the summary
        assert report["count"] == 0 and "insert-proxy-fence" not in recurrence.summary()["repairs"]
        return
    assert {h.missing for h in hazards} == {"fence"}
    assert recurrence.summary()["repairs"]["insert-proxy-fence"] == report["count"] >= 1
    lines = final.split("\n")
    func = parse_ptx(final).functions[0]
    loop_blocks = cyclic_blocks(func)
    for entry in report["inserted"]:
        assert lines[entry["line"] - 1].strip() == FENCE and entry["placement"] == "before-barrier"
        assert lines[entry["line"]].split() == ["bar.sync", "0;"]
        # inside the loop, after the iteration's store and before the MMA it protects
        store, reader = min(entry["store_lines"]), min(entry["reader_lines"])
        fence_ins = next(i for i in func.instructions if i.line == entry["line"])
        assert func.instructions[fence_ins.index + 1].opcode == "bar"
        assert "tcgen05.mma" in lines[reader - 1] and "st.shared" in lines[store - 1]
        assert fence_ins.block in loop_blocks


def test_pass_is_idempotent_and_keeps_other_lines(recurrence):
    triton_ptx = recurrence.asm["ptx_triton"]
    out, report = _run_pass(triton_ptx)
    if out is None:
        assert report["count"] == 0 and not _proven(triton_ptx)
        return
    added = {e["line"] + k for e in report["inserted"] for k in range(len(e["statements"]))}
    assert [ln for n, ln in enumerate(out.split("\n"), 1) if n not in added] == triton_ptx.split("\n")
    assert _run_pass(out) == (None, {"count": 0, "inserted": []})


@pytest.mark.parametrize("name, placement, carried", [
    ("insert_proxy_fence/hoisted_fence.ptx", "before-barrier", False),
    ("insert_proxy_fence/loop_carried.ptx", "before-barrier", True),
])
def test_lit_races_repaired(name, placement, carried):
    text = lit_kernel(name)
    assert [f.severity for f in verify_ptx(text).by_check("missing-proxy-fence")] == ["error"]
    out, report = _run_pass(text)
    assert report["count"] == 1 and report["inserted"][0]["placement"] == placement
    assert report["inserted"][0]["carried"] is carried
    assert verify_ptx(out).ok and not _proven(out)


def test_cross_warp_gets_the_barrier():
    text = lit_kernel("verify_tcgen05/proxy_fence_cross_warp.ptx", 0)
    assert [h.missing for h in _proven(text)] == ["barrier"]
    out, report = _run_pass(text)
    assert report["inserted"][0]["statements"] == ["bar.sync 0;"]
    assert report["inserted"][0]["placement"] == "after-fence"
    assert verify_ptx(out).ok


@pytest.mark.parametrize("name, case", [("insert_proxy_fence/fenced_in_loop.ptx", 0),
                                        ("insert_proxy_fence/not_proven.ptx", 0),
                                        ("insert_proxy_fence/not_proven.ptx", 1),
                                        ("verify_tcgen05/proxy_fence_cross_warp.ptx", 1)])
def test_nothing_proven_nothing_changed(name, case):
    out, report = _run_pass(lit_kernel(name, case))
    assert out is None and report == {"count": 0, "inserted": []}
