"""Every 2-D `tl.dot_scaled` form Triton 3.6's frontend accepts, through `lower-dot-scaled-portable`.

The forms come from the frontend's rules (`triton/language/semantic.py`, `dot_scaled`): each side is one of the
formats e2m1, e4m3, e5m2, bf16, fp16, carries no scale, an e8m0 scale (uint8, group 32) or a UE4M3 scale
(float8e4nv, group 16) - a bf16/fp16 side included - and only an e2m1 side may be packed along M/N instead of K
(`lhs_k_pack` / `rhs_k_pack`): 4 x 3 + 1 x 3 x 2 = 18 sides, 18 x 18 = 324 forms.

Per form (all 324, CPU, no kernel compile): which targets keep it for Triton and, with the rewrite forced, what
the emitted TTIR computes: the text runs through `test_nvfp4_lowering.evaluate` (an evaluator of the ops the
emitter uses, written from the MLIR semantics) on random codes, and the `tt.dot` operands - summed over the hi/lo
terms of a split side - must equal `bwtriton.formats`' float64 dequantization bit for bit, in an operand type
that holds them. Compiling each form for sm_90a and sm_100a through the default pipeline is a sample by family
here and the full sweep with BWTRITON_ALL_DOT_SCALED_FORMS=1.
"""
from __future__ import annotations

import os
import re
from itertools import product

import pytest
import torch
import triton
import triton.language as tl

import bwtriton
from bwtriton.mlir.dot_scaled import parse_dot_scaled
from bwtriton.passes.lower_dot_scaled_portable import lower_dot_scaled, triton_lowers
from bwtriton.passes.lower_dot_scaled_portable.lower_dot_scaled_portable import dot_plan, stacks_terms
from bwtriton.targets import get_target
from test_nvfp4_lowering import _exact_in_tf32, _form_line, _random_operand, evaluate

FORMATS = ("e2m1", "e4m3", "e5m2", "bf16", "fp16")
SCALES = (None, "e8m0", "ue4m3")
GROUP = {"e8m0": 32, "ue4m3": 16, None: 32}


def sides() -> list[tuple[str, "str | None", bool]]:
    """(format, scale, k_pack) of one operand, as the frontend accepts them."""
    return [(fmt, scale, k_pack) for fmt in FORMATS for scale in SCALES
            for k_pack in ((True, False) if fmt == "e2m1" else (True,))]


FORMS = [a + b for a, b in product(sides(), sides())]


def form_id(form: tuple) -> str:
    def side(fmt, scale, k_pack):
        return f"{fmt}{'_' + scale if scale else ''}{'' if k_pack else '_mn'}"
    return f"{side(*form[:3])}-x-{side(*form[3:])}"


def test_the_frontend_accepts_324_forms():
    assert len(sides()) == 18 and len(FORMS) == 324 == len(set(FORMS))
    assert len(SAMPLE) == 15 and {_side_class(*f[:3]) for f in SAMPLE} == {_side_class(*f[3:]) for f in SAMPLE} \
        == {_side_class(*s) for s in sides()}
    # scaled bf16/fp16 sides (the gemlite form) are among them: 4 such sides
    assert sum(1 for s in sides() if s[0] in ("bf16", "fp16") and s[1]) == 4


# ------------------------------------------------------------------------------- IR level, every form, exact

def _code_range(fmt: str, plan_elem: str) -> tuple[int, int]:
    """e8m0 codes per side: the whole finite range on fp4 (0..252; 2..252 on tf32 dots, which keep to fp32
    normals), 100..150 on wider elements (an fp8/bf16/fp16 subnormal times 2^-127 leaves bf16's range: the
    format edge the pass documents)."""
    if fmt != "e2m1":
        return 100, 150
    return (2, 252) if plan_elem == "f32" else (0, 252)


def _dot_operands(text: str) -> tuple[list[str], list[str], list[str]]:
    """(lhs names, rhs names, dot lines) of the emitted `tt.dot`s, in order."""
    dots = [ln for ln in text.splitlines() if " tt.dot " in ln]
    pairs = [re.search(r"tt\.dot (%\S+), (%\S+),", ln).groups() for ln in dots]
    return list(dict.fromkeys(p[0] for p in pairs)), list(dict.fromkeys(p[1] for p in pairs)), dots


