"""The verifier on real Triton 3.6 sm_100a PTX: zero errors/warnings on good kernels, and every mutation caught.

Mutations edit a real kernel's PTX the way a broken compiler pass would (drop a dealloc, change a column count,
flip descriptor bits...). Each asserts the specific check id fires (and for errors, that the line points at the
mutated instruction or its partner), so a check that silently stops working fails here.
"""
from __future__ import annotations

import re

import pytest

from bwtriton.ptx import parse_ptx
from bwtriton.ptx.descriptors import decode_idesc
from bwtriton.verify import verify_ptx
from fixtures.kernels import bad_kernels, corpus_kernels, corpus_ptx

GOOD = sorted(corpus_kernels())


@pytest.mark.parametrize("name", GOOD)
def test_no_false_positives(name):
    report = verify_ptx(corpus_ptx(name))
    bad = [f.format(name) for f in report.findings if f.severity in ("error", "warning")]
    assert bad == [], "\n".join(bad)


def test_corpus_exercises_tcgen05():
    """Guard against a vacuous corpus: the good kernels really contain the instructions the checks look at."""
    kinds = set()
    groups = set()
    for name in GOOD:
        mod = parse_ptx(corpus_ptx(name))
        for ins in mod.entries[0].find("tcgen05.mma"):
            kinds.add(ins.modifier_value("kind"))
            groups.add(ins.modifier_value("cta_group"))
    assert {"f16", "tf32", "f8f6f4", "mxf8f6f4", "mxf4", "mxf4nvf4"} <= kinds
    assert groups == {"1", "2"}
    assert "tcgen05.cp" in corpus_ptx("tma_scaled_nvfp4")
    assert "brx.idx" in corpus_ptx("ws_tma_matmul")


def test_trap_kernel_rejected():
    text = bad_kernels()["tmem_overflow_trap"]()
    report = verify_ptx(text)
    assert [f.check for f in report.errors] == ["trap-only-body"]
    assert "trap" in text.splitlines()[report.errors[0].line - 1]


# ---------------------------------------------------------------------------------------------------------------
def _lines(text):
    return text.splitlines()


def _line_of(text, pattern):
    for i, line in enumerate(_lines(text), 1):
        if re.search(pattern, line):
            return i
    raise AssertionError(f"pattern {pattern!r} not in PTX")


def _replace_line(text, pattern, new, count=1):
    out, n = [], 0
    for line in _lines(text):
        if n < count and re.search(pattern, line):
            out.append(new(line) if callable(new) else new)
            n += 1
        else:
            out.append(line)
    assert n, f"pattern {pattern!r} not found"
    return "\n".join(out) + "\n"


def _checks(text, severity="error"):
    return {f.check for f in verify_ptx(text).findings if f.severity == severity}


def _idesc_line_value(text):
    """The `mov.b32 %rX, <imm>` that feeds the first tcgen05.mma's idesc operand."""
    mod = parse_ptx(text)
    fn = mod.entries[0]
    mma = fn.find("tcgen05.mma")[0]
    (d,) = fn.definitions(mma.operands[3].name)
    return d.line, d.operands[1].value


def _set_idesc(text, value):
    line, _ = _idesc_line_value(text)
    lines = _lines(text)
    lines[line - 1] = re.sub(r"-?\d+;\s*$", f"{value};", lines[line - 1])
    return "\n".join(lines) + "\n"


def test_dropped_dealloc():
    text = corpus_ptx("dot_fp16")
    mutated = _replace_line(text, r"tcgen05\.dealloc", "\t// dealloc dropped")
    report = verify_ptx(mutated)
    errs = report.by_check("dealloc-missing")
    assert errs and errs[0].severity == "error"
    assert errs[0].line == _line_of(text, r"tcgen05\.alloc")


def test_dealloc_only_on_one_path():
    """Path-based: a dealloc skipped by a branch is still a leak (textual order would miss it)."""
    text = corpus_ptx("gluon_one_mma")
    dealloc = _line_of(text, r"tcgen05\.dealloc")
    lines = _lines(text)
    lines.insert(dealloc - 1, "\t@%p1 bra $L__skip_dealloc;")
    lines.insert(dealloc + 1, "$L__skip_dealloc:")
    assert "dealloc-missing" in _checks("\n".join(lines) + "\n")


