"""Path feasibility in the verifier: branches on equal values are one fact, different values are not.

The kernel below has the shape Triton 3.6 emits around a peeled software pipeline (and that plan-tmem's loop
fission triplicates): `K > 0` guards the prologue MMA and a separately computed `K < 1` skips the mbarrier wait
after the loop. The path "MMA issued, wait skipped" is infeasible only because both predicates test the same
value; every mutation that breaks that equality must bring the accumulator-read error back.
"""
from __future__ import annotations

import pytest

from bwtriton.verify import verify_ptx

TRIP = r"""
.version 8.8
.target sm_100a
.address_size 64
.extern .shared .align 16 .b8 global_smem[];
.visible .entry trip(
	.param .u32 trip_param_0,
	.param .u32 trip_param_1,
	.param .u64 trip_param_2
)
.reqntid 128
{
	.reg .pred 	%p<10>;
	.reg .b32 	%r<40>;
	.reg .b64 	%rd<10>;
	ld.param.b32 	%r1, [trip_param_0];
	ld.param.b64 	%rd1, [trip_param_2];
	mov.u32 	%r2, %tid.x;
	setp.lt.u32 	%p1, %r2, 32;
	mov.b32 	%r3, global_smem;
	@%p1 tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r3], 128;
	bar.sync 	0;
	ld.shared.b32 	%r4, [global_smem];
	bar.sync 	0;
	@%p1 tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
	add.s32 	%r5, %r3, 16;
	cvt.u64.u32 	%rd2, %r5;
	mov.b32 	%r6, 136314896;
	mov.pred 	%p4, 0;
	add.s32 	%r20, %r1, -64;
	setp.gt.s32 	%p2, %r20, 0;
	elect.sync 	%r7|%p3, -1;
	@!%p2 bra 	$L__skip_mma;
	@%p3 tcgen05.mma.cta_group::1.kind::f16 [ %r4 + 0 ], %rd1, %rd1, %r6, %p4;
	@%p3 tcgen05.commit.cta_group::1.mbarrier::arrive::one.b64 [%rd2];
$L__skip_mma:
	ld.param.b32 	%r8, [trip_param_0];
	add.u32 	%r21, -64, %r8;
	setp.lt.s32 	%p5, %r21, 1;
	@%p5 bra 	$L__skip_wait;
	{
	.reg .pred complete;
	waitLoop:
	mbarrier.try_wait.parity.shared.b64 complete, [%r5], 0;
	@!complete bra.uni waitLoop;
	}
$L__skip_wait:
	tcgen05.ld.sync.aligned.32x32b.x4.b32 {%r10, %r11, %r12, %r13}, [%r4];
	tcgen05.wait::ld.sync.aligned;
	add.s32 	%r14, %r10, %r13;
	st.global.b32 	[%rd1], %r14;
	bar.sync 	0;
	@%p1 tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r4, 128;
	ret;
}
"""


def _unsynced(text: str) -> list:
    return [f for f in verify_ptx(text).findings if f.check == "acc-read-unsynced"]


def test_equal_trip_count_predicates_make_the_unsynced_path_infeasible():
    report = verify_ptx(TRIP)
    assert [f.format("trip") for f in report.findings if f.severity in ("error", "warning")] == []


@pytest.mark.parametrize("old,new,why", [
    ("setp.lt.s32 \t%p5, %r21, 1;", "setp.lt.s32 \t%p5, %r21, 2;", "K-64 < 2 holds for K-64 == 1"),
    ("ld.param.b32 \t%r8, [trip_param_0];", "ld.param.b32 \t%r8, [trip_param_1];", "another parameter"),
    ("add.u32 \t%r21, -64, %r8;", "add.u32 \t%r21, -96, %r8;", "another offset: K in [65, 96] runs the MMA and skips the wait"),
    ("setp.lt.s32 \t%p5, %r21, 1;", "setp.lt.u32 \t%p5, %r21, 2;", "unsigned K-64 < 2 holds for K-64 == 1"),
    ("ld.param.b32 \t%r8, [trip_param_0];", "ld.shared.b32 \t%r8, [%r3+32];", "a value loaded from memory"),
    ("@%p5 bra", "@!%p5 bra", "wait skipped exactly when the MMA ran"),
])
def test_unequal_predicates_keep_the_error(old, new, why):
    assert old in TRIP
    findings = _unsynced(TRIP.replace(old, new))
    assert findings and findings[0].severity == "error", why
    ld_line = next(n for n, t in enumerate(TRIP.splitlines(), 1) if "tcgen05.ld." in t)
    assert findings[0].line == ld_line


