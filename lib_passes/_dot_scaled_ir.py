"""Text-level model of `tt.dot_scaled` in TTIR and an emitter for the TTIR ops that replace it.

Triton 3.6's Python IR API cannot erase or replace ops, so `lower-nvfp4-portable` prints the module, swaps each
`tt.dot_scaled` line for a block of plain TTIR ops and re-parses (`mlir_util.reparse` verifies the result). This
module owns the two text pieces: parsing one `tt.dot_scaled` line into a `DotScaledOp` (its custom assembly
format is fixed by TritonOps.td), and `TtirEmitter`, which writes well-typed TTIR ops with fresh SSA names.

The dequantization it emits is exact (see `dequant_operand`): an E2M1 element times a UE4M3 scale has at most
2 x 4 significant bits and a magnitude in [2^-10, 2688], so it is representable in bf16 and fp16, and the
following `tt.dot` (fp32 accumulate) sees exactly the values the block-scaled MMA would.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from .mlir_util import split_top_level

# `%d = tt.dot_scaled %a (scale %as)?, %b (scale %bs)?, %c lhs = F rhs = F {attrs}? : types -> type loc(...)?`
_DOT_SCALED = re.compile(
    r"^(?P<indent>\s*)(?P<result>%[\w.$\-#]+) = tt\.dot_scaled (?P<a>%[\w.$\-#]+)(?: scale (?P<a_scale>%[\w.$\-#]+))?"
    r", (?P<b>%[\w.$\-#]+)(?: scale (?P<b_scale>%[\w.$\-#]+))?, (?P<acc>%[\w.$\-#]+)"
    r" lhs = (?P<a_fmt>\w+) rhs = (?P<b_fmt>\w+)(?: (?P<attrs>\{[^{}]*\}))?"
    r" : (?P<types>.*?) -> (?P<out>tensor<[^>]*>)(?P<loc>\s+loc\(.*\))?\s*$")
_TENSOR = re.compile(r"^tensor<(?P<dims>(?:\d+x)*)(?P<elem>[\w]+)>$")
_BOOL_ATTR = re.compile(r"(?P<key>\w+)\s*=\s*(?P<value>true|false)")


@dataclass(frozen=True)
class TensorType:
    """A ranked TTIR tensor type without encoding, e.g. tensor<128x64xi8>."""

    shape: tuple[int, ...]
    elem: str

    @classmethod
    def parse(cls, text: str) -> "TensorType":
        m = _TENSOR.match(text.strip())
        if not m:
            raise ValueError(f"not an encoding-free ranked tensor type: {text!r}")
        dims = tuple(int(d) for d in m["dims"].split("x") if d)
        return cls(dims, m["elem"])

    def with_(self, shape: Optional[tuple[int, ...]] = None, elem: Optional[str] = None) -> "TensorType":
        return TensorType(tuple(self.shape if shape is None else shape), elem or self.elem)

    def __str__(self) -> str:
        return f"tensor<{''.join(f'{d}x' for d in self.shape)}{self.elem}>"


@dataclass
class DotScaledOp:
    """One parsed `tt.dot_scaled` line. Scales are None for unscaled (bf16/fp16) operands."""

    indent: str
    result: str
    a: str
    a_scale: Optional[str]
    b: str
    b_scale: Optional[str]
    acc: str
    a_format: str
    b_format: str
    attrs: dict[str, bool]
    a_type: TensorType
    a_scale_type: Optional[TensorType]
    b_type: TensorType
    b_scale_type: Optional[TensorType]
    out_type: TensorType
    loc: str = ""

    @property
    def lhs_k_pack(self) -> bool:
        return self.attrs.get("lhs_k_pack", True)

    @property
    def rhs_k_pack(self) -> bool:
        return self.attrs.get("rhs_k_pack", True)

    @property
    def scale_elems(self) -> tuple[Optional[str], Optional[str]]:
        return (self.a_scale_type.elem if self.a_scale_type else None,
                self.b_scale_type.elem if self.b_scale_type else None)

    @property
    def is_nvfp4(self) -> bool:
        """Any operand carries UE4M3 (fp8e4nv) scales: Triton's group-16 NVFP4 flavour."""
        return "f8E4M3FN" in self.scale_elems