def test_wrong_dealloc_columns():
    text = corpus_ptx("dot_fp16")
    mutated = _replace_line(text, r"tcgen05\.dealloc", lambda l: re.sub(r"128;", "64;", l))
    assert "dealloc-columns" in _checks(mutated)


def test_alloc_columns_not_power_of_two():
    text = corpus_ptx("dot_fp16")
    mutated = _replace_line(text, r"tcgen05\.alloc", lambda l: l.replace("], 128;", "], 96;"))
    mutated = _replace_line(mutated, r"tcgen05\.dealloc", lambda l: l.replace("128;", "96;"))
    assert "alloc-columns" in _checks(mutated)


def test_alloc_increasing_and_after_relinquish():
    text = corpus_ptx("dot_fp16")
    alloc = _lines(text)[_line_of(text, r"tcgen05\.alloc") - 1]
    bigger = alloc.replace("], 128;", "], 256;")
    lines = _lines(text)
    at = _line_of(text, r"tcgen05\.alloc")
    lines.insert(at, bigger)  # second, larger allocation right after the first (before relinquish)
    assert "alloc-increasing" in _checks("\n".join(lines) + "\n")
    rel = _line_of(text, r"tcgen05\.relinquish")
    lines = _lines(text)
    lines.insert(rel, alloc.replace("], 128;", "], 64;"))
    found = _checks("\n".join(lines) + "\n")
    assert "alloc-after-relinquish" in found


def test_mixed_cta_group():
    text = corpus_ptx("dot_fp16")
    mutated = _replace_line(text, r"tcgen05\.commit", lambda l: l.replace("cta_group::1", "cta_group::2"))
    report = verify_ptx(mutated)
    assert "cta-group-mixed" in {f.check for f in report.errors}
    assert report.by_check("cta-group-mixed")[0].line == _line_of(mutated, r"tcgen05\.commit\.cta_group::2")


def test_removed_wait_ld():
    text = corpus_ptx("gluon_one_mma")
    mutated = _replace_line(text, r"tcgen05\.wait::ld", "\t// wait::ld removed")
    report = verify_ptx(mutated)
    reads = report.by_check("ld-without-wait")
    # register reads before the wait are legal (true dependency, PTX ISA tcgen05.wait): notes only
    assert reads and {f.severity for f in reads} == {"note"}
    assert reads[0].related_line == _line_of(text, r"tcgen05\.ld\.")
    # ... but the dealloc can free the columns the un-waited ld still reads: an error there
    errs = report.by_check("ld-overwritten")
    assert [(f.severity, f.line) for f in errs] == [("error", _line_of(mutated, r"tcgen05\.dealloc"))]


def test_removed_wait_st():
    text = corpus_ptx("dot_fp16")
    mutated = _replace_line(text, r"tcgen05\.wait::st", "\t// wait::st removed")
    assert "st-without-wait" in _checks(mutated)


def test_removed_mbarrier_wait_before_accumulator_read():
    text = corpus_ptx("gluon_one_mma")
    mutated = _replace_line(text, r"mbarrier\.try_wait", "\tmov.pred complete, -1;")
    assert "acc-read-unsynced" in _checks(mutated)


@pytest.mark.parametrize("bit,why", [(23, "reserved"), (29, "reserved"), (6, "reserved")])
def test_flipped_idesc_reserved_bit(bit, why):
    text = corpus_ptx("dot_bf16")
    _, value = _idesc_line_value(text)
    assert not value >> bit & 1
    mutated = _set_idesc(text, value | 1 << bit)
    msgs = [f.message for f in verify_ptx(mutated).by_check("idesc-field")]
    assert any(why in m for m in msgs), msgs


def test_flipped_idesc_type_bits():
    text = corpus_ptx("dot_tf32")
    _, value = _idesc_line_value(text)
    assert decode_idesc(value, "tf32").a_type == "tf32"
    mutated = _set_idesc(text, value ^ (1 << 7))  # atype tf32(2) -> 3: not a tf32-kind type
    assert any("atype" in f.message for f in verify_ptx(mutated).by_check("idesc-field"))


