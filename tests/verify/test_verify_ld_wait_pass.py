"""The `insert-tcgen05-wait-ld` PTX pass: adds waits before early tcgen05.ld reads (P9 notes), leaves good PTX alone.

`multi_acc_kernel` with two 128x256 accumulators (num_warps=4, num_stages=2) is the measured case: LLVM hoists
the 64-bit packing of tcgen05.ld results above the `tcgen05.wait::ld` inline asm. The verifier reports such
register reads as notes (a true register dependency is honoured, PTX ISA tcgen05.wait), so the pass is optional
hardening; num_stages=3 would need 245792 bytes of shared memory, over sm_100a's 232448. Triton's PTX
(asm["ptx_triton"]) is what the verifier would see without the pass; asm["ptx"] is the PTX after bwtriton's PTX
passes, which ptxas assembles into the cubin.
"""
from __future__ import annotations

import re

import pytest

import bwtriton
from bwtriton.errors import CompileError
from bwtriton.passes.base import PassContext
from bwtriton.passes.insert_ld_wait import WAIT_LD, InsertTcgen05WaitLd
from bwtriton.ptx import parse_ptx
from bwtriton.targets import get_target
from bwtriton.verify import verify_ptx
from fixtures.kernels import corpus_kernels, corpus_ptx
from fixtures.tmem_kernels import MULTI_ACC_SIGNATURE, multi_acc_kernel


def _run_pass(text: str):
    ctx = PassContext(InsertTcgen05WaitLd.name, get_target("sm_100a"))
    out = InsertTcgen05WaitLd().run(text, ctx)
    return out, ctx.report


@pytest.fixture(scope="module")
def two_acc():
    return bwtriton.compile(multi_acc_kernel, signature=MULTI_ACC_SIGNATURE,
                            constexprs=dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, NUM_ACC=2), num_warps=4,
                            num_stages=2)


def _early_reads(text: str) -> list:
    return [f for f in verify_ptx(text).findings if f.check == "ld-without-wait"]


def test_upstream_ptx_reads_ld_registers_before_the_wait(two_acc):
    report = verify_ptx(two_acc.asm["ptx_triton"])
    reads = _early_reads(two_acc.asm["ptx_triton"])
    assert report.errors == [] and reads and {f.severity for f in reads} == {"note"}
    lines = two_acc.asm["ptx_triton"].splitlines()
    assert re.match(r"\s*(cvt\.u64\.u32|shl\.b64|or\.b64)", lines[reads[0].line - 1])  # the hoisted packing


def test_without_the_pass_the_compile_succeeds_with_p9_notes():
    r = bwtriton.compile(multi_acc_kernel, signature=MULTI_ACC_SIGNATURE,
                         constexprs=dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, NUM_ACC=2), num_warps=4,
                         num_stages=2, passes="-insert-tcgen05-wait-ld")
    assert r.reports["verify-tcgen05"]["counts"]["error"] == 0
    assert r.reports["verify-tcgen05"]["counts"]["note"] >= 1


def test_three_stages_overflow_shared_memory():
    """The same kernel with num_stages=3 needs 245792 bytes: the compile fails naming the knob, and the verifier's
    resource rule (T3) finds the same figure from the PTX plus the compile metadata."""
    kw = dict(signature=MULTI_ACC_SIGNATURE, constexprs=dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, NUM_ACC=2),
              num_warps=4, num_stages=3)
    with pytest.raises(CompileError, match=r"245792 bytes of shared memory.*232448.*lower num_stages \(now 3\)"):
        bwtriton.compile(multi_acc_kernel, **kw)
    res = bwtriton.compile(multi_acc_kernel, check_limits=False, **kw)
    t3 = [f for f in verify_ptx(res.asm["ptx"], shared_bytes=res.metadata["shared"]).errors
          if f.rule == "T3"]
    assert t3 and "245792 bytes" in t3[0].message and "232448" in t3[0].message


def test_default_pipeline_inserts_waits_and_verifies_clean(two_acc):
    rep = two_acc.reports["insert-tcgen05-wait-ld"]
    assert rep["count"] == len(rep["inserted"]) >= 1
    assert two_acc.reports["verify-tcgen05"]["counts"]["error"] == 0
    assert verify_ptx(two_acc.asm["ptx"]).errors == []
    assert two_acc.asm["cubin"][:4] == b"\x7fELF"  # ptxas accepted the edited PTX


