"""`lower-dot-scaled-portable`: rewrite the `tt.dot_scaled` forms Triton 3.6 cannot lower into exact
dequantize-then-`tt.dot` TTIR.

Why: Triton 3.6 decomposes block-scaled dots that the target cannot run natively inside
`tritongpu-accelerate-matmul`, and that decomposition fails for two families of forms (measured by compiling every
operand format x scale x packing combination for sm_90a and sm_100a, docs/nvfp4_hopper.md):
* any UE4M3 scale (fp8e4nv, group 16: NVFP4): it asserts (DenseElementsAttr of a float element type);
* any e2m1 operand packed along M/N (`lhs_k_pack=False` / `rhs_k_pack=False`) without UE4M3 scales (MXFP4 with
  e8m0 scales, or unscaled fp4): `PassManager::run failed`, on sm_90a and, for tiles it cannot run natively, sm_100a;
* and one that compiles but is not exact: an fp16 side against an e8m0-scaled side (`fp16_with_e8m0`).
Every other form (k-packed MXFP4, fp8 with e8m0 scales, bf16 sides) Triton lowers itself, so it is left alone.

The rewrite runs on TTIR, before `make_ttgir` sees the op, and emits per operand: unpack the two E2M1 nibbles of
each byte along K or along M/N, decode them and the scales with integer ops (exact; no fp8 instructions for fp4,
so sm_80 works too), multiply by the scale broadcast over its K-block in f32 and round to the dot's operand type
(exact: `compute_dtype` picks a type that holds every dequantized value), then a plain `tt.dot` with the original
fp32 accumulator. Triton pipelines the packed loads and dequantizes in registers, as for mixed-precision matmul.

Which ops on targets with native block-scaled MMA (sm_100a, sm_103a, sm_120a): NVFP4 dots Triton lowers natively
(e2m1 x e2m1, UE4M3 on both sides, k-packed, tile M a multiple of 128) and M/N-packed MXFP4 with e8m0 scales on
both sides and tile M a multiple of 128 on sm_100a/sm_103a (`kind::mxf8f6f4`) stay as they are.
"""
from __future__ import annotations

from bwtriton.mlir import reparse
from bwtriton.mlir.dot_scaled import DotScaledOp, parse_dot_scaled

from ..base import Pass, PassContext, PassOption, Stage, register_pass
from .emit import UNSCALED_FORMATS, TtirEmitter, dequant_operand

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


def triton_lowers(op: DotScaledOp, target) -> bool:
    """Whether Triton 3.6 lowers this `tt.dot_scaled` itself, exactly, on `target` (natively or by its own
    decomposition)."""
    if op.is_nvfp4:
        return _native_nvfp4(op, target)
    if fp4_packed_along_mn(op):
        return _native_mn_packed_mx(op, target)
    return not fp16_with_e8m0(op)


def _exact_types(fmt: str, scale_elem: "str | None") -> set[str]:
    """Operand types of `tt.dot` that hold every dequantized value of this operand exactly.

    E2M1 (2 significant bits, |x| in [0.5, 6]) times UE4M3 (4 bits, [2^-9, 448]) fits fp16 and bf16; fp8 elements
    times UE4M3 reach 448 x 448 (e4m3) or 57344 x 448 (e5m2), past fp16's 65504; e8m0 scales span 2^-127..2^127,
    so only the 8-bit exponent types (bf16, tf32) hold them. tf32 (11 significant bits, fp32 range) holds all."""
    if fmt == "bf16":
        return {"bf16", "f32"}
    if fmt == "fp16":
        return {"f16", "f32"}
    if scale_elem == E8M0 or (scale_elem == UE4M3 and fmt != "e2m1"):
        return {"bf16", "f32"}
    return {"bf16", "f16", "f32"}


def compute_dtype(op: DotScaledOp) -> str:
    """Operand type of the replacement `tt.dot`: bf16 where both sides fit it exactly (the fast path), else fp16,
    else f32 fed to a tf32 MMA (fp16 x e8m0-scaled or fp16 x UE4M3-scaled fp8: no 16-bit type holds both)."""
    fits = _exact_types(op.a_format, op.scale_elems[0]) & _exact_types(op.b_format, op.scale_elems[1])
    return next(t for t in ("bf16", "f16", "f32") if t in fits)


def lower_dot_scaled(op: DotScaledOp, prefix: str) -> str:
    """TTIR text replacing `op`: both operands dequantized to [M, K] / [K, N] and one `tt.dot`."""
    if len(op.out_type.shape) != 2:
        raise ValueError(f"{op.result}: batched (rank-{len(op.out_type.shape)}) tt.dot_scaled is not lowered by "
                         "lower-dot-scaled-portable; use 2-D tiles (one tl.dot_scaled per batch entry)")
    em = TtirEmitter(prefix=prefix, indent=op.indent, loc=op.loc)
    elem = compute_dtype(op)
    # lhs is [M, K'] already rows-major; packing is along K (axis 1) or M (axis 0).
    a, a_ty = dequant_operand(em, op.a, op.a_type, op.a_format, op.a_scale, op.a_scale_type,
                              1 if op.lhs_k_pack else 0, elem)
    # rhs is [K', N]: work on its transpose [N, K'] (scales are [N, K/g]) and transpose the result back.
    if op.b_format in UNSCALED_FORMATS:
        b, b_ty = dequant_operand(em, op.b, op.b_type, op.b_format, None, None, 0, elem)
    else:
        bt, bt_ty = em.trans(op.b, op.b_type, (1, 0))
        b_rows, b_rows_ty = dequant_operand(em, bt, bt_ty, op.b_format, op.b_scale, op.b_scale_type,
                                            1 if op.rhs_k_pack else 0, elem)
        b, b_ty = em.trans(b_rows, b_rows_ty, (1, 0))
    if a_ty.shape[1] != b_ty.shape[0]:
        raise ValueError(f"dequantized K mismatch {a_ty} x {b_ty} for {op.result}")
    em.dot(a, b, op.acc, a_ty, b_ty, op.out_type, result=op.result)
    return "".join(em.lines)


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
        for line in text.splitlines(keepends=True):
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
                try:
                    out.append(lower_dot_scaled(op, prefix=f"bwds_{lowered}"))
                except ValueError as exc:
                    ctx.error(f"{exc} [{_form(op)} on {ctx.target.name}]")
                entry["action"] = f"lowered to {compute_dtype(op)} tt.dot"
                lowered += 1
            ops.append(entry)
        ctx.report.update(lowered=lowered, kept_native=sum(e["action"] == "kept" for e in ops), ops=ops)
        if not lowered:
            return None
        return reparse("".join(out), ir.context)