@pytest.mark.parametrize("m_field,n_field", [(2, None), (None, 0), (None, 33)])
def test_illegal_m_n(m_field, n_field):
    text = corpus_ptx("dot_fp16")
    _, value = _idesc_line_value(text)
    if m_field is not None:
        value = (value & ~(0x1F << 24)) | m_field << 24          # M = 32: not legal without .ws
    if n_field is not None:
        value = (value & ~(0x3F << 17)) | n_field << 17          # N = 0 or 264
    msgs = [f.message for f in verify_ptx(_set_idesc(text, value)).by_check("idesc-field")]
    assert any(("M=" if m_field is not None else "N=") in m for m in msgs), msgs


def test_mxf4_e2m1_code_per_kind():
    """E2M1 is atype 1 under mxf4 but 5 under f8f6f4: writing the f8f6f4 code under mxf4 is illegal."""
    text = corpus_ptx("dot_scaled_mxfp4")
    _, value = _idesc_line_value(text)
    value = (value & ~(0x7 << 7)) | 5 << 7
    msgs = [f.message for f in verify_ptx(_set_idesc(text, value)).by_check("idesc-field")]
    assert any("E2M1" in m for m in msgs), msgs


def test_scale_vec_vs_kind():
    text = corpus_ptx("dot_scaled_mxfp4")
    mutated = text.replace("kind::mxf4.block_scale.scale_vec::2X", "kind::mxf4.block_scale.scale_vec::4X")
    assert any("scale_vec" in f.message for f in verify_ptx(mutated).by_check("idesc-field"))


def test_d_tile_outside_allocation():
    text = corpus_ptx("dot_fp16")
    _, value = _idesc_line_value(text)
    value = (value & ~(0x3F << 17)) | (256 >> 3) << 17          # N=256 in a 128-column allocation
    assert "mma-d-outside-alloc" in _checks(_set_idesc(text, value))


def test_missing_proxy_fence():
    text = corpus_ptx("gluon_one_mma")
    assert "fence.proxy.async" in text
    mutated = _replace_line(text, r"fence\.proxy\.async", "\t// fence removed")
    report = verify_ptx(mutated)
    errs = report.by_check("missing-proxy-fence")
    assert errs and errs[0].severity == "error"


def test_cta_group2_without_cluster():
    text = corpus_ptx("gluon_two_ctas")
    one = text.replace(".reqnctapercluster 2", ".reqnctapercluster 1")
    assert "cta-group2-cluster" in _checks(one)
    none = text.replace(".reqnctapercluster 2", "").replace(".explicitcluster", "")
    assert "cta-group2-cluster" in _checks(none, "warning")


def test_ld_lane_quarter_and_bounds():
    text = corpus_ptx("gluon_one_mma")
    mod = parse_ptx(text)
    ld = mod.entries[0].find("tcgen05.ld")[0]
    addr = ld.operands[-1]
    # lane 16 for a 32-lane shape crosses a quarter; column 64 + 128 exceeds the 128-column allocation
    lines = _lines(text)
    lines[ld.line - 1] = lines[ld.line - 1].replace(addr.text, f"[{addr.base.name}+1048576]")
    assert "lane-quarter" in _checks("\n".join(lines) + "\n")


def test_parse_many_entries_in_one_module():
    """10k+ lines of real PTX (the biggest corpus kernel, repeated under new names) parse into one entry per copy,
    each with the same instructions. Parse speed is a row of benchmarks/emulator.py, not asserted here."""
    text = corpus_ptx("gluon_two_ctas")
    body, copies = text, 1
    while len(body.splitlines()) < 10000:
        body += "\n" + text.replace(".entry mma_two_ctas", f".entry k{copies}")
        copies += 1
    mod = parse_ptx(body)
    assert [e.name for e in mod.entries] == ["mma_two_ctas"] + [f"k{i}" for i in range(1, copies)]
    assert len({len(e.instructions) for e in mod.entries}) == 1
