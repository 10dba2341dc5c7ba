"""`lower-dot-scaled-portable`: rewrite the `tt.dot_scaled` forms Triton 3.6 cannot lower into exact
dequantize-then-`tt.dot` TTIR.

Why: Triton 3.6 decomposes block-scaled dots that the target cannot run natively inside
`tritongpu-accelerate-matmul`, and that decomposition fails for these families of forms (measured by compiling
all 324 forms the frontend accepts, for sm_90a and sm_100a, docs/nvfp4_hopper.md):
* any UE4M3 scale (fp8e4nv, group 16: NVFP4): it asserts (DenseElementsAttr of a float element type);
* any e2m1 operand packed along M/N (`lhs_k_pack=False` / `rhs_k_pack=False`) without UE4M3 scales (MXFP4 with
  e8m0 scales, or unscaled fp4): `PassManager::run failed`, on sm_90a and, for tiles it cannot run natively, sm_100a;
* a bf16 side against an fp16 side (`bf16_with_fp16`): `PassManager::run failed` on both targets;
* a UE4M3 scale on a bf16/fp16 side (the form gemlite's NVFP4 layer uses): the accelerate-matmul assert above;
* and one that compiles but is not exact: an fp16 side against an e8m0-scaled side (`fp16_with_e8m0`).
Every other form (k-packed MXFP4, fp8 with e8m0 scales, bf16 sides, e8m0 on a bf16 side) Triton lowers itself,
exactly, so it is left alone.

The rewrite runs on TTIR, before `make_ttgir` sees the op, and emits per operand: unpack the two E2M1 nibbles of
each byte along K or along M/N, decode them and the scales with integer ops (exact; no fp8 instructions for fp4,
so sm_80 works too), multiply by the scale broadcast over its K-block in f32 and round to the dot's operand type
(exact: `dot_plan` picks a type that holds every dequantized value, or splits a side no type holds into exact bf16
hi + lo terms), then plain `tt.dot`s with the original fp32 accumulator: one per term pair, chained, or on
tcgen05 targets one over the term pairs stacked along K, so that a split needs one TMEM accumulator
(`stacks_terms`). Triton pipelines the packed loads and dequantizes in registers, as for mixed-precision matmul.

Which ops on targets with native block-scaled MMA (sm_100a, sm_103a, sm_120a): NVFP4 dots Triton lowers natively
(e2m1 x e2m1, UE4M3 on both sides, k-packed, tile M a multiple of 128) and M/N-packed MXFP4 with e8m0 scales on
both sides and tile M a multiple of 128 on sm_100a/sm_103a (`kind::mxf8f6f4`) stay as they are.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from bwtriton.mlir import reparse
from bwtriton.mlir.dot_scaled import DotScaledOp, parse_dot_scaled

from ..base import Pass, PassContext, PassOption, Stage, register_pass
from .emit import UNSCALED_FORMATS, TtirEmitter, dequant_f32, dequant_operand, split_f32, stack_along_k, to_dot_terms

UE4M3 = "f8E4M3FN"   # NVFP4 block scale element type as printed in TTIR
E8M0 = "i8"          # MX block scale (uint8 holding the biased exponent)
MX_NATIVE_FORMATS = {"e2m1", "e4m3", "e5m2"}  # operand formats of tcgen05 kind::mxf8f6f4


def _native_nvfp4(op: DotScaledOp, target) -> bool:
    # Target.native_block_scaled (measured by compiling): sm_100a/sm_103a `tcgen05.mma ... kind::mxf4nvf4`, sm_120a
    # `mma.sync ... kind::mxf4nvf4.block_scale`. A 64-row tile falls back to the crashing decomposition.
    return (target.native_block_scaled and op.out_type.shape[0] % 128 == 0 and op.a_format == op.b_format == "e2m1"
            and op.scale_elems == (UE4M3, UE4M3) and op.lhs_k_pack and op.rhs_k_pack)


def _native_mn_packed_mx(op: DotScaledOp, target) -> bool:
    # Measured on sm_100a: M/N-packed e2m1 with e8m0 scales on both sides and a 128-row tile lowers to tcgen05
    # kind::mxf8f6f4 (e2m1 x e2m1, the form upstream's test_block_scale_fp4 checks, and e5m2 x e2m1); one
    # unscaled side or a 64-row tile fails. sm_120a has no such lowering (upstream skips it there).
    return (target.native_block_scaled and target.has_tcgen05 and op.out_type.shape[0] % 128 == 0
            and {op.a_format, op.b_format} <= MX_NATIVE_FORMATS and op.scale_elems == (E8M0, E8M0))


def fp4_packed_along_mn(op: DotScaledOp) -> bool:
    """Whether an e2m1 operand shares its bytes along M (lhs) or N (rhs) instead of K."""
    return (op.a_format == "e2m1" and not op.lhs_k_pack) or (op.b_format == "e2m1" and not op.rhs_k_pack)


def fp16_with_e8m0(op: DotScaledOp) -> bool:
    """An fp16 side against an e8m0-scaled side: Triton's decomposition then rounds the scale 2^(code-127) to
    fp16 (its TTGIR: `arith.truncf` of the scale, then an fp16 `arith.mulf`), so scales from 2^16 up become inf,
    below 2^-24 zero, and products past 65504 overflow: it compiles, but is exact only for mid-range scales."""
    return "fp16" in (op.a_format, op.b_format) and E8M0 in op.scale_elems


def bf16_with_fp16(op: DotScaledOp) -> bool:
    """A bf16 side against an fp16 side: Triton 3.6's decomposition has no common type for them and fails
    (`PassManager::run failed`, measured on sm_90a and sm_100a, scaled or not)."""
    return {op.a_format, op.b_format} == {"bf16", "fp16"}


def triton_lowers(op: DotScaledOp, target) -> bool:
    """Whether Triton 3.6 lowers this `tt.dot_scaled` itself, exactly, on `target` (natively or by its own
    decomposition)."""
    if op.is_nvfp4:
        return _native_nvfp4(op, target)
    if fp4_packed_along_mn(op):
        return _native_mn_packed_mx(op, target)
    return not fp16_with_e8m0(op) and not bf16_with_fp16(op)


def _exact_types(fmt: str, scale_elem: "str | None") -> set[str]:
    """Operand types of `tt.dot` that hold every dequantized value of this operand exactly (empty: none does).

    E2M1 (2 significant bits, |x| in [0.5, 6]) times UE4M3 (4 bits, [2^-9, 448]) fits fp16 and bf16; fp8 elements
    times UE4M3 reach 448 x 448 (e4m3) or 57344 x 448 (e5m2), past fp16's 65504; e8m0 scales span 2^-127..2^127,
    so only the 8-bit exponent types (bf16, tf32) hold them. tf32 (11 significant bits, fp32 range) holds all of
    these. A scaled bf16 (8 bits) or fp16 (11 bits) side: e8m0 keeps its bits (bf16: bf16 or tf32; fp16: tf32
    only), UE4M3 adds 4 (12 or 15 bits), more than any MMA operand type holds."""
    if fmt in UNSCALED_FORMATS:
        own = {"bf16": {"bf16", "f32"}, "fp16": {"f16", "f32"}}[fmt]
        if scale_elem is None:
            return own
        return {"bf16", "f32"} & own if scale_elem == E8M0 else set()
    if scale_elem == E8M0 or (scale_elem == UE4M3 and fmt != "e2m1"):
        return {"bf16", "f32"}
    return {"bf16", "f16", "f32"}


@dataclass(frozen=True)
class DotPlan:
    """How a lowered dot feeds the MMA: operand type `elem` and, per side, how many `elem` terms sum to each
    dequantized value (2: a bf16 hi + lo pair, `emit.split_f32`). The term pairs are either one `tt.dot` each,
    chained through the accumulator, or, `stacked`, interleaved along K into one `tt.dot` over pairs x K."""

    elem: str
    terms: tuple[int, int] = (1, 1)
    stacked: bool = False

    @property
    def pairs(self) -> int:
        return self.terms[0] * self.terms[1]

    def describe(self) -> str:
        split = f"hi/lo split {self.terms[0]}x{self.terms[1]}"
        if self.terms == (1, 1):
            return f"{self.elem} tt.dot"
        if self.stacked:
            return f"one bf16 tt.dot over {self.pairs}K ({split}, term pairs stacked along K)"
        return f"{self.pairs} chained bf16 tt.dot ({split})"


def dot_plan(op: DotScaledOp, one_scales: tuple[bool, bool] = (False, False), stack: bool = False) -> DotPlan:
    """One operand type both sides fit (bf16 first: the fast path; then fp16; then f32 for a tf32 MMA), else
    bf16 with each side that bf16 cannot hold split in two exact bf16 terms (UE4M3-scaled bf16/fp16, or fp16
    against one). `one_scales[i]`: side i's scale is the constant 1.0 (it is then dropped). `stack`: a split
    plan takes one dot over the stacked term pairs (see `stacks_terms`)."""
    scales = tuple(None if one else s for s, one in zip(op.scale_elems, one_scales))
    a_fits, b_fits = _exact_types(op.a_format, scales[0]), _exact_types(op.b_format, scales[1])
    both = a_fits & b_fits
    if both:
        return DotPlan(next(t for t in ("bf16", "f16", "f32") if t in both))
    return DotPlan("bf16", (1 if "bf16" in a_fits else 2, 1 if "bf16" in b_fits else 2), stacked=stack)


def stacks_terms(target) -> bool:
    """Whether split plans stack their term pairs along K on `target`. On tcgen05 targets each `tt.dot` of a
    chain gets its own 128-column TMEM accumulator (Triton copies the running sum TMEM -> registers -> TMEM
    between them) and the TMEM A operands come on top: a 2x2 split at a 128x128 tile needs 640 of the 512
    columns. One dot over the stacked K needs one accumulator. Where the accumulator is in registers (wgmma,
    mma.sync) the chain costs no extra storage, and stacking would double the B tile in shared memory (a 2x2
    split at 128x128x128 on sm_90a: 266 KB of the 227 KB), so the chain stays."""
    return target.has_tcgen05


def compute_dtype(op: DotScaledOp) -> str:
    """Operand type of the replacement `tt.dot` (see `dot_plan`)."""
    return dot_plan(op).elem


def _side_terms(em: TtirEmitter, value: str, ty, fmt: str, scale, scale_ty, packed_axis: int, plan: DotPlan,
                side: int) -> list:
    """One operand, rows-major [rows, K'], -> its `tt.dot` terms, each rows-major [rows, K]."""
    if plan.terms[side] == 1:
        return [dequant_operand(em, value, ty, fmt, scale, scale_ty, packed_axis, plan.elem)]
    exact, ety = dequant_f32(em, value, ty, fmt, scale, scale_ty, packed_axis)
    return to_dot_terms(em, exact, ety, plan.elem, 2)


def _side_f32_terms(em: TtirEmitter, value: str, ty, fmt: str, scale, scale_ty, packed_axis: int,
                    terms: int) -> list:
    """One operand, rows-major [rows, K'], -> f32 [rows, K] tensors of bf16 values summing to its exact
    dequantization (one, or the hi + lo pair)."""
    exact, ety = dequant_f32(em, value, ty, fmt, scale, scale_ty, packed_axis)
    return split_f32(em, exact, ety) if terms == 2 else [(exact, ety)]


def _lower_stacked(em: TtirEmitter, op: DotScaledOp, plan: DotPlan, a_scale, b_scale) -> str:
    """One `tt.dot` over the term pairs stacked along K (`emit.stack_along_k`): the same products as the chained
    dots, one accumulator. Stacked in f32 and rounded to bf16 after (exact: every term is a bf16 value), so the
    dot's operands come from an elementwise op: Triton keeps the join/reshape in registers."""
    a_terms = _side_f32_terms(em, op.a, op.a_type, op.a_format, *a_scale, 1 if op.lhs_k_pack else 0, plan.terms[0])
    bt, bt_ty = em.trans(op.b, op.b_type, (1, 0))  # rhs as rows [N, K'], scales [N, K/g]
    b_terms = _side_f32_terms(em, bt, bt_ty, op.b_format, *b_scale, 1 if op.rhs_k_pack else 0, plan.terms[1])
    pairs = [(a, b) for a in a_terms for b in b_terms]
    operands = []
    for rows in ([a for a, _ in pairs], [b for _, b in pairs]):
        stacked, sty = stack_along_k(em, rows)
        bf16 = sty.with_(elem="bf16")
        operands.append((em.cast("truncf", stacked, sty, bf16), bf16))
    (a, a_ty), (b_rows, b_rows_ty) = operands
    b, b_ty = em.trans(b_rows, b_rows_ty, (1, 0))
    em.dot(a, b, op.acc, a_ty, b_ty, op.out_type, result=op.result)
    return "".join(em.lines)


def lower_dot_scaled(op: DotScaledOp, prefix: str, one_scales: tuple[bool, bool] = (False, False),
                     stack: bool = False) -> str:
    """TTIR text replacing `op`: both operands dequantized to [M, K] / [K, N] and one `tt.dot`; when a side is
    split (`dot_plan`), one `tt.dot` per pair of terms, each adding into the previous one's result (the hi x hi
    product first), or, `stack`, one `tt.dot` over the pairs stacked along K. `one_scales` marks scales known to
    be 1.0."""
    if len(op.out_type.shape) != 2:
        raise ValueError(f"{op.result}: batched (rank-{len(op.out_type.shape)}) tt.dot_scaled is not lowered by "
                         "lower-dot-scaled-portable; use 2-D tiles (one tl.dot_scaled per batch entry)")
    em = TtirEmitter(prefix=prefix, indent=op.indent, loc=op.loc)
    plan = dot_plan(op, one_scales, stack)
    a_scale = (None, None) if one_scales[0] else (op.a_scale, op.a_scale_type)
    b_scale = (None, None) if one_scales[1] else (op.b_scale, op.b_scale_type)
    if plan.stacked and plan.terms != (1, 1):
        return _lower_stacked(em, op, plan, a_scale, b_scale)
    # lhs is [M, K'] already rows-major; packing is along K (axis 1) or M (axis 0).
    a_terms = _side_terms(em, op.a, op.a_type, op.a_format, *a_scale, 1 if op.lhs_k_pack else 0, plan, 0)
    if op.b_format in UNSCALED_FORMATS and b_scale[0] is None and plan.terms[1] == 1:
        b_terms = [dequant_operand(em, op.b, op.b_type, op.b_format, None, None, 0, plan.elem)]  # already [K, N]
    else:  # rhs is [K', N]: work on its transpose [N, K'] (scales are [N, K/g]) and transpose the result back
        bt, bt_ty = em.trans(op.b, op.b_type, (1, 0))
        rows = _side_terms(em, bt, bt_ty, op.b_format, *b_scale, 1 if op.rhs_k_pack else 0, plan, 1)
        b_terms = [em.trans(name, ty, (1, 0)) for name, ty in rows]
    pairs = [(a, b) for a in a_terms for b in b_terms]
    acc = op.acc
    for i, ((a, a_ty), (b, b_ty)) in enumerate(pairs):
        if a_ty.shape[1] != b_ty.shape[0]:
            raise ValueError(f"dequantized K mismatch {a_ty} x {b_ty} for {op.result}")
        result = op.result if i == len(pairs) - 1 else f"%{prefix}_acc{i}"
        acc = em.dot(a, b, acc, a_ty, b_ty, op.out_type, result=result)
    return "".join(em.lines)


_SSA = r"%[\w.$\-#]+"
_CONST = re.compile(rf"^\s*(?P<name>{_SSA}) = arith\.constant (?:dense<(?P<dense>[^>]+)>|(?P<scalar>\S+)) : "
                    r"(?:tensor<[\dx]+x)?(?P<elem>\w+)")
_SAME_VALUE = re.compile(rf"^\s*(?P<name>{_SSA}) = (?:tt\.splat|tt\.fp_to_fp|arith\.extf|arith\.truncf) "
                         rf"(?P<src>{_SSA})\b")
_FUNC_START = re.compile(r"^\s*tt\.func\b")


class ConstantScales:
    """Values known to be the constant 1.0 (UE4M3 or any float: a splat of a float constant 1.0, through exact
    conversions) or the e8m0 code 127 (2^0), in the current function: a library's stand-in for "no scale" (e.g.
    gemlite's ones for bf16 activations). Such a scale multiplies nothing, so the side is lowered as unscaled
    (exact, and a bf16 side needs no hi/lo split). 1.0 is exact in every float type, so conversions keep it."""

    def __init__(self) -> None:
        self._one_float: set[str] = set()
        self._code_127: set[str] = set()

    def see(self, line: str) -> None:
        if _FUNC_START.match(line):  # SSA names restart per function
            self._one_float.clear()
            self._code_127.clear()
            return
        m = _CONST.match(line)
        if m:
            value = (m["dense"] or m["scalar"]).strip()
            if m["elem"].startswith("i"):
                if value == "127":
                    self._code_127.add(m["name"])
            elif _float_or_none(value) == 1.0:
                self._one_float.add(m["name"])
            return
        m = _SAME_VALUE.match(line)
        if m:
            for known in (self._one_float, self._code_127):
                if m["src"] in known and (known is self._one_float or "tt.splat" in line):
                    known.add(m["name"])

    def is_one(self, name: "str | None", scale_elem: "str | None") -> bool:
        if name is None:
            return False
        return name in (self._code_127 if scale_elem == E8M0 else self._one_float)


def _float_or_none(text: str) -> "float | None":
    try:
        return float(text)
    except ValueError:
        return None


def _form(op: DotScaledOp) -> str:
    packing = "" if not fp4_packed_along_mn(op) else " (fp4 packed along M/N)"
    return f"{op.a_format} x {op.b_format}{packing}"


@register_pass
class LowerDotScaledPortable(Pass):
    name = "lower-dot-scaled-portable"
    stage = Stage.TTIR
    purpose = ("rewrite the tt.dot_scaled forms Triton 3.6 cannot lower exactly (NVFP4 UE4M3 scales; fp4 packed "
               "along M/N; fp16 x e8m0) into exact in-register dequantization + tt.dot (sm_90a, sm_80; non-native "
               "tiles on Blackwell)")
    options = (PassOption("force", bool, False,
                          "also rewrite dots Triton lowers itself (native kind::mxf4nvf4 included), e.g. to compare"),)
    default_enabled = True

    def applies_to(self, target) -> bool:
        # Every target: native ones still need the mixed and non-native-tile forms rewritten.
        return True

    def run(self, ir, ctx: PassContext):
        text = str(ir)
        if "tt.dot_scaled" not in text:
            ctx.report.update(lowered=0, kept_native=0, ops=[])
            return None
        out, ops, lowered = [], [], 0
        constants = ConstantScales()
        for line in text.splitlines(keepends=True):
            constants.see(line)
            op = parse_dot_scaled(line) if "tt.dot_scaled" in line else None
            if op is None:
                if "= tt.dot_scaled" in line:
                    ctx.error(f"cannot parse this tt.dot_scaled (unexpected syntax); report it with the line: "
                              f"{line.strip()[:200]}")
                out.append(line)
                continue
            entry = {"result": op.result, "form": _form(op), "lhs": op.a_format, "rhs": op.b_format,
                     "scales": [s or "none" for s in op.scale_elems], "shape": list(op.out_type.shape)}
            if triton_lowers(op, ctx.target) and not ctx.options.get("force"):
                native = op.is_nvfp4 or fp4_packed_along_mn(op)
                entry["action"] = "kept" if native else "kept (Triton lowers it)"
                out.append(line)
            else:
                ones = (constants.is_one(op.a_scale, op.scale_elems[0]),
                        constants.is_one(op.b_scale, op.scale_elems[1]))
                stack = stacks_terms(ctx.target)
                try:
                    out.append(lower_dot_scaled(op, prefix=f"bwds_{lowered}", one_scales=ones, stack=stack))
                except ValueError as exc:
                    ctx.error(f"{exc} [{_form(op)} on {ctx.target.name}]")
                entry["action"] = f"lowered to {dot_plan(op, ones, stack).describe()}"
                if any(ones):
                    entry["constant_one_scales"] = [side for side, one in zip(("lhs", "rhs"), ones) if one]
                lowered += 1
            ops.append(entry)
        ctx.report.update(lowered=lowered, kept_native=sum(e["action"] == "kept" for e in ops), ops=ops)
        if not lowered:
            return None
        return reparse("".join(out), ir.context)
