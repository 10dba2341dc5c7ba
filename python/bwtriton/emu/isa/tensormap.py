"""Device-side tensor maps: `tensormap.replace` (fields of a 128-byte tensor-map object in shared or global memory)
and `tensormap.cp_fenceproxy` (copy it to global memory), as Triton 3.6 emits for `tl.make_tensor_descriptor`:
zero-fill 128 bytes of shared memory, replace every field, copy to the global scratch the allocator gave, then TMA
through the global address.

The CUtensorMap layout is opaque, so the emulator keeps its own: the fields below at fixed offsets plus a magic
word; `decode()` turns those bytes back into a `tma.TensorMap` when a TMA names the object. Field values are the
PTX encodings (rank - 1, box/global dims and element strides per ordinal with ordinal 0 innermost, global stride
ordinal i = the byte stride of dimension i + 1, the PTX elemtype enum).
"""
from __future__ import annotations

from dataclasses import dataclass, field as dc_field
from typing import Callable

import numpy as np

from ...ptx.ir import Instruction
from ..errors import EmulationError, UnsupportedInstructionError
from .memops import mem_read, mem_write, space_of
from .operands import swizzle
from ..machine.program import Program, active_index, address_reader

MAGIC = 0xB7A1_0001
TENSORMAP_BYTES = 128
# field -> (byte offset, bytes per value, values): ordinal fields hold 5 values
_FIELDS = {
    "global_address": (8, 8, 1), "rank": (16, 4, 1), "box_dim": (20, 4, 5), "global_dim": (40, 4, 5),
    "global_stride": (64, 8, 5), "element_stride": (104, 4, 5), "elemtype": (124, 1, 1),
    "interleave_layout": (125, 1, 1), "swizzle_mode": (126, 1, 1), "fill_mode": (127, 1, 1),
}
_MAGIC_AT = 60
#: PTX tensormap elemtype -> bytes per element in global memory (4/6-bit types: see `decode`)
ELEM_BYTES = {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 4, 9: 8, 10: 2, 11: 4, 12: 4}
FP4_PADDED = 14      # .b4x16_p64: 16 packed 4-bit elements (8 bytes) land in 16 bytes of shared memory
#: swizzle code (PTX tensormap swizzle_mode, and CUtensorMapSwizzle as in Triton's tensordesc_meta) -> span bytes
SWIZZLE_CODES = {0: 0, 1: 32, 2: 64, 3: 128}


