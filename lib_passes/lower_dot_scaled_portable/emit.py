"""The TTIR ops that replace one `tt.dot_scaled`: `TtirEmitter` writes well-typed TTIR lines with fresh SSA
names, `dequant_operand` the exact dequantization of one operand.

Triton 3.6's Python IR API cannot erase or replace ops, so `lower-dot-scaled-portable` prints the module, swaps
each `tt.dot_scaled` line (read by `bwtriton.mlir.dot_scaled`) for a block of these ops and re-parses
(`bwtriton.mlir.reparse` verifies the result).

The dequantization it emits is exact (see `dequant_operand`): an E2M1 element times a UE4M3 scale has at most
2 x 4 significant bits and a magnitude in [2^-10, 2688], so it is representable in bf16 and fp16; with e8m0 scales
(2^-127..2^127) it needs bf16's or tf32's 8 exponent bits; the pass picks the operand type per dot
(`compute_dtype`), so the following `tt.dot` (fp32 accumulate) sees exactly the values the block-scaled MMA would.
The one exception is the format's own edge: a dequantized element of magnitude >= 2^128 (e8m0 code >= 253 on an
E2M1 6, >= 247 on an E4M3 448) is inf here where the hardware would carry it into a finite product.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from bwtriton.mlir.types import TensorType


def _float_literal(value: float) -> str:
    return f"{value:.6e}"


@dataclass
class TtirEmitter:
    """Writes TTIR op lines with fresh SSA names (`%<prefix>_<n>`), each carrying the replaced op's location."""

    prefix: str
    indent: str = "    "
    loc: str = ""
    lines: list[str] = field(default_factory=list)
    _count: int = 0

    def _fresh(self) -> str:
        self._count += 1
        return f"%{self.prefix}_{self._count}"

    def op(self, text: str, name: Optional[str] = None) -> str:
        """Emit `name = text`; returns the SSA name."""
        name = name or self._fresh()
        loc = f" {self.loc}" if self.loc else ""
        self.lines.append(f"{self.indent}{name} = {text}{loc}\n")
        return name

    # --- constants and elementwise -----------------------------------------------------------------------------
    def splat_int(self, value: int, ty: TensorType) -> str:
        return self.op(f"arith.constant dense<{value}> : {ty}")

    def splat_float(self, value: float, ty: TensorType) -> str:
        return self.op(f"arith.constant dense<{_float_literal(value)}> : {ty}")

    def binary(self, opname: str, lhs: str, rhs: str, ty: TensorType) -> str:
        return self.op(f"arith.{opname} {lhs}, {rhs} : {ty}")

    def int_binary_const(self, opname: str, value: str, const: int, ty: TensorType) -> str:
        return self.binary(opname, value, self.splat_int(const, ty), ty)

    def cast(self, opname: str, value: str, src: TensorType, dst: TensorType) -> str:
        return self.op(f"arith.{opname} {value} : {src} to {dst}")

    def bitcast(self, value: str, src: TensorType, dst: TensorType) -> str:
        return self.op(f"tt.bitcast {value} : {src} -> {dst}")

    # --- shape ops --------------------------------------------------------------------------------------------
    def join(self, lhs: str, rhs: str, ty: TensorType) -> tuple[str, TensorType]:
        out = ty.with_(shape=(*ty.shape, 2))
        return self.op(f"tt.join {lhs}, {rhs} : {ty} -> {out}"), out

    def reshape(self, value: str, src: TensorType, shape: tuple[int, ...]) -> tuple[str, TensorType]:
        out = src.with_(shape=shape)
        return self.op(f"tt.reshape {value} : {src} -> {out}"), out

    def trans(self, value: str, src: TensorType, order: tuple[int, ...]) -> tuple[str, TensorType]:
        out = src.with_(shape=tuple(src.shape[i] for i in order))
        order_text = ", ".join(str(i) for i in order)
        return self.op(f"tt.trans {value} {{order = array<i32: {order_text}>}} : {src} -> {out}"), out

    def expand_dims(self, value: str, src: TensorType, axis: int) -> tuple[str, TensorType]:
        shape = list(src.shape)
        shape.insert(axis, 1)
        out = src.with_(shape=tuple(shape))
        return self.op(f"tt.expand_dims {value} {{axis = {axis} : i32}} : {src} -> {out}"), out

    def broadcast(self, value: str, src: TensorType, shape: tuple[int, ...]) -> tuple[str, TensorType]:
        out = src.with_(shape=shape)
        return self.op(f"tt.broadcast {value} : {src} -> {out}"), out

    def dot(self, a: str, b: str, acc: str, a_ty: TensorType, b_ty: TensorType, out_ty: TensorType,
            result: str) -> str:
        return self.op(f"tt.dot {a}, {b}, {acc}, inputPrecision = tf32 : {a_ty} * {b_ty} -> {out_ty}", name=result)