@pytest.mark.parametrize("form", FORMS, ids=[form_id(f) for f in FORMS])
def test_rewrite_of_every_form_feeds_the_mma_exact_operands(form):
    m, n, k = 16, 8, 64
    op = parse_dot_scaled(_form_line(form, m, n, k))
    assert op is not None
    plan = dot_plan(op)
    text = lower_dot_scaled(op, prefix="t")
    lhs, rhs, dots = _dot_operands(text)
    assert "tt.dot_scaled" not in text and len(dots) == plan.terms[0] * plan.terms[1]
    assert (len(lhs), len(rhs)) == plan.terms
    assert dots[-1].strip().startswith("%out = tt.dot") and ", %acc," in dots[0]  # in place, original acc
    for prev, line in zip(dots, dots[1:]):  # chained: each dot adds into the previous one's result
        assert f", {prev.split('=')[0].strip()}," in line
    gen = torch.Generator().manual_seed(sum(map(ord, form_id(form))))
    a, sa, a_ref = _random_operand(*form[:3], m, k, gen, _code_range(form[0], plan.elem))
    b, sb, b_ref = _random_operand(*form[3:], n, k, gen, _code_range(form[3], plan.elem))
    env = {"%a": a, "%b": b.T.contiguous(), "%acc": torch.zeros(m, n)}
    env.update({"%sa": sa} if sa is not None else {})
    env.update({"%sb": sb} if sb is not None else {})
    env = evaluate(text.splitlines(), env)
    elem = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[plan.elem]
    assert all(env[name].dtype == elem for name in lhs + rhs)
    a_sum = sum(env[name].double() for name in lhs)
    b_sum = sum(env[name].double() for name in rhs)
    assert torch.equal(a_sum, a_ref), (a_sum - a_ref).abs().max()
    assert torch.equal(b_sum, b_ref.T), (b_sum - b_ref.T).abs().max()
    if plan.elem == "f32":
        assert all(_exact_in_tf32(env[name]) for name in lhs + rhs)


SPLIT_FORMS = [f for f in FORMS if dot_plan(parse_dot_scaled(_form_line(f, 16, 8, 64))).terms != (1, 1)]


def test_split_forms_are_68_and_12_split_both_sides():
    plans = [dot_plan(parse_dot_scaled(_form_line(f, 16, 8, 64))) for f in SPLIT_FORMS]
    assert len(SPLIT_FORMS) == 68 and sum(p.terms == (2, 2) for p in plans) == 12
    assert stacks_terms(get_target("sm_100a")) and not stacks_terms(get_target("sm_90a"))


@pytest.mark.parametrize("form", SPLIT_FORMS, ids=[form_id(f) for f in SPLIT_FORMS])
def test_stacked_rewrite_of_split_forms_gives_each_product_exactly(form):
    """The stacked lowering (tcgen05 targets): one `tt.dot` over pairs x K whose bf16 operands, grouped by the
    original K index, multiply to exactly a[m, k] * b[k, n] (the products of the chained dots, summed over the
    term pairs in float64, where 4 products of <= 8-bit factors add exactly)."""
    m, n, k = 16, 8, 64
    op = parse_dot_scaled(_form_line(form, m, n, k))
    plan = dot_plan(op, stack=True)
    text = lower_dot_scaled(op, prefix="t", stack=True)
    lhs, rhs, dots = _dot_operands(text)
    pairs = plan.terms[0] * plan.terms[1]
    assert "tt.dot_scaled" not in text and len(dots) == 1 and plan.stacked
    assert dots[0].strip().startswith("%out = tt.dot") and ", %acc," in dots[0]
    assert f"tensor<{m}x{pairs * k}xbf16> * tensor<{pairs * k}x{n}xbf16>" in dots[0]
    gen = torch.Generator().manual_seed(sum(map(ord, form_id(form))))
    a, sa, a_ref = _random_operand(*form[:3], m, k, gen, _code_range(form[0], plan.elem))
    b, sb, b_ref = _random_operand(*form[3:], n, k, gen, _code_range(form[3], plan.elem))
    env = {"%a": a, "%b": b.T.contiguous(), "%acc": torch.zeros(m, n)}
    env.update({"%sa": sa} if sa is not None else {})
    env.update({"%sb": sb} if sb is not None else {})
    env = evaluate(text.splitlines(), env)
    a_st, b_st = env[lhs[0]], env[rhs[0]]
    assert a_st.dtype == b_st.dtype == torch.bfloat16
    a_pairs = a_st.double().reshape(m, k, pairs)           # column pairs * k + j: pair j of K index k
    b_pairs = b_st.double().T.reshape(n, k, pairs)
    products = torch.einsum("mkj,nkj->mnk", a_pairs, b_pairs)
    assert torch.equal(products, torch.einsum("mk,nk->mnk", a_ref, b_ref)), form_id(form)