def test_each_wait_sits_right_before_the_first_read(two_acc):
    before, after = two_acc.asm["ptx_triton"].splitlines(), two_acc.asm["ptx"].splitlines()
    rep = two_acc.reports["insert-tcgen05-wait-ld"]
    fn = parse_ptx(two_acc.asm["ptx_triton"]).entries[0]
    by_line = {i.line: i for i in fn.instructions}
    for entry in rep["inserted"]:
        assert after[entry["line"] - 1].strip() == WAIT_LD
        ld = by_line[entry["ld_line"]]
        read = by_line[entry["first_read_line"]]
        assert entry["placement"] == "before-first-read" and read.block == ld.block
        assert set(read.uses) & set(ld.defs)
        # nothing between the ld and the read uses its registers (the read really is the first one)
        between = [i for i in fn.instructions if ld.index < i.index < read.index]
        assert not any(set(i.uses) & set(ld.defs) for i in between)
        # the statement after the inserted wait is that read
        assert after[entry["line"]].strip().startswith(read.text.split()[0])
    # nothing else changed: dropping the inserted lines gives back Triton's PTX byte for byte
    inserted = {e["line"] for e in rep["inserted"]}
    assert [ln for n, ln in enumerate(after, 1) if n not in inserted] == before


@pytest.mark.parametrize("name", sorted(corpus_kernels()))
def test_correct_ptx_is_left_byte_identical(name):
    text = corpus_ptx(name)
    out, rep = _run_pass(text)
    assert out is None and rep["count"] == 0 and rep["inserted"] == []


_BODY = """.version 8.8
.target sm_100a
.address_size 64
.visible .entry k(
	.param .u64 k_param_0
)
{{
	.reg .pred %p<4>;
	.reg .b32 %r<40>;
	.reg .b64 %rd<8>;
	ld.param.b64 %rd1, [k_param_0];
	ld.param.b32 %r4, [k_param_0+8];
	mov.u32 %r1, %tid.x;
{body}
	ret;
}}
"""


def test_loop_carried_read_gets_the_wait_at_the_end_of_the_ld_block():
    """The read is at the top of the loop body, the ld at its bottom: only the next iteration reads early."""
    text = _BODY.format(body="""	mov.b32 %r10, 0;
	mov.b32 %r2, 0;
$L_loop:
	add.s32 %r20, %r20, %r10;
	tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r10}, [%r4];
	add.s32 %r2, %r2, 1;
	setp.lt.s32 %p1, %r2, 4;
	@%p1 bra $L_loop;
	tcgen05.wait::ld.sync.aligned;
	st.global.b32 [%rd1], %r20;""")
    assert [(f.severity, f.check) for f in _early_reads(text)] == [("note", "ld-without-wait")]
    out, rep = _run_pass(text)
    assert [e["placement"] for e in rep["inserted"]] == ["end-of-block"]
    lines = out.splitlines()
    wait = rep["inserted"][0]["line"]
    assert lines[wait - 1].strip() == WAIT_LD and lines[wait].strip() == "@%p1 bra $L_loop;"
    assert _early_reads(out) == []


def test_no_legal_spot_is_left_to_the_verifier():
    """A read sharing its line with another statement: the pass cannot put a line between them."""
    text = _BODY.format(body="""	tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r10}, [%r4];
	add.s32 %r3, %r1, 1; add.s32 %r11, %r10, 1;
	tcgen05.wait::ld.sync.aligned;
	st.global.b32 [%rd1], %r11;""")
    out, rep = _run_pass(text)
    assert out is None and rep["count"] == 0
    assert rep["left_to_verifier"] == [{"function": "k", "ld_line": 14, "read_lines": [15]}]
    assert [(f.severity, f.line) for f in _early_reads(text)] == [("note", 15)]


def test_pass_is_registered_for_tcgen05_targets_only():
    p = InsertTcgen05WaitLd()
    assert p.applies_to(get_target("sm_100a")) and not p.applies_to(get_target("sm_90a"))
    order = list(bwtriton.passes.all_passes())  # PIPELINE order: the verifier checks the repaired PTX
    assert order.index(InsertTcgen05WaitLd.name) < order.index("verify-tcgen05")


def test_fall_through_block_gets_the_wait_after_its_last_statement():
    """The ld's block falls into a label (a join point): the wait goes after the block's last instruction."""
    text = _BODY.format(body="""	setp.lt.s32 %p1, %r1, 4;
	tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r10}, [%r4];
	add.s32 %r3, %r1, 1;
$L_join:
	add.s32 %r11, %r10, %r3;
	tcgen05.wait::ld.sync.aligned;
	st.global.b32 [%rd1], %r11;""")
    out, rep = _run_pass(text)
    assert [e["placement"] for e in rep["inserted"]] == ["end-of-block"]
    lines = out.split("\n")
    wait = rep["inserted"][0]["line"]
    assert lines[wait - 2].strip() == "add.s32 %r3, %r1, 1;" and lines[wait - 1].strip() == WAIT_LD
    assert lines[wait].strip() == "$L_join:"
    assert _early_reads(out) == []
