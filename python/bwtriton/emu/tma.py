"""TMA: cp.async.bulk.tensor loads (global -> shared::cluster, completing an mbarrier transaction, optional
multicast) and stores (shared -> global), with tensor maps built from the launch's TensorDescriptor arguments."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ..ptx.ir import Instruction
from .errors import EmulationError, UnsupportedInstructionError
from .memops import active_index, address_reader
from .memory import split_cluster_address
from .operands import swizzle
from .program import Program

U32 = np.dtype(np.uint32)
#: CUtensorMapSwizzle code (as in Triton's tensordesc_meta) -> swizzle span in bytes
SWIZZLE_CODES = {0: 0, 1: 32, 2: 64, 3: 128}


@dataclass
class TensorMap:
    """A tiled tensor map: dims/strides in tensor order (innermost last); strides in bytes."""

    base: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    elem_bytes: int
    swizzle: int = 0
    name: str = ""

    def offsets(self, coords: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(global byte addresses, in-bounds mask) of every box element in smem (row-major) order."""
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
        off = np.arange(n, dtype=np.int64) * self.elem_bytes
        if self.swizzle:
            inner = self.box[-1] * self.elem_bytes
            if inner > self.swizzle:
                raise EmulationError(f"TMA box inner dimension of {inner} bytes exceeds the {self.swizzle}-byte "
                                     "swizzle span")
        return swizzle(dst + off, self.swizzle)

    @property
    def box_bytes(self) -> int:
        return int(np.prod(self.box)) * self.elem_bytes


def _coords_reader(op, prog: Program, ins: Instruction) -> tuple[Callable, list[Callable]]:
    if op.kind != "addr" or not op.items:
        raise UnsupportedInstructionError("cp.async.bulk.tensor without [tensorMap, {coords}]", line=ins.line,
                                          text=ins.text)
    rd_map = prog.src(op.base, np.dtype(np.uint64), ins)
    coords = op.items[0].items if op.items[0].kind == "vec" else op.items
    return rd_map, [prog.src(c, np.dtype(np.int32), ins) for c in coords]


def tensormap_at(w, addr: int) -> TensorMap:
    tm = w.launch.params.tensormaps.get(int(addr))
    if tm is None:
        raise EmulationError(f"no tensor map at address 0x{int(addr):x}: pass a TensorDescriptor for this kernel "
                             "argument (in-kernel tensormap creation is not emulated)", where=w.where())
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
    line = ins.line

    def load(w):
        from .tcgen05 import AsyncOp, _queue
        dst_all, map_all, bar_all = rd_dst(w), np.broadcast_to(rd_map(w), (32,)), rd_bar(w)
        coords_all = [np.broadcast_to(np.asarray(c(w)), (32,)) for c in rd_coords]
        for lane in active_index(w):  # single-thread issue
            tmap = tensormap_at(w, map_all[lane])
            coords = [int(c[lane]) for c in coords_all][::-1]  # PTX lists the innermost coordinate first
            rank, dst = split_cluster_address(int(dst_all[lane]), w.cta.rank)
            brank, bar = split_cluster_address(int(bar_all[lane]), w.cta.rank)
            ranks = [rank]
            if multicast:
                mask = int(np.broadcast_to(np.asarray(rd_mask(w)), (32,))[lane])
                ranks = [r for r in range(len(w.cta.cluster.ctas)) if mask >> r & 1]
            cluster = w.cta.cluster

            def run(tmap=tmap, coords=coords, ranks=ranks, dst=dst, bar=bar, brank=brank):
                gaddr, ok = tmap.offsets(coords)
                eb = tmap.elem_bytes
                data = np.zeros((len(gaddr), eb), dtype=np.uint8)
                if ok.any():
                    data[ok] = w.launch.gmem.read(gaddr[ok].astype(np.uint64), eb)
                saddr = tmap.smem_addresses(dst)
                for r in ranks:
                    cluster.ctas[r].smem.write(saddr, data)
                    # multicast: each destination CTA's mbarrier at the same offset gets the bytes
                    target = cluster.ctas[r if multicast else brank].mbarriers.get(bar)
                    if target is None:
                        raise EmulationError(f"TMA completes on an uninitialised mbarrier at 0x{bar:x}", line=line)
                    target.complete_tx(tmap.box_bytes)
            _queue(w, AsyncOp(run=run, issuer_rank=w.cta.rank, line=line))
    return load


def _store(ins: Instruction, prog: Program) -> Callable:
    ops = ins.operands
    rd_map, rd_coords = _coords_reader(ops[0], prog, ins)
    rd_src = address_reader(ops[1], prog, ins)
    reduce_op = next((m for m in ins.modifiers if m in ("add", "min", "max")), None) \
        if ins.opcode.startswith("cp.reduce") else None

    def store(w):
        map_all, src_all = np.broadcast_to(rd_map(w), (32,)), rd_src(w)
        coords_all = [np.broadcast_to(np.asarray(c(w)), (32,)) for c in rd_coords]
        for lane in active_index(w):
            tmap = tensormap_at(w, map_all[lane])
            coords = [int(c[lane]) for c in coords_all][::-1]
            gaddr, ok = tmap.offsets(coords)
            data = w.cta.smem.read(tmap.smem_addresses(int(src_all[lane])), tmap.elem_bytes)
            if reduce_op:
                raise UnsupportedInstructionError("cp.reduce.async.bulk.tensor")
            if ok.any():
                w.launch.gmem.write(gaddr[ok].astype(np.uint64), data[ok])
    return store


def compile_instruction(ins: Instruction, prog: Program) -> Optional[Callable]:
    op = ins.opcode
    if op in ("cp.async.bulk.tensor", "cp.reduce.async.bulk.tensor"):
        mods = ins.modifiers
        if "global" in mods and mods.index("global") == next(i for i, m in enumerate(mods) if m in
                                                             ("global", "shared::cluster", "shared::cta")):
            return _store(ins, prog)
        return _load(ins, prog)
    if op in ("cp.async.bulk.commit_group", "cp.async.bulk.wait_group"):
        return lambda w: None  # stores complete at issue
    if op == "cp.async.bulk":
        raise UnsupportedInstructionError("non-tensor cp.async.bulk", line=ins.line, text=ins.text)
    return None
