"""TMA: cp.async.bulk.tensor loads (global -> shared::cluster, completing an mbarrier transaction, optional
multicast) and stores (shared -> global), with tensor maps built from the launch's TensorDescriptor arguments."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ...ptx.ir import Instruction
from ..machine.async_engine import AsyncOp, clock_of, engine_of, issuer_of
from .memops import mem_read
from .numerics import bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits
from .tensormap import TENSORMAP_BYTES, TensorMap, decode
from ..errors import EmulationError, UnsupportedInstructionError
from ..machine.memory import split_cluster_address
from ..machine.program import Program, active_index, address_reader, as_lanes
from ..machine.state import FamilyState


@dataclass
class BulkWarpState:
    #: TMA stores / bulk copies since the last cp.async.bulk.commit_group
    bulk_open: list = field(default_factory=list)
    #: the committed bulk groups, oldest first
    bulk_groups: list = field(default_factory=list)


STATE = FamilyState("tma", warp=BulkWarpState)

U32 = np.dtype(np.uint32)


def _coords_reader(op, prog: Program, ins: Instruction) -> tuple[Callable, list[Callable]]:
    if op.kind != "addr" or not op.items:
        raise UnsupportedInstructionError("cp.async.bulk.tensor without [tensorMap, {coords}]", line=ins.line,
                                          text=ins.text)
    rd_map = prog.src(op.base, np.dtype(np.uint64), ins)
    coords = op.items[0].items if op.items[0].kind == "vec" else op.items
    return rd_map, [prog.src(c, np.dtype(np.int32), ins) for c in coords]


def tensormap_at(w, addr: int) -> TensorMap:
    """The tensor map a TMA names: a host TensorDescriptor bound to a parameter, or a device-side object
    (tensormap.replace + tensormap.cp_fenceproxy, tensormap.py) in global memory."""
    tm = w.launch.params.tensormaps.get(int(addr))
    if tm is not None:
        return tm
    try:
        raw = mem_read(w, "generic", np.array([int(addr)], dtype=np.uint64), TENSORMAP_BYTES)
    except EmulationError:
        raw = None
    tm = decode(raw, f" at 0x{int(addr):x}") if raw is not None else None
    if tm is None:
        raise EmulationError(f"no tensor map at address 0x{int(addr):x}: pass a TensorDescriptor for this kernel "
                             "argument, or build one in the kernel (tl.make_tensor_descriptor)", where=w.where())
    return tm


def _load(ins: Instruction, prog: Program) -> Callable:
    if "im2col" in ins.modifiers or any(m.startswith(("tile::gather", "tile::scatter")) for m in ins.modifiers):
        raise UnsupportedInstructionError("TMA im2col / gather4", line=ins.line, text=ins.text)
    ops = ins.operands
    rd_dst = address_reader(ops[0], prog, ins)
    rd_map, rd_coords = _coords_reader(ops[1], prog, ins)
    rd_bar = address_reader(ops[2], prog, ins)
    multicast = any(m.startswith("multicast") for m in ins.modifiers)
    rd_mask = prog.src(ops[3], np.dtype(np.uint16), ins) if multicast else None
    line, text = ins.line, ins.text

    def load(w):
        dst_all, map_all, bar_all = rd_dst(w), as_lanes(rd_map(w), w.lanes), rd_bar(w)
        coords_all = [as_lanes(np.asarray(c(w)), w.lanes) for c in rd_coords]
        for lane in active_index(w):  # single-thread issue
            tmap = tensormap_at(w, map_all[lane])
            coords = [int(c[lane]) for c in coords_all][::-1]  # PTX lists the innermost coordinate first
            rank, dst = split_cluster_address(int(dst_all[lane]), w.cta.rank)
            brank, bar = split_cluster_address(int(bar_all[lane]), w.cta.rank)
            ranks = [rank]
            if multicast:
                mask = int(as_lanes(np.asarray(rd_mask(w)), w.lanes)[lane])
                ranks = [r for r in range(len(w.cta.cluster.ctas)) if mask >> r & 1]
            ctas = [w.cta.cluster.ctas[r] for r in ranks]
            # multicast: each destination CTA's mbarrier at the same offset gets the bytes
            bars = [mbarrier_at(w, c if multicast else w.cta.cluster.ctas[brank], bar, line) for c in ctas]
            saddr = tmap.smem_addresses(dst)
            se = tmap.smem_elem
            cells = (ctas[0].smem.offsets(saddr, se)[:, None] + np.arange(se)).ravel()
            lo, hi = int(cells.min()), int(cells.max()) + 1
            idx = slice(lo, hi) if hi - lo == cells.size else cells

            def finish(tmap=tmap, coords=coords, ctas=ctas, saddr=saddr):
                gaddr, ok = tmap.offsets(coords)
                eb = tmap.elem_bytes
                data = np.zeros((len(gaddr), tmap.smem_elem), dtype=np.uint8)  # fp4-padded: zero padding
                if ok.any():
                    data[ok, :eb] = w.launch.gmem.read(gaddr[ok].astype(np.uint64), eb)
                if tmap.round_tf32:
                    data = round_f32_to_tf32(data)
                for c in ctas:
                    c.smem.write(saddr, data)
            op = AsyncOp(kind="TMA load", line=line, text=text, issuer=issuer_of(w), finish=finish,
                         writes=[(c.smem, idx) for c in ctas], tx=[(b, tmap.box_bytes) for b in bars],
                         reader_must_observe=True, observe=f"Wait on its mbarrier (shared 0x{bar:x}, mbarrier.try_wait.parity)")
            for c in ctas:  # poison: the bytes are undefined until the load's completion is observed
                c.smem.data[idx] = 0xFF
            engine_of(w).issue(w, op)
    return load


def round_f32_to_tf32(data: np.ndarray) -> np.ndarray:
    """f32 elements (rows of 4 bytes) rounded to tf32 as a TFLOAT32 tensor map loads them: nearest-even at 10
    mantissa bits (the low 13 bits cleared), Inf and NaN unchanged."""
    bits = np.ascontiguousarray(data).view(np.uint32).astype(np.uint64)
    finite = (bits & 0x7F800000) != 0x7F800000
    rounded = ((bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000).astype(np.uint64)
    out = np.where(finite, rounded, bits).astype(np.uint32)
    return out.view(np.uint8).reshape(data.shape)


def mbarrier_at(w, cta, local: int, line: int):
    bar = cta.mbarriers.get(local)
    if bar is None:
        raise EmulationError(f"TMA completes on an uninitialised mbarrier at 0x{local:x} of CTA {cta.rank}",
                             where=w.where())
    return bar


_STORE_OBSERVE = ("Issue cp.async.bulk.commit_group and cp.async.bulk.wait_group.read 0 in the issuing thread "
                  "(then a barrier)")


def _store(ins: Instruction, prog: Program) -> Callable:
    """cp.async.bulk.tensor shared -> global (a TMA store), and cp.reduce.async.bulk.tensor (a TMA reduce: the
    same transfer, combined element-wise into global memory by the instruction's .add/.min/... operation)."""
    ops = ins.operands
    rd_map, rd_coords = _coords_reader(ops[0], prog, ins)
    rd_src = address_reader(ops[1], prog, ins)
    if "im2col_no_offs" in ins.modifiers:
        raise UnsupportedInstructionError("TMA im2col", line=ins.line, text=ins.text)
    red_op = _reduce_op(ins) if ins.opcode.startswith("cp.reduce") else None
    line, text = ins.line, ins.text
    reader, kind = ("the TMA reduce", "TMA reduce") if red_op else ("the TMA store", "TMA store")

    def store(w):
        map_all, src_all = as_lanes(rd_map(w), w.lanes), rd_src(w)
        coords_all = [as_lanes(np.asarray(c(w)), w.lanes) for c in rd_coords]
        smem = w.cta.smem
        for lane in active_index(w):
            tmap = tensormap_at(w, map_all[lane])
            combine = _reduction(red_op, tmap, w, line, text) if red_op else None
            coords = [int(c[lane]) for c in coords_all][::-1]
            eb = tmap.elem_bytes
            cells = smem.offsets(tmap.smem_addresses(int(src_all[lane])), eb)[:, None] + np.arange(eb)  # data only
            engine_of(w).check_async_read(smem, cells, reader)
            if smem.any_async_written:
                engine_of(w).check_observed_writes(w, smem, cells, reader)
            data = smem.data[cells]

            def finish(tmap=tmap, coords=coords, data=data, combine=combine):
                gaddr, ok = tmap.offsets(coords)
                if ok.any():
                    addr, new = gaddr[ok].astype(np.uint64), data[ok]
                    if combine is not None:  # read-modify-write, element by element (each is one atomic)
                        new = combine(w.launch.gmem.read(addr, tmap.elem_bytes), new)
                    w.launch.gmem.write(addr, new)
            op = AsyncOp(kind=kind, line=line, text=text, issuer=issuer_of(w), finish=finish,
                         reads=[(smem, int(cells.min()), int(cells.max()) + 1)], observe=_STORE_OBSERVE)
            w.bulk_open.append(engine_of(w).issue(w, op))
    return store


# ------------------------------------------------------------------------------------------------ TMA reduce
_RED_OPS = ("add", "min", "max", "inc", "dec", "and", "or", "xor")
#: tensormap elemtype -> (name, numpy dtype of the raw element); f16/bf16 are computed through float64
_ELEM = {0: ("u8", np.uint8), 1: ("u16", np.uint16), 2: ("u32", np.uint32), 3: ("s32", np.int32),
         4: ("u64", np.uint64), 5: ("s64", np.int64), 6: ("f16", np.uint16), 7: ("f32", np.float32),
         8: ("f32", np.float32), 9: ("f64", np.float64), 10: ("bf16", np.uint16)}
#: which element types each operation takes (PTX ISA, cp.reduce.async.bulk.tensor)
_RED_TYPES = {"add": ("u32", "s32", "u64", "f32", "f16", "bf16"),
              "min": ("u32", "s32", "u64", "s64", "f16", "bf16"), "max": ("u32", "s32", "u64", "s64", "f16", "bf16"),
              "inc": ("u32",), "dec": ("u32",), "and": ("u32", "s32", "u64", "s64"),
              "or": ("u32", "s32", "u64", "s64"), "xor": ("u32", "s32", "u64", "s64")}


def _reduce_op(ins: Instruction) -> str:
    ops = [m for m in ins.modifiers if m in _RED_OPS]
    if len(ops) != 1:
        raise UnsupportedInstructionError(f"cp.reduce.async.bulk.tensor needs one of .{', .'.join(_RED_OPS)}",
                                          line=ins.line, text=ins.text)
    return ops[0]


def _reduction(op: str, tmap: TensorMap, w, line: int, text: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """combine(old bytes [n, eb], new bytes [n, eb]) -> result bytes, for `op` over the map's element type."""
    name, dt = _ELEM.get(tmap.elem_type, (None, None))
    if name is None:
        why = ("the tensor map does not record its element type (host TensorDescriptor maps bound by "
               "runner._tensor_map carry none yet; device-side maps from tl.make_tensor_descriptor do)"
               if tmap.elem_type < 0 else f"element type {tmap.elem_type} is not emulated")
        raise UnsupportedInstructionError(f"TMA reduce: {why}", line=line, text=text)
    if name not in _RED_TYPES[op]:
        raise EmulationError(f"cp.reduce.async.bulk.tensor .{op} is not defined for {name} elements (PTX allows "
                             f"{', '.join(_RED_TYPES[op])})", where=w.where())

    def combine(old: np.ndarray, new: np.ndarray) -> np.ndarray:
        a = np.ascontiguousarray(old).view(dt).reshape(-1)
        b = np.ascontiguousarray(new).view(dt).reshape(-1)
        out = _float_combine(op, name, a, b) if name in ("f16", "bf16", "f32") else _int_combine(op, a, b)
        return np.ascontiguousarray(out.astype(dt, copy=False)).view(np.uint8).reshape(old.shape)
    return combine


def _float_combine(op: str, name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    to_f32 = {"f16": f16_bits_to_f32, "bf16": bf16_bits_to_f32, "f32": lambda x: x}[name]
    x, y = to_f32(a).astype(np.float64), to_f32(b).astype(np.float64)
    # add: exact in float64, then one round to nearest even (via f32, exact wherever it could matter for
    # f16/bf16 sums); min/max return the non-NaN operand, as PTX min/max do
    r = (x + y if op == "add" else np.fmin(x, y) if op == "min" else np.fmax(x, y)).astype(np.float32)
    return {"f16": f32_to_f16_bits, "bf16": f32_to_bf16_bits, "f32": lambda v: v}[name](r)


def _int_combine(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        if op == "add":
            return a + b  # wraps modulo 2^bits, like the hardware
        if op == "inc":  # PTX: old >= b ? 0 : old + 1
            return np.where(a >= b, 0, a + 1).astype(a.dtype)
        if op == "dec":  # PTX: (old == 0 || old > b) ? b : old - 1
            return np.where((a == 0) | (a > b), b, a - 1).astype(a.dtype)
    return {"min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
            "xor": np.bitwise_xor}[op](a, b)


def _bulk_copy(ins: Instruction, prog: Program) -> Callable:
    """Non-tensor cp.async.bulk: global -> shared (mbarrier complete_tx) or shared -> global (bulk_group)."""
    ops = ins.operands
    spaces = [m for m in ins.modifiers if m in ("global", "shared::cluster", "shared::cta")]
    to_global = spaces[:1] == ["global"]
    if len(spaces) < 2 or (not to_global and spaces[1] != "global"):
        raise UnsupportedInstructionError("cp.async.bulk between shared memories is not emulated", line=ins.line,
                                          text=ins.text)
    rd_dst, rd_src = address_reader(ops[0], prog, ins), address_reader(ops[1], prog, ins)
    rd_n = prog.src(ops[2], U32, ins)
    rd_bar = None if to_global else address_reader(ops[3], prog, ins)
    line, text = ins.line, ins.text

    def bulk(w):
        dst_all, src_all = rd_dst(w), rd_src(w)
        n_all = as_lanes(np.asarray(rd_n(w)), w.lanes)
        engine = engine_of(w)
        for lane in active_index(w):
            n = int(n_all[lane])
            if to_global:
                smem = w.cta.smem
                off = smem.offsets(np.array([int(src_all[lane])]), n)[0] + np.arange(n)
                engine.check_async_read(smem, off, "cp.async.bulk")
                if smem.any_async_written:
                    engine.check_observed_writes(w, smem, off, "cp.async.bulk")
                data, gaddr = smem.data[off][None, :], np.array([int(dst_all[lane])], dtype=np.uint64)
                op = AsyncOp(kind="bulk copy to global", line=line, text=text, issuer=issuer_of(w),
                             finish=lambda g=gaddr, d=data: w.launch.gmem.write(g, d),
                             reads=[(smem, int(off[0]), int(off[-1]) + 1)], observe=_STORE_OBSERVE)
                w.bulk_open.append(engine.issue(w, op))
                continue
            rank, dst = split_cluster_address(int(dst_all[lane]), w.cta.rank)
            brank, bar = split_cluster_address(int(rd_bar(w)[lane]), w.cta.rank)
            cta = w.cta.cluster.ctas[rank]
            lo = int(cta.smem.offsets(np.array([dst]), n)[0])
            src = np.array([int(src_all[lane])], dtype=np.uint64)

            def finish(cta=cta, dst=dst, src=src, n=n):
                cta.smem.write(np.array([dst]), w.launch.gmem.read(src, n))
            op = AsyncOp(kind="bulk copy", line=line, text=text, issuer=issuer_of(w), finish=finish,
                         writes=[(cta.smem, slice(lo, lo + n))],
                         tx=[(mbarrier_at(w, w.cta.cluster.ctas[brank], bar, line), n)], reader_must_observe=True,
                         observe=f"Wait on its mbarrier (shared 0x{bar:x}, mbarrier.try_wait.parity)")
            engine.issue(w, op)
    return bulk


def _bulk_commit(w):
    w.bulk_groups.append(w.bulk_open)
    w.bulk_open = []


def _bulk_wait(ins: Instruction) -> Callable:
    n = int(ins.operands[0].value) if ins.operands else 0  # type: ignore[arg-type]

    def wait(w):
        clock = clock_of(w)
        while len(w.bulk_groups) > n:
            group = w.bulk_groups.pop(0)
            engine_of(w).complete_group(group)
            for op in group:  # the issuing thread observes its retired groups (in order: a prefix)
                if op.key and not clock.saw(op.key, op.idx):
                    clock[op.key] = op.idx
    return wait


def _bulk_tensor(ins: Instruction, prog: Program) -> Callable:
    """cp{.reduce}.async.bulk.tensor: a store when global memory is the destination (its first state space)."""
    mods = ins.modifiers
    if "global" in mods and mods.index("global") == next(i for i, m in enumerate(mods) if m in
                                                         ("global", "shared::cluster", "shared::cta")):
        return _store(ins, prog)
    return _load(ins, prog)


#: opcode -> instruction compiler (rows of the ISA table, isa/table.py)
HANDLERS: dict[str, Callable] = {
    "cp.async.bulk.tensor": _bulk_tensor, "cp.reduce.async.bulk.tensor": _bulk_tensor,
    "cp.async.bulk.commit_group": lambda ins, prog: _bulk_commit,
    "cp.async.bulk.wait_group": lambda ins, prog: _bulk_wait(ins),
    "cp.async.bulk": _bulk_copy,
}