# --------------------------------------------------------------------------------------------------------------
# Dequantizing one operand to a dense [rows, K] tensor
# --------------------------------------------------------------------------------------------------------------

#: TTIR element type of each `tt.dot_scaled` operand format (fp4 is packed into i8 bytes).
FP8_ELEM = {"e4m3": "f8E4M3FN", "e5m2": "f8E5M2"}
UNSCALED_FORMATS = {"bf16": "bf16", "fp16": "f16"}
E2M1_F16_FACTOR = 2.0 ** 14   # an E2M1 code placed in fp16 bits (see `_decode_e2m1`) reads as value * 2^-14
UE4M3_F16_FACTOR = 2.0 ** 8   # a UE4M3 byte shifted into fp16 bits reads as value * 2^-8


def _unpack_fp4(em: TtirEmitter, packed: str, ty: TensorType, axis: int) -> tuple[str, TensorType]:
    """uint8 bytes holding two E2M1 codes (element 2i in the low nibble) -> i8 codes, `axis` doubled."""
    lo = em.int_binary_const("andi", packed, 15, ty)
    hi = em.int_binary_const("shrui", packed, 4, ty)   # logical shift of the i8 byte: the high nibble, zero-extended
    joined, jty = em.join(lo, hi, ty)                   # [..., 2]: low nibble first
    rank = len(ty.shape)
    if axis != rank - 1:  # move the pair dim right behind `axis`, so the reshape interleaves along it
        order = tuple(list(range(axis + 1)) + [rank] + list(range(axis + 1, rank)))
        joined, jty = em.trans(joined, jty, order)
    shape = list(ty.shape)
    shape[axis] *= 2
    return em.reshape(joined, jty, tuple(shape))


def _decode_e2m1(em: TtirEmitter, codes: str, ty: TensorType) -> tuple[str, TensorType]:
    """i8 E2M1 codes -> f32 holding value * 2^-14, exactly.

    Code s.e1e0.m goes to fp16 bits s at 15, e at 11..10, m at 9: a normal fp16 2^(e-15)(1+m/2) for e > 0 and the
    subnormal m * 2^-15 for e == 0, i.e. the E2M1 value 2^(e-1)(1+m/2) (m/2 for e == 0) times 2^-14. fp16 -> f32
    is exact for subnormals too, so no flush-to-zero can bite."""
    i16 = ty.with_(elem="i16")
    wide = em.cast("extui", codes, ty, i16)
    mag = em.int_binary_const("shli", em.int_binary_const("andi", wide, 7, i16), 9, i16)
    sign = em.int_binary_const("shli", em.int_binary_const("andi", wide, 8, i16), 12, i16)
    bits = em.binary("ori", mag, sign, i16)
    half = em.bitcast(bits, i16, ty.with_(elem="f16"))
    f32 = ty.with_(elem="f32")
    return em.cast("extf", half, ty.with_(elem="f16"), f32), f32