def test_split_lo_terms_are_not_all_zero():
    """The hi/lo split matters: a UE4M3-scaled bf16 side has values bf16 cannot hold (its lo term is nonzero)."""
    form = ("bf16", "ue4m3", True, "e2m1", "ue4m3", True)
    op = parse_dot_scaled(_form_line(form, 16, 8, 64))
    text = lower_dot_scaled(op, prefix="t")
    lhs, _, _ = _dot_operands(text)
    gen = torch.Generator().manual_seed(3)
    a, sa, _ = _random_operand(*form[:3], 16, 64, gen, (0, 0))
    b, sb, _ = _random_operand(*form[3:], 8, 64, gen, (0, 0))
    env = evaluate(text.splitlines(), {"%a": a, "%sa": sa, "%b": b.T.contiguous(), "%sb": sb,
                                       "%acc": torch.zeros(16, 8)})
    assert (env[lhs[1]] != 0).float().mean() > 0.5


def _kept_by(form: tuple, target: str) -> bool:
    return triton_lowers(parse_dot_scaled(_form_line(form, 128, 128, 128)), get_target(target))


def test_scaled_bf16_fp16_forms_are_lowered_except_where_triton_is_exact():
    """Scaled bf16/fp16 sides: UE4M3 always lowered (Triton 3.6 crashes on them: accelerate-matmul's
    decomposition asserts on a float scale); e8m0 on fp16 lowered (Triton rounds the scale to fp16); e8m0 on bf16
    k-packed against a k-packed side is Triton's own exact decomposition (bf16 multiply by 2^k)."""
    for form in FORMS:
        scaled_16 = [(f, s) for f, s in (form[0:2], form[3:5]) if f in ("bf16", "fp16") and s]
        if not scaled_16:
            continue
        for target in ("sm_90a", "sm_100a"):
            kept = _kept_by(form, target)
            if any(s == "ue4m3" for _, s in scaled_16) or any(f == "fp16" for f, _ in scaled_16):
                assert not kept, (form, target)


# ----------------------------------------------------------------------- a K-looped kernel over every form

