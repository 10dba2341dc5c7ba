"""Value numbering over def chains (bwtriton.ptx.values.ValueNumbering): equal keys must mean equal values.

The soundness test checks every x where a 16-bit comparison with a constant can change value (next to each
constant and the signed/unsigned wrap points) plus a spread: whenever two comparisons get the same canonical
key, their truth values (after polarity) must agree there. A key shared by relations that can differ would
let the verifier drop a feasible path and miss a real violation.
"""
from __future__ import annotations

import itertools

import pytest

from bwtriton.ptx import parse_ptx
from bwtriton.ptx.values import ValueNumbering


def _entry(body: str):
    text = (".version 8.8\n.target sm_100a\n.address_size 64\n"
            ".visible .entry k(\n\t.param .u32 k_param_0,\n\t.param .u32 k_param_1\n)\n{\n"
            "\t.reg .pred %p<64>;\n\t.reg .b32 %r<64>;\n\t.reg .b16 %rs<64>;\n" + body + "\tret;\n}\n")
    return parse_ptx(text).entries[0]


def test_equal_def_chains_share_a_key():
    fn = _entry("""
	ld.param.b32 %r1, [k_param_0];
	ld.param.b32 %r2, [k_param_0];
	add.s32 %r3, %r1, -64;
	add.u32 %r4, -64, %r2;
	mov.b32 %r5, %r4;
	ld.param.b32 %r6, [k_param_1];
	add.s32 %r7, %r6, -64;
	mov.u32 %r8, %tid.x;
	mov.u32 %r9, %tid.x;
	mov.u32 %r10, %clock;
	mov.u32 %r11, %clock;
""")
    vn = ValueNumbering(fn)
    key = lambda r: vn.key(next(o for i in fn.instructions for o in i.operands[:1] if o.name == r))  # noqa: E731
    assert key("%r1") == key("%r2") is not None          # the same kernel parameter, loaded twice
    assert key("%r3") == key("%r4") == key("%r5")        # add is commutative and sign-blind; mov copies
    assert key("%r7") != key("%r3")                      # another parameter
    assert key("%r8") == key("%r9") is not None
    # %clock changes: two reads are two values; each register, written once outside loops, names its own
    assert key("%r10") == ("var", "%r10") != key("%r11")


def test_loop_carried_and_guarded_values_have_no_key():
    fn = _entry("""
	ld.param.b32 %r1, [k_param_0];
	mov.b32 %r2, 0;
	setp.gt.s32 %p1, %r1, 0;
	@%p1 mov.b32 %r3, 5;
$L_loop:
	add.s32 %r2, %r2, 1;
	ld.shared.b32 %r4, [%r1];
	setp.lt.s32 %p2, %r2, %r1;
	@%p2 bra $L_loop;
""")
    vn = ValueNumbering(fn)
    op = lambda r: next(o for i in fn.instructions for o in i.operands[:1] if o.name == r)  # noqa: E731
    assert vn.key(op("%r2")) is None      # two definitions (loop counter)
    assert vn.key(op("%r3")) is None      # conditional definition
    # a load written by one instruction names its value until that instruction runs again (the dataflow kills
    # facts about it then); it is not an invariant built from parameters
    assert vn.key(op("%r4")) == ("var", "%r4")
    assert vn.predicate("%p2") is None    # compares a loop-carried value
    assert vn.predicate("%p1") is not None


def test_trip_count_predicates_are_one_fact():
    """The shape Triton emits around a peeled pipeline: `K > 0` guards the prologue, `K < 1` skips the wait."""
    fn = _entry("""
	ld.param.b32 %r1, [k_param_0];
	ld.param.b32 %r2, [k_param_0];
	setp.gt.s32 %p1, %r1, 0;
	setp.lt.s32 %p2, %r2, 1;
	not.pred %p3, %p2;
	setp.le.s32 %p4, %r1, 0;
	setp.lt.s32 %p5, %r1, 2;
	setp.lt.u32 %p6, %r1, 1;
	setp.ne.s32 %p7, %r1, 0;
	setp.eq.s32 %p8, 0, %r2;
""")
    vn = ValueNumbering(fn)
    k1, f1 = vn.predicate("%p1")
    assert vn.predicate("%p2") == (k1, not f1)
    assert vn.predicate("%p3") == (k1, f1)
    assert vn.predicate("%p4") == (k1, not f1)
    assert vn.predicate("%p5")[0] != k1          # K < 2 is not !(K > 0)
    assert vn.predicate("%p6")[0] != k1          # unsigned compare: another relation
    k7, f7 = vn.predicate("%p7")
    assert vn.predicate("%p8") == (k7, not f7)


_RELS = ("eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs")
_PY = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
       "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}
_UNSIGNED = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}


def _truth(rel: str, ty: str, x: int, c: int, const_left: bool) -> bool:
    signed = ty.startswith("s") and rel not in _UNSIGNED
    py = _PY[_UNSIGNED.get(rel, rel)]
    conv = (lambda v: v - (1 << 16) if signed and v >= 1 << 15 else v)
    xv, cv = conv(x & 0xFFFF), conv(c & 0xFFFF)
    return py(cv, xv) if const_left else py(xv, cv)


@pytest.mark.parametrize("ty", ["s16", "u16"])
def test_canonical_comparisons_are_sound_exhaustively(ty):
    consts = (0, 1, 2, -1, 0x7FFF, 0x8000, 0xFFFF)
    cases = [(rel, c, left) for rel in _RELS for c in consts for left in (False, True)]
    lines = ["\tld.param.b16 %rs1, [k_param_0];"]
    for n, (rel, c, left) in enumerate(cases):
        a, b = (str(c), "%rs1") if left else ("%rs1", str(c))
        lines.append(f"\tsetp.{rel}.{ty} %p{n}, {a}, {b};")
    # one function per 60 predicates (the .reg declaration above has 64)
    groups: dict = {}
    for start in range(0, len(cases), 60):
        chunk = cases[start:start + 60]
        body = [lines[0]] + [lines[1 + start + i].replace(f"%p{start + i},", f"%p{i},") for i in range(len(chunk))]
        vn = ValueNumbering(_entry("\n".join(body) + "\n"))
        for i, case in enumerate(chunk):
            canon = vn.predicate(f"%p{i}")
            if canon is not None:
                groups.setdefault(canon[0], []).append((case, canon[1]))
    xs = sorted({(p + d) & 0xFFFF for p in consts for d in range(-3, 4)} | set(range(0, 1 << 16, 251)))
    shared = [g for g in groups.values() if len(g) > 1]
    assert shared, "no two comparisons were recognised as one fact: the test would be vacuous"
    for group in shared:
        (r0, c0, l0), flip0 = group[0]
        want = [_truth(r0, ty, x, c0, l0) != flip0 for x in xs]
        for (r, c, left), flip in group[1:]:
            got = [_truth(r, ty, x, c, left) != flip for x in xs]
            assert got == want, f"{(r0, c0, l0)} and {(r, c, left)} share a key but differ"