def parse_dot_scaled(line: str) -> Optional[DotScaledOp]:
    """Parse a `tt.dot_scaled` line; None when the line is another op."""
    m = _DOT_SCALED.match(line.rstrip("\n"))
    if not m:
        return None
    lhs_types, _, rhs_types = m["types"].partition(" * ")
    a_types = [TensorType.parse(t) for t in split_top_level(lhs_types)]
    b_types = [TensorType.parse(t) for t in split_top_level(rhs_types)]
    if len(a_types) != 1 + bool(m["a_scale"]) or len(b_types) != 1 + bool(m["b_scale"]):
        raise ValueError(f"tt.dot_scaled operand/type mismatch in: {line.strip()}")
    attrs = {am["key"]: am["value"] == "true" for am in _BOOL_ATTR.finditer(m["attrs"] or "")}
    return DotScaledOp(indent=m["indent"], result=m["result"], a=m["a"], a_scale=m["a_scale"], b=m["b"],
                       b_scale=m["b_scale"], acc=m["acc"], a_format=m["a_fmt"], b_format=m["b_fmt"], attrs=attrs,
                       a_type=a_types[0], a_scale_type=a_types[1] if len(a_types) > 1 else None,
                       b_type=b_types[0], b_scale_type=b_types[1] if len(b_types) > 1 else None,
                       out_type=TensorType.parse(m["out"]), loc=(m["loc"] or "").strip())


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
    conversion instructions, so it works on sm_80 as well. UE8M0 (i8): 2^(code-127) built as f32 bits; code 255
    (NaN in the format) becomes NaN."""
    i8 = ty.with_(elem="i8")
    i16 = ty.with_(elem="i16")
    f32 = ty.with_(elem="f32")
    if ty.elem == "f8E4M3FN":
        raw = em.bitcast(scale, ty, i8)
        wide = em.cast("extui", em.int_binary_const("andi", raw, 0x7F, i8), i8, i16)
        half = em.bitcast(em.int_binary_const("shli", wide, 7, i16), i16, ty.with_(elem="f16"))
        return em.cast("extf", half, ty.with_(elem="f16"), f32), f32, UE4M3_F16_FACTOR
    if ty.elem == "i8":
        i32 = ty.with_(elem="i32")
        wide = em.cast("extui", scale, i8, i32)
        value = em.bitcast(em.int_binary_const("shli", wide, 23, i32), i32, f32)
        is_nan = em.op(f"arith.cmpi eq, {wide}, {em.splat_int(255, i32)} : {i32}")
        nan = em.op(f"arith.constant dense<0x7FC00000> : {f32}")
        return em.op(f"arith.select {is_nan}, {nan}, {value} : {ty.with_(elem='i1')}, {f32}"), f32, 1.0
    raise ValueError(f"unsupported tt.dot_scaled scale element type {ty.elem}")


def _broadcast_scale(em: TtirEmitter, scale: str, sty: TensorType, rows_k: tuple[int, int]) -> str:
    """[rows, K/g] -> [rows, K]: each scale repeated over its block of g consecutive K elements."""
    rows, k = rows_k
    group = k // sty.shape[1]
    expanded, ety = em.expand_dims(scale, sty, 2)
    wide, wty = em.broadcast(expanded, ety, (rows, sty.shape[1], group))
    flat, _ = em.reshape(wide, wty, (rows, k))
    return flat


def dequant_operand(em: TtirEmitter, value: str, ty: TensorType, fmt: str, scale: Optional[str],
                    scale_ty: Optional[TensorType], packed_axis: int, compute_elem: str) -> tuple[str, TensorType]:
    """Dequantize one operand given in rows-major form [rows, K'] to [rows, K] of `compute_elem` (bf16/f16).

    `packed_axis` is the axis along which two fp4 codes share a byte (1 = K, i.e. k_pack; 0 = rows)."""
    out_elem = compute_elem
    if fmt in UNSCALED_FORMATS:
        if scale is not None:
            raise ValueError(f"a {fmt} operand of tt.dot_scaled cannot carry a scale")
        if ty.elem == out_elem:
            return value, ty
        f32 = ty.with_(elem="f32")
        return em.cast("truncf", em.cast("extf", value, ty, f32), f32, ty.with_(elem=out_elem)), ty.with_(elem=out_elem)
    if fmt == "e2m1":
        codes, cty = _unpack_fp4(em, value, ty, packed_axis)
        elems, ety = _decode_e2m1(em, codes, cty)
        elem_factor = E2M1_F16_FACTOR
    elif fmt in FP8_ELEM:
        fp8 = ty.with_(elem=FP8_ELEM[fmt])
        src = em.bitcast(value, ty, fp8) if ty.elem != fp8.elem else value
        ety = ty.with_(elem="f32")
        elems, elem_factor = em.op(f"tt.fp_to_fp {src} : {fp8} -> {ety}"), 1.0
    else:
        raise ValueError(f"unsupported tt.dot_scaled operand format {fmt!r}")
    rows, k = ety.shape
    if scale is None:
        factor = em.splat_float(elem_factor, ety)
        scaled = em.binary("mulf", elems, factor, ety)
    else:
        svals, sty, scale_factor = _decode_scale(em, scale, scale_ty)
        total = elem_factor * scale_factor
        if scale_ty.elem == "f8E4M3FN":  # UE4M3 * 2^22 <= 2^31: fold both exact powers of two into the scale
            svals = em.binary("mulf", svals, em.splat_float(total, sty), sty)
        elif elem_factor != 1.0:  # e8m0 scales span 2^+-127: keep the element factor separate to avoid overflow
            elems = em.binary("mulf", elems, em.splat_float(elem_factor, ety), ety)
        scaled = em.binary("mulf", elems, _broadcast_scale(em, svals, sty, (rows, k)), ety)
    out = ety.with_(elem=out_elem)
    return em.cast("truncf", scaled, ety, out), out
