"""One mutant per rule added for issue 12, each made from real compiler output and each an *error*.

The originals verify clean (asserted first), so each error comes from the mutation alone. Rules whose violation
a one-line edit of real output cannot produce (P16 stage reuse: Triton's stage addresses are loop-carried) are
covered by the hand-written lit cases in test_lit/verify_tcgen05/.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from bwtriton.verify import verify_ptx
from fixtures.kernels import compile_matmul_kernel, corpus_ptx

TRITON39 = Path(__file__).parents[2] / "test_lit" / "verify_tcgen05" / "Inputs" / "triton39_tma_matmul.ptx"


def _sub(text: str, pattern: str, new: str, nth: int = 0) -> str:
    """`text` with the `nth` line matching `pattern` replaced by `new` (a function of the line, or a string)."""
    lines = text.splitlines()
    hits = [i for i, line in enumerate(lines) if re.search(pattern, line)]
    assert len(hits) > nth, f"{pattern!r} not found"
    i = hits[nth]
    lines[i] = new(lines[i]) if callable(new) else new
    return "\n".join(lines) + "\n"


def _errors(text: str, **kw) -> set[str]:
    return {f.check for f in verify_ptx(text, **kw).errors}


def _matmul_w8() -> str:
    return compile_matmul_kernel("fp16", "fp16", num_warps=8).asm["ptx"]


def _hoisted_barrier_init(text: str) -> str:
    """Single-stage tl.dot re-initialises its MMA barrier every iteration (so parity 0 is right); hoist the init
    out of the loop and drop the inval, keeping parity 0: the T6 bug."""
    lines = text.splitlines()
    init = next(i for i, s in enumerate(lines) if "mbarrier.init" in s)
    addr = re.search(r"\[(%r\d+)\]", lines[init]).group(1)
    define = next(s for s in lines[:init] if re.match(rf"\s*add\.s32\s+{addr},", s))
    head = next(i for i, s in enumerate(lines) if re.match(r"\s*bra\.uni\s+\$L__BB0_3;", s))
    out = [("\t// init hoisted" if i == init else "\t// inval dropped" if "mbarrier.inval" in s else s)
           for i, s in enumerate(lines)]
    out[head:head] = [define, lines[init]]
    return "\n".join(out) + "\n"


def _mutants():
    """(rule, original PTX, mutant PTX, verify kwargs, the check that must fire)."""
    t39 = TRITON39.read_text()
    two = corpus_ptx("gluon_two_ctas")
    one = corpus_ptx("gluon_one_mma")
    tma = corpus_ptx("tma_scaled_nvfp4")
    w8 = _matmul_w8()
    ws = corpus_ptx("ws_tma_matmul")
    s1 = compile_matmul_kernel("fp16", "fp16", num_stages=1).asm["ptx"]
    return [
        ("T6 barrier init hoisted out of the loop, parity left 0", s1, _hoisted_barrier_init(s1), {},
         "mbarrier-parity-stuck"),
        ("T7 init count above the elected arrivals of 4 warps", one,
         _sub(one, r"mbarrier\.init", lambda s: s.replace("], 1;", "], 5;")), {}, "mbarrier-arrivals-short"),
        ("P21 epilogue fence.proxy.async removed before the TMA store", ws,
         _sub(ws, r"fence\.proxy\.async\.shared::cta", "\t// fence removed"), {}, "tma-store-unfenced"),
        ("T4 TMA wait removed before the MMA", tma,
         _sub(tma, r"mbarrier\.try_wait", "\tmov.pred complete, -1;"), {}, "async-copy-unwaited"),
        ("P11 accumulator wait on the TMA barrier", t39,
         _sub(t39, r"mbarrier\.try_wait", lambda s: s.replace("[%r447]", "[%r11]"), nth=3), {},
         "acc-read-unsynced"),
        ("T5 wait on a barrier nothing arrives on", one,
         _sub(one, r"mbarrier\.try_wait", lambda s: s.replace("[%r83]", "[%r83+64]")), {},
         "mbarrier-never-arrived"),
        ("P9 dealloc while a tcgen05.ld is pending", one,
         _sub(one, r"tcgen05\.wait::ld", "\t// wait::ld removed"), {}, "ld-overwritten"),
        ("P8 lane from the warp index without % 4 (8 warps)", w8,
         _sub(w8, r"and\.b32\s+%r\d+, %r\d+, 6291456;", lambda s: s.replace("6291456", "14680064")), {},
         "lane-quarter"),
        ("P18 cta_group::2 MMA issued by both CTAs", two,
         _sub(two, r"or\.b32\s+%r291, %r40, %r44;", "\tmov.b32 \t%r291, %r40;"), {}, "cta-group2-leader"),
        ("T2 tcgen05 under .target sm_90a", one, one.replace(".target sm_100a", ".target sm_90a"), {},
         "target-no-tcgen05"),
        ("T3 shared memory over the limit", one, one, {"shared_bytes": 245792}, "smem-over-limit"),
        ("T3 TMEM over 512 columns", one, one, {"tmem_columns": 640}, "tmem-over-limit"),
    ]


MUTANTS = _mutants()


@pytest.mark.parametrize("rule,original,mutant,kw,check", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_mutant_is_an_error(rule, original, mutant, kw, check):
    assert verify_ptx(original).errors == [], "the original must verify clean"
    assert check in _errors(mutant, **kw), rule