def _decode_scale(em: TtirEmitter, scale: str, ty: TensorType) -> tuple[str, TensorType, float]:
    """Block scales -> (f32 tensor, factor): true scale = tensor * factor.

    UE4M3 (f8E4M3FN): the 7 magnitude bits shifted left by 7 are the fp16 with the same mantissa and an exponent
    bias of 15 instead of 7 (subnormals line up too), so it reads as scale * 2^-8: integer ops only, no fp8
    conversion instructions, so it works on sm_80 as well. UE8M0 (i8): 2^(code-127) built as f32 bits (code 0,
    2^-127, as the f32 subnormal); code 255 (NaN in the format) becomes NaN."""
    i8 = ty.with_(elem="i8")
    i16 = ty.with_(elem="i16")
    f32 = ty.with_(elem="f32")
    if ty.elem == "f8E4M3FN":
        raw = em.bitcast(scale, ty, i8)
        wide = em.cast("extui", em.int_binary_const("andi", raw, 0x7F, i8), i8, i16)
        half = em.bitcast(em.int_binary_const("shli", wide, 7, i16), i16, ty.with_(elem="f16"))
        return em.cast("extf", half, ty.with_(elem="f16"), f32), f32, UE4M3_F16_FACTOR
    if ty.elem == "i8":
        i1, i32 = ty.with_(elem="i1"), ty.with_(elem="i32")
        wide = em.cast("extui", scale, i8, i32)
        value = em.bitcast(em.int_binary_const("shli", wide, 23, i32), i32, f32)
        # code 0 is 2^-127, the f32 subnormal 0x00400000 (exponent bits alone would give +0.0)
        is_min = em.op(f"arith.cmpi eq, {wide}, {em.splat_int(0, i32)} : {i32}")
        value = em.op(f"arith.select {is_min}, {em.op(f'arith.constant dense<0x00400000> : {f32}')}, {value} : "
                      f"{i1}, {f32}")
        is_nan = em.op(f"arith.cmpi eq, {wide}, {em.splat_int(255, i32)} : {i32}")
        nan = em.op(f"arith.constant dense<0x7FC00000> : {f32}")
        return em.op(f"arith.select {is_nan}, {nan}, {value} : {i1}, {f32}"), f32, 1.0
    raise ValueError(f"unsupported tt.dot_scaled scale element type {ty.elem}")


def _broadcast_scale(em: TtirEmitter, scale: str, sty: TensorType, rows_k: tuple[int, int]) -> str:
    """[rows, K/g] -> [rows, K]: each scale repeated over its block of g consecutive K elements."""
    rows, k = rows_k
    group = k // sty.shape[1]
    expanded, ety = em.expand_dims(scale, sty, 2)
    wide, wty = em.broadcast(expanded, ety, (rows, sty.shape[1], group))
    flat, _ = em.reshape(wide, wty, (rows, k))
    return flat


def _scaled_elements(em: TtirEmitter, value: str, ty: TensorType, fmt: str,
                     packed_axis: int) -> tuple[str, TensorType, float]:
    """The operand's elements as f32 (times a power-of-two factor, returned): the value a scale multiplies."""
    if fmt in UNSCALED_FORMATS:  # a bf16/fp16 side may carry a scale too (tl.dot_scaled accepts it)
        f32 = ty.with_(elem="f32")
        return em.cast("extf", value, ty, f32), f32, 1.0
    if fmt == "e2m1":
        codes, cty = _unpack_fp4(em, value, ty, packed_axis)
        elems, ety = _decode_e2m1(em, codes, cty)
        return elems, ety, E2M1_F16_FACTOR
    if fmt in FP8_ELEM:
        fp8 = ty.with_(elem=FP8_ELEM[fmt])
        src = em.bitcast(value, ty, fp8) if ty.elem != fp8.elem else value
        ety = ty.with_(elem="f32")
        return em.op(f"tt.fp_to_fp {src} : {fp8} -> {ety}"), ety, 1.0
    raise ValueError(f"unsupported tt.dot_scaled operand format {fmt!r}")


def dequant_f32(em: TtirEmitter, value: str, ty: TensorType, fmt: str, scale: Optional[str],
                scale_ty: Optional[TensorType], packed_axis: int) -> tuple[str, TensorType]:
    """One operand given rows-major [rows, K'] -> its exact dequantized values, f32 [rows, K].

    Exact: each element (<= 11 significant bits) times its scale (<= 4) has <= 15 bits, inside f32's 24; the
    range edges are in the module docstring. `packed_axis` is the axis along which two fp4 codes share a byte (1 = K,
    i.e. k_pack; 0 = rows)."""
    elems, ety, elem_factor = _scaled_elements(em, value, ty, fmt, packed_axis)
    rows, k = ety.shape
    if scale is None:
        if elem_factor == 1.0:
            return elems, ety
        return em.binary("mulf", elems, em.splat_float(elem_factor, ety), ety), ety
    svals, sty, scale_factor = _decode_scale(em, scale, scale_ty)
    total = elem_factor * scale_factor
    if scale_ty.elem == "f8E4M3FN":  # UE4M3 * 2^22 <= 2^31: fold both exact powers of two into the scale
        if total != 1.0:
            svals = em.binary("mulf", svals, em.splat_float(total, sty), sty)
    elif elem_factor != 1.0:  # e8m0 scales span 2^+-127: keep the element factor separate to avoid overflow
        elems = em.binary("mulf", elems, em.splat_float(elem_factor, ety), ety)
    return em.binary("mulf", elems, _broadcast_scale(em, svals, sty, (rows, k)), ety), ety