@dataclass
class TensorMap:
    """A tiled tensor map: dims/strides in tensor order (innermost last); strides in bytes. An element is
    `elem_bytes` in global memory and `smem_elem` bytes in shared memory (equal, except fp4-padded maps whose
    "element" is a group of 16 fp4 values: 8 bytes in global memory, 16 in shared memory)."""

    base: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    elem_bytes: int
    swizzle: int = 0
    name: str = ""
    smem_elem_bytes: int = 0
    #: PTX tensormap elemtype (0 u8 .. 10 bf16, see ELEM_BYTES), -1 when the binder did not record it; only TMA
    #: reductions (cp.reduce.async.bulk.tensor) need it: their PTX names no type
    elem_type: int = dc_field(default=-1, compare=False)
    #: CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 (a host TensorDescriptor with round_f32_to_tf32): TMA loads round each f32
    #: to tf32, nearest-even at 10 mantissa bits, Inf and NaN unchanged
    round_tf32: bool = dc_field(default=False, compare=False)

    @classmethod
    def fp4_padded(cls, base: int, shape: list, outer_strides: list, box: list, swizzle: int) -> "TensorMap":
        """A map of packed fp4 data (`shape`/`box` in fp4 elements, innermost last; `outer_strides` in bytes)
        whose shared-memory side pads every 16 values (8 bytes) to 16 bytes (CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B,
        what tcgen05 kind::f8f6f4 reads for e2m1)."""
        if shape[-1] % 16 or box[-1] % 16:
            raise EmulationError(f"fp4-padded tensor map: the inner extent ({shape[-1]}) and box ({box[-1]}) must be "
                                 "multiples of 16 elements")
        return cls(base=base, shape=tuple(shape[:-1]) + (shape[-1] // 16,), strides=tuple(outer_strides) + (8,),
                   box=tuple(box[:-1]) + (box[-1] // 16,), elem_bytes=8, swizzle=swizzle, smem_elem_bytes=16)

    @property
    def smem_elem(self) -> int:
        return self.smem_elem_bytes or self.elem_bytes

    def offsets(self, coords: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(global byte addresses, in-bounds mask) of every box element in smem (row-major) order. `coords` are
        in elements (fp4 values for fp4-padded maps)."""
        if self.smem_elem_bytes:
            coords = list(coords[:-1]) + [coords[-1] // 16]
        grids = np.meshgrid(*[np.arange(b) for b in self.box], indexing="ij")
        idx = [g.ravel() + c for g, c in zip(grids, coords)]
        ok = np.ones(idx[0].shape, dtype=bool)
        addr = np.full(idx[0].shape, self.base, dtype=np.int64)
        for i, dim, stride in zip(idx, self.shape, self.strides):
            ok &= (i >= 0) & (i < dim)
            addr += np.where(ok, i, 0) * stride
        return addr, ok

    def smem_addresses(self, dst: int) -> np.ndarray:
        """Shared addresses of each element's first byte (box rows packed, then swizzled)."""
        n = int(np.prod(self.box))
        off = np.arange(n, dtype=np.int64) * self.smem_elem
        if self.swizzle:
            inner = self.box[-1] * self.smem_elem
            if inner > self.swizzle:
                raise EmulationError(f"TMA box inner dimension of {inner} bytes exceeds the {self.swizzle}-byte "
                                     "swizzle span")
        return swizzle(dst + off, self.swizzle)

    @property
    def box_bytes(self) -> int:
        """The mbarrier transaction bytes of one TMA of this map: counted on the global side (an fp4-padded
        box of 128 x 128 values is 8192 bytes, as Triton's expect_tx says, though it fills 16384 in smem)."""
        return int(np.prod(self.box)) * self.elem_bytes


def _replace(ins: Instruction, prog: Program) -> Callable:
    field = next((m for m in ins.modifiers if m in _FIELDS), None)
    if field is None or "tile" not in ins.modifiers:
        raise UnsupportedInstructionError(f"`{ins.full_opcode}`: only tensormap.replace.tile.<field> is emulated",
                                          line=ins.line, text=ins.text)
    space = space_of(ins)
    off, width, count = _FIELDS[field]
    ops = ins.operands
    rd_addr = address_reader(ops[0], prog, ins)
    ordinal = int(ops[1].value) if count > 1 else 0  # type: ignore[arg-type]
    if not 0 <= ordinal < count:
        raise EmulationError(f"tensormap.replace.{field} ordinal {ordinal} outside 0..{count - 1}", line=ins.line,
                             text=ins.text)
    rd_val = prog.src(ops[-1], np.dtype(np.uint64), ins)
    where = off + ordinal * width

    def replace(w):
        addrs, vals = rd_addr(w), np.broadcast_to(np.asarray(rd_val(w)), (32,))
        for lane in active_index(w):
            a = np.array([int(addrs[lane])], dtype=np.uint64)
            raw = np.array([int(vals[lane]) & ((1 << (8 * width)) - 1)], dtype=np.uint64).view(np.uint8)[:width]
            mem_write(w, space, a + np.uint64(where), raw.reshape(1, width))
            mem_write(w, space, a + np.uint64(_MAGIC_AT), np.array([MAGIC], np.uint32).view(np.uint8).reshape(1, 4))
    return replace


def _copy(ins: Instruction, prog: Program) -> Callable:
    """tensormap.cp_fenceproxy.global.shared::cta...sync.aligned [dst], [src], 128: the object to global memory."""
    ops = ins.operands
    rd_dst, rd_src = address_reader(ops[0], prog, ins), address_reader(ops[1], prog, ins)
    size = int(ops[2].value)  # type: ignore[arg-type]
    if size != TENSORMAP_BYTES:
        raise EmulationError(f"tensormap.cp_fenceproxy copies {size} bytes; tensor maps are 128", line=ins.line,
                             text=ins.text)

    def copy(w):
        idx = active_index(w)
        pairs = {(int(d), int(s)) for d, s in zip(rd_dst(w)[idx], rd_src(w)[idx])}
        for d, s in pairs:
            data = mem_read(w, "shared", np.array([s], dtype=np.uint64), size)
            mem_write(w, "global", np.array([d], dtype=np.uint64), data)
    return copy


def decode(raw: np.ndarray, where: str = ""):
    """The `tma.TensorMap` held by 128 bytes of a device-side tensor map, or None if they are not one."""
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    if int(raw[_MAGIC_AT:_MAGIC_AT + 4].view(np.uint32)[0]) != MAGIC:
        return None

    def field(name: str) -> np.ndarray:
        off, width, count = _FIELDS[name]
        dt = {1: np.uint8, 4: np.uint32, 8: np.uint64}[width]
        return raw[off:off + width * count].view(dt)

    rank = int(field("rank")[0]) + 1
    etype = int(field("elemtype")[0])
    if any(int(s) not in (0, 1) for s in field("element_stride")[:rank]) or int(field("interleave_layout")[0]):
        raise UnsupportedInstructionError(f"device tensor map{where}: element strides > 1 / interleaved layouts "
                                          "are not emulated")
    swz = SWIZZLE_CODES.get(int(field("swizzle_mode")[0]))
    if swz is None:
        raise UnsupportedInstructionError(f"device tensor map{where}: swizzle mode {int(field('swizzle_mode')[0])}")
    gdim = [int(x) for x in field("global_dim")[:rank]][::-1]           # tensor order, innermost last
    box = [int(x) for x in field("box_dim")[:rank]][::-1]
    gstride = [int(x) for x in field("global_stride")[:rank - 1]][::-1]  # dims 0..rank-2 in tensor order
    base = int(field("global_address")[0])
    if etype == FP4_PADDED:
        return TensorMap.fp4_padded(base, gdim, gstride, box, swz)
    eb = ELEM_BYTES.get(etype)
    if eb is None:
        raise UnsupportedInstructionError(f"device tensor map{where}: element type {etype} is not emulated")
    return TensorMap(base=base, shape=tuple(gdim), strides=tuple(gstride) + (eb,), box=tuple(box), elem_bytes=eb,
                     swizzle=swz, elem_type=etype)


#: opcode -> instruction compiler (rows of the ISA table, isa/table.py)
HANDLERS: dict[str, Callable] = {"tensormap.replace": _replace, "tensormap.cp_fenceproxy": _copy}