@pytest.mark.parametrize("old,new,why", [
    ("setp.lt.s32 \t%p5, %r21, 1;", "setp.lt.u32 \t%p5, %r21, 1;", "x > 0 (signed) and x <u 1 (x == 0) contradict"),
    ("add.u32 \t%r21, -64, %r8;", "add.u32 \t%r22, -63, %r8;\n\tadd.s32 \t%r21, %r22, -1;",
     "the same value computed in two steps: only arithmetic relates the keys"),
])
def test_arithmetic_contradictions_are_infeasible(old, new, why):
    """Keys differ, so only the solver (z3 over the def chains) sees that the two branches cannot disagree."""
    looped = TRIP.replace(old, new)
    assert looped != TRIP
    assert [f.format() for f in _unsynced(looped)] == [], why


def test_redefined_operand_is_not_the_same_value():
    """%r21 recomputed inside a loop has two definitions: facts about it are per-register again."""
    looped = TRIP.replace("$L__skip_mma:\n", "$L__skip_mma:\n\tadd.s32 \t%r20, %r20, 1;\n")
    looped = looped.replace("add.u32 \t%r21, -64, %r8;", "mov.b32 \t%r21, %r20;")
    assert _unsynced(looped) and _unsynced(looped)[0].severity == "error"


RELOAD = r"""
.version 8.8
.target sm_100a
.extern .shared .align 16 .b8 global_smem[];
.visible .entry reload(.param .u32 reload_param_0)
.reqntid 32
{
	.reg .pred 	%p<10>;
	.reg .b32 	%r<40>;
	.reg .b64 	%rd<10>;
	ld.param.b32 	%r9, [reload_param_0];
	mov.b32 	%r3, global_smem;
	tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r3], 128;
	bar.sync 	0;
	ld.shared.b32 	%r4, [global_smem];
	tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
	add.s32 	%r5, %r3, 16;
	mbarrier.init.shared::cta.b64 [%r5], 1;
	mov.b64 	%rd1, 4611756662049472512;
	mov.b32 	%r6, 136314896;
	mov.pred 	%p4, 0;
	mov.b32 	%r2, 0;
$L__top:
	ld.shared.b32 	%r8, [%r3+32];
	setp.lt.s32 	%p5, %r8, 1;
	@%p5 bra 	$L__skip_wait;
$L__wait:
	mbarrier.try_wait.parity.shared::cta.b64 %p6, [%r5], 0;
	@!%p6 bra 	$L__wait;
$L__skip_wait:
	tcgen05.ld.sync.aligned.32x32b.x4.b32 {%r10, %r11, %r12, %r13}, [%r4];
	tcgen05.wait::ld.sync.aligned;
	setp.gt.s32 	%p2, %r8, 0;
	@!%p2 bra 	$L__next;
	elect.sync 	%r7|%p3, -1;
	@%p3 tcgen05.mma.cta_group::1.kind::f16 [ %r4 + 0 ], %rd1, %rd1, %r6, %p4;
	@%p3 tcgen05.commit.cta_group::1.mbarrier::arrive::one.b64 [%r5];
$L__next:
	add.s32 	%r2, %r2, 1;
	setp.lt.s32 	%p7, %r2, %r9;
	@%p7 bra 	$L__top;
	tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r4, 128;
	ret;
}
"""


def test_facts_about_a_reloaded_value_die_when_it_is_reloaded():
    """K reloaded from memory each iteration: "K > 0" (the MMA ran) in one iteration and "K < 1" (wait skipped)
    in the next are both possible, so the facts about %r8 must die at the reload and the error stays."""
    found = _unsynced(RELOAD)
    assert found and found[0].severity == "error"
    ld_line = next(n for n, t in enumerate(RELOAD.splitlines(), 1) if "tcgen05.ld." in t)
    assert found[0].line == ld_line
    # the same kernel with K loaded once before the loop: then the two facts do contradict, no finding
    hoisted = RELOAD.replace("$L__top:\n\tld.shared.b32 \t%r8, [%r3+32];", "\tld.shared.b32 \t%r8, [%r3+32];\n$L__top:")
    assert hoisted != RELOAD and _unsynced(hoisted) == []