def split_bf16(em: TtirEmitter, value: str, ty: TensorType) -> list[tuple[str, TensorType]]:
    """f32 values of <= 16 significant bits -> [hi, lo] bf16 with hi + lo == value exactly (`split_f32`)."""
    bf16 = ty.with_(elem="bf16")
    return [(em.cast("truncf", part, ty, bf16), bf16) for part, _ in split_f32(em, value, ty)]


def split_f32(em: TtirEmitter, value: str, ty: TensorType) -> list[tuple[str, TensorType]]:
    """f32 values of <= 16 significant bits -> [hi, lo], f32 tensors of bf16 values, hi + lo == value exactly.

    hi keeps the top 16 bits of the f32 pattern (sign, exponent, 7 mantissa bits: a bf16 value, so the
    truncation to bf16 is exact); value - hi is exact in f32 and has the remaining <= 8 significant bits, so it
    is a bf16 value too, down to bf16's smallest subnormal 2^-133. Where the value is +-inf, lo (inf - inf) is
    NaN: it is replaced by 0 so the sum stays inf (a NaN value keeps its quiet bit in hi)."""
    i32, i1 = ty.with_(elem="i32"), ty.with_(elem="i1")
    bits = em.bitcast(value, ty, i32)
    hi = em.bitcast(em.int_binary_const("andi", bits, -65536, i32), i32, ty)
    lo = em.binary("subf", value, hi, ty)
    is_num = em.op(f"arith.cmpf oeq, {lo}, {lo} : {ty}")
    lo = em.op(f"arith.select {is_num}, {lo}, {em.splat_float(0.0, ty)} : {i1}, {ty}")
    return [(hi, ty), (lo, ty)]


def to_dot_terms(em: TtirEmitter, value: str, ty: TensorType, compute_elem: str,
                 terms: int) -> list[tuple[str, TensorType]]:
    """Exact f32 values -> the `tt.dot` operand(s) whose sum they are: one tensor of `compute_elem` (bf16, f16,
    or f32 for a tf32 dot; the caller picked a type holding every value) or, `terms == 2`, bf16 hi + lo."""
    if terms == 2:
        return split_bf16(em, value, ty)
    if compute_elem == ty.elem:
        return [(value, ty)]
    out = ty.with_(elem=compute_elem)
    return [(em.cast("truncf", value, ty, out), out)]


def stack_along_k(em: TtirEmitter, parts: list[tuple[str, TensorType]]) -> tuple[str, TensorType]:
    """2 or 4 rows-major [rows, K] tensors -> one [rows, len(parts) * K] whose K columns interleave them: column
    2k + j is part j's column k (4 parts: column 4k + 2i + h is part 2h + i's). Both operands of a dot stacked
    this way in the same part order pair part j of one with part j of the other, so one `tt.dot` over the
    stacked K sums exactly the products of the separate dots."""
    if len(parts) not in (2, 4):
        raise ValueError(f"stack_along_k takes 2 or 4 parts, not {len(parts)}")
    (p0, ty), (p1, _) = parts[:2]
    joined, jty = em.join(p0, p1, ty)
    if len(parts) == 4:
        upper, _ = em.join(parts[2][0], parts[3][0], ty)
        joined, jty = em.join(joined, upper, jty)
    rows, k = ty.shape
    return em.reshape(joined, jty, (rows, k * len(parts)))


def dequant_operand(em: TtirEmitter, value: str, ty: TensorType, fmt: str, scale: Optional[str],
                    scale_ty: Optional[TensorType], packed_axis: int, compute_elem: str) -> tuple[str, TensorType]:
    """Dequantize one operand given in rows-major form [rows, K'] to [rows, K] of `compute_elem` (bf16, f16,
    or f32 for a tf32 dot), which must hold every dequantized value (see `dequant_f32`)."""
    if fmt in UNSCALED_FORMATS and scale is None:
        if ty.elem == compute_elem:
            return value, ty
        f32 = ty.with_(elem="f32")
        wide = em.cast("extf", value, ty, f32) if ty.elem != "f32" else value
        return to_dot_terms(em, wide, f32, compute_elem, 1)[0]
    exact, ety = dequant_f32(em, value, ty, fmt, scale, scale_ty, packed_axis)
    return to_dot_terms(em, exact, ety, compute_elem, 1)[0]
