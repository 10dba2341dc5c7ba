"""`lower-nvfp4-portable`: rewrite NVFP4 `tt.dot_scaled` into exact dequantize-then-`tt.dot` TTIR.

Why: Triton 3.6 decomposes block-scaled dots that the target cannot run natively inside
`tritongpu-accelerate-matmul`, and that decomposition asserts (DenseElementsAttr of a float element type) as soon
as a scale is UE4M3 (fp8e4nv, group 16: NVFP4). Measured: e2m1 x e2m1 and bf16 x e2m1 on sm_90a, and bf16 x e2m1
even on sm_100a. MXFP4 (UE8M0 scales) is left to Triton, which handles it.

The rewrite runs on TTIR, before `make_ttgir` sees the op, and emits per operand: unpack the two E2M1 nibbles of
each byte, decode them and the UE4M3 scales with integer ops into fp16 bit patterns (exact; no fp8 instructions,
so sm_80 works too), multiply by the scale broadcast over its 16 K-elements in f32, round to bf16 (exact: at most
8 significant bits), and feed a plain `tt.dot` with the original fp32 accumulator. Triton then pipelines the
packed loads and does the dequantization in registers, as for any mixed-precision matmul.

Which ops: on targets with native NVFP4 MMA (sm_100a, sm_103a, and sm_120a, where Triton 3.6 emits
`mma.sync ... kind::mxf4nvf4`) only NVFP4 dots that Triton cannot lower natively (not
e2m1 x e2m1 with UE4M3 scales on both sides, k-packed, tile M a multiple of 128) are rewritten; `kind::mxf4nvf4` stays for the rest.
"""
from __future__ import annotations

from bwtriton.mlir import reparse
from bwtriton.mlir.dot_scaled import DotScaledOp, parse_dot_scaled

from ..base import Pass, PassContext, PassOption, Stage, register_pass
from .emit import UNSCALED_FORMATS, TtirEmitter, dequant_operand


def natively_supported(op: DotScaledOp, target) -> bool:
    """Whether Triton 3.6 lowers this NVFP4 dot to a hardware block-scaled MMA on `target` (kind::mxf4nvf4)."""
    # Target.native_block_scaled (measured by compiling): sm_100a/sm_103a `tcgen05.mma ... kind::mxf4nvf4`, sm_120a
    # `mma.sync ... kind::mxf4nvf4.block_scale` (no tcgen05 there, but native fp4 MMA).
    native = target.native_block_scaled
    # Measured on sm_100a: a dot tile with M = 64 falls back to Triton's decomposition (and crashes); M = 128/256
    # with N = 64..256 lower natively.
    return (native and op.out_type.shape[0] % 128 == 0 and op.a_format == op.b_format == "e2m1"
            and op.scale_elems == ("f8E4M3FN", "f8E4M3FN") and op.lhs_k_pack and op.rhs_k_pack)


def compute_dtype(op: DotScaledOp) -> str:
    """Operand type of the replacement `tt.dot`: fp16 when an unscaled side is fp16 (keeps its 11 bits; NVFP4 values
    fit fp16 exactly), otherwise bf16."""
    return "f16" if "fp16" in (op.a_format, op.b_format) else "bf16"


def lower_dot_scaled(op: DotScaledOp, prefix: str) -> str:
    """TTIR text replacing `op`: both operands dequantized to [M, K] / [K, N] and one `tt.dot`."""
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


@register_pass
class LowerNvfp4Portable(Pass):
    name = "lower-nvfp4-portable"
    stage = Stage.TTIR
    purpose = ("rewrite NVFP4 (UE4M3-scaled) tt.dot_scaled into exact in-register dequantization + tt.dot where "
               "Triton 3.6 has no native lowering (sm_90a, sm_80; mixed bf16/fp8 x NVFP4 on every target)")
    options = (PassOption("force", bool, False,
                          "also rewrite dots the target could run natively (kind::mxf4nvf4), e.g. to compare"),)
    default_enabled = True

    def applies_to(self, target) -> bool:
        # Every target: native ones still need the mixed bf16/fp8 x NVFP4 cases rewritten.
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
                if "tt.dot_scaled" in line and "= tt.dot_scaled" in line:
                    ctx.error(f"cannot parse this tt.dot_scaled (unexpected syntax); report it with the line: "
                              f"{line.strip()[:200]}")
                out.append(line)
                continue
            entry = {"result": op.result, "lhs": op.a_format, "rhs": op.b_format,
                     "scales": [s or "none" for s in op.scale_elems], "shape": list(op.out_type.shape)}
            if not op.is_nvfp4 or (natively_supported(op, ctx.target) and not ctx.options.get("force")):
                entry["action"] = "kept" if op.is_nvfp4 else "kept (not NVFP4: Triton lowers it)"
                out.append(line)
            else:
                entry["action"] = f"lowered to {compute_dtype(op)} tt.dot"
                out.append(lower_dot_scaled(op, prefix=f"bwnvfp4_{lowered}"))
                lowered += 1
            ops.append(entry)
        ctx.report.update(lowered=lowered, kept_native=sum(e["action"] == "kept" for e in ops), ops=ops)
        if not lowered:
            return None
        return reparse("".join(out), ir.context)