@triton.jit
def forms_kernel(a_ptr, sa_ptr, b_ptr, sb_ptr, c_ptr, M, N, K: tl.constexpr, stride_am, stride_ak, stride_bk,
                 stride_bn, A_FMT: tl.constexpr, B_FMT: tl.constexpr, A_SCALED: tl.constexpr,
                 B_SCALED: tl.constexpr, A_KPACK: tl.constexpr, B_KPACK: tl.constexpr, A_DIV_M: tl.constexpr,
                 A_DIV_K: tl.constexpr, B_DIV_K: tl.constexpr, B_DIV_N: tl.constexpr, GROUP_A: tl.constexpr,
                 GROUP_B: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C = dot_scaled(A, B) tile by tile: A stored [M/A_DIV_M, K/A_DIV_K], B stored [K/B_DIV_K, N/B_DIV_N] (fp4
    halves the packed dimension), scales [rows, K/GROUP] row-major, one group size per side."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_am = pid_m * (BM // A_DIV_M) + tl.arange(0, BM // A_DIV_M)
    offs_bn = pid_n * (BN // B_DIV_N) + tl.arange(0, BN // B_DIV_N)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + offs_am[:, None] * stride_am + (k // A_DIV_K + tl.arange(0, BK // A_DIV_K))[None, :]
                    * stride_ak)
        b = tl.load(b_ptr + (k // B_DIV_K + tl.arange(0, BK // B_DIV_K))[:, None] * stride_bk
                    + offs_bn[None, :] * stride_bn)
        sa = None
        sb = None
        if A_SCALED:
            sa = tl.load(sa_ptr + rm[:, None] * (K // GROUP_A) + (k // GROUP_A + tl.arange(0, BK // GROUP_A))[None, :])
        if B_SCALED:
            sb = tl.load(sb_ptr + rn[:, None] * (K // GROUP_B) + (k // GROUP_B + tl.arange(0, BK // GROUP_B))[None, :])
        acc = tl.dot_scaled(a, sa, A_FMT, b, sb, B_FMT, acc, lhs_k_pack=A_KPACK, rhs_k_pack=B_KPACK)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


PTR = {"e2m1": "*u8", "e4m3": "*fp8e4nv", "e5m2": "*fp8e5", "bf16": "*bf16", "fp16": "*fp16"}
SCALE_PTR = {"e8m0": "*u8", "ue4m3": "*fp8e4nv", None: "*u8"}


def form_constexprs(form: tuple, tile: tuple[int, int, int]) -> dict:
    af, asc, akp, bf, bsc, bkp = form
    return dict(A_FMT=af, B_FMT=bf, A_SCALED=asc is not None, B_SCALED=bsc is not None, A_KPACK=akp, B_KPACK=bkp,
                A_DIV_M=2 if af == "e2m1" and not akp else 1, A_DIV_K=2 if af == "e2m1" and akp else 1,
                B_DIV_K=2 if bf == "e2m1" and bkp else 1, B_DIV_N=2 if bf == "e2m1" and not bkp else 1,
                GROUP_A=GROUP[asc], GROUP_B=GROUP[bsc], BM=tile[0], BN=tile[1], BK=tile[2])


def compile_form(form: tuple, target: str, tile=(64, 64, 128), passes=None):
    sig = {"a_ptr": PTR[form[0]], "sa_ptr": SCALE_PTR[form[1]], "b_ptr": PTR[form[3]],
           "sb_ptr": SCALE_PTR[form[4]], "c_ptr": "*fp32", "M": "i32", "N": "i32",
           "stride_am": "i32", "stride_ak": "i32", "stride_bk": "i32", "stride_bn": "i32"}
    return bwtriton.compile(forms_kernel, signature=sig, constexprs=dict(form_constexprs(form, tile), K=256),
                            target=target, passes=passes)


_MMA = re.compile(r"tcgen05\.mma\.cta_group::1\.kind::(\w+)|wgmma\.mma_async\.sync\.aligned\.m64n\d+k\d+\.f32\.(\w+)")


def check_compiled(form: tuple, target: str, tile=(64, 64, 128)) -> str:
    """Compile one form and check the emitted MMA against the pass's plan; returns the MMA kind."""
    r = compile_form(form, target, tile)
    entry = r.reports["lower-dot-scaled-portable"]["ops"][0]
    kinds = {m[1] or m[2] for m in _MMA.finditer(r.asm["ptx"])}
    assert len(kinds) == 1, kinds
    kind = kinds.pop()
    if entry["action"].startswith("lowered"):
        assert "tt.dot_scaled" not in r.asm["ttir"]
        m = re.match(r"lowered to (?:\d+ chained |one )?(bf16|f16|f32) tt\.dot", entry["action"])
        assert m, entry
        elem = m[1]
        expected = {"sm_90a": {"bf16": "bf16", "f16": "f16", "f32": "tf32"},
                    "sm_100a": {"bf16": "f16", "f16": "f16", "f32": "tf32"}}[target][elem]
        assert kind == expected, (entry, kind)
        chained = int(entry["action"].split()[2]) if "chained" in entry["action"] else 1
        assert r.asm["ttir"].count(" tt.dot ") == chained
        assert ("stacked along K" in entry["action"]) == (target == "sm_100a" and "split" in entry["action"])
    return kind


def _side_class(fmt: str, scale: "str | None", k_pack: bool) -> tuple:
    """Sides that take the same path through the pass (e4m3 and e5m2 alike): 15 classes."""
    return ("fp8" if fmt in ("e4m3", "e5m2") else fmt, scale, k_pack)


def _sample() -> list[tuple]:
    """15 forms in which every side class appears once as lhs and once as rhs (rhs class 7i+3 mod 15 against
    lhs class i), compiled in the default run; the full 324 x 2 sweep is `-m slow`."""
    classes = list(dict.fromkeys(_side_class(*s) for s in sides()))
    by_class = {}
    for form in FORMS:
        by_class.setdefault((_side_class(*form[:3]), _side_class(*form[3:])), form)
    n = len(classes)
    return [by_class[classes[i], classes[(7 * i + 3) % n]] for i in range(n)]


SAMPLE = _sample()
#: rows a 128-row tile changes on sm_100a (native tcgen05 block-scaled MMAs)
NATIVE_128 = [("e2m1", "ue4m3", True, "e2m1", "ue4m3", True), ("e2m1", "e8m0", False, "e2m1", "e8m0", False),
              ("e2m1", "e8m0", True, "e2m1", "e8m0", True), ("e4m3", "e8m0", True, "e2m1", "e8m0", True)]


def _compile_cases(forms):
    return [(f, t) for f in forms for t in ("sm_90a", "sm_100a")]


@pytest.mark.parametrize("form, target", _compile_cases(SAMPLE),
                         ids=[f"{form_id(f)}-{t}" for f, t in _compile_cases(SAMPLE)])
def test_form_compiles_for_both_targets(form, target):
    check_compiled(form, target)


#: BWTRITON_ALL_DOT_SCALED_FORMS=1: compile all 324 forms for both targets (648 compiles, ~10 CPU-minutes)
FULL = os.environ.get("BWTRITON_ALL_DOT_SCALED_FORMS", "") not in ("", "0")
_FULL_CASES = _compile_cases(FORMS) if FULL else []


@pytest.mark.slow
@pytest.mark.parametrize("form, target", _FULL_CASES, ids=[f"{form_id(f)}-{t}" for f, t in _FULL_CASES])
def test_every_form_compiles_for_both_targets(form, target):
    check_compiled(form, target)


@pytest.mark.parametrize("form", NATIVE_128, ids=[form_id(f) for f in NATIVE_128])
def test_native_block_scaled_tcgen05_kept_on_128_row_tiles(form):
    kind = check_compiled(form, "sm_100a", tile=(128, 128, 128))
    assert kind in ("mxf4nvf4", "mxf4", "mxf8f6f4"), kind


def test_gemlite_form_plain_triton_fails_and_bwtriton_lowers_it():
    """bf16 activations with a UE4M3 scale (gemlite's A16W4_NVFP passes ones) x NVFP4 weights: Triton alone
    stops in accelerate-matmul on both targets; through the pipeline it becomes bf16 MMAs."""
    form = ("bf16", "ue4m3", True, "e2m1", "ue4m3", True)
    for target in ("sm_90a", "sm_100a"):
        with pytest.raises(bwtriton.CompileError, match="PassManager::run failed"):
            compile_form(form, target, passes="none")
        assert check_compiled(form, target) in ("bf16", "f16")


@pytest.mark.parametrize("form", [("bf16", None, True, "fp16", None, True), ("fp16", None, True, "bf16", None, True)],
                         ids=["bf16-x-fp16", "fp16-x-bf16"])
def test_unscaled_bf16_x_fp16_plain_triton_fails_and_bwtriton_uses_tf32(form):
    """No 16-bit type holds both bf16 and fp16 values; tf32 holds both (11 significant bits, fp32 range)."""
    for target in ("sm_90a", "sm_100a"):
        with pytest.raises(bwtriton.CompileError, match="PassManager::run failed"):
            compile_form(form, target, passes="none")
        assert check_compiled(form, target) == "tf32"


#: both sides split (4 term pairs): an unscaled fp16 side against a split one, and two UE4M3-scaled bf16 sides
SPLIT_2X2_SAMPLE = [("fp16", None, True, "fp16", "ue4m3", True), ("bf16", "ue4m3", True, "bf16", "ue4m3", True)]
_SPLIT_2X2 = [f for f in SPLIT_FORMS if dot_plan(parse_dot_scaled(_form_line(f, 16, 8, 64))).terms == (2, 2)]
_SPLIT_2X2_CASES = _SPLIT_2X2 if FULL else SPLIT_2X2_SAMPLE


@pytest.mark.parametrize("form", _SPLIT_2X2_CASES, ids=[form_id(f) for f in _SPLIT_2X2_CASES])
def test_split_2x2_forms_fit_tmem_at_128x128_tiles_on_sm100(form):
    """Chained, these need 4 TMEM accumulators plus the TMEM A operands (640 columns of 512); stacked, one
    accumulator and the stacked A operand: the plan fits, with one kind::f16 MMA over 4 x BK per iteration."""
    r = compile_form(form, "sm_100a", tile=(128, 128, 128))
    assert check_compiled(form, "sm_100a", tile=(128, 128, 128)) == "f16"
    totals = r.reports["plan-tmem"]["totals"]
    assert totals["fits"] and totals["used_columns"] <= 512 and not r.reports["plan-tmem"]["fallbacks"]
    assert r.asm["ttir"].count(" tt.dot ") == 1 and "tensor<128x512xbf16> * tensor<512x128xbf16>" in r.asm["ttir"]
