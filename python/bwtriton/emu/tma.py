"""TMA: cp.async.bulk.tensor loads (global -> shared::cluster, completing an mbarrier transaction, optional
multicast) and stores (shared -> global), with tensor maps built from the launch's TensorDescriptor arguments."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from ..ptx.ir import Instruction
from .asyncops import AsyncOp, engine_of
from .tensormap import SWIZZLE_CODES, TENSORMAP_BYTES, TensorMap, decode  # noqa: F401 (runner uses SWIZZLE_CODES)
from .errors import EmulationError, UnsupportedInstructionError
from .memory import split_cluster_address
from .program import Program, active_index, address_reader, lanes32

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
    from .memops import mem_read
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
        dst_all, map_all, bar_all = rd_dst(w), lanes32(rd_map(w)), rd_bar(w)
        coords_all = [lanes32(np.asarray(c(w))) for c in rd_coords]
        for lane in active_index(w):  # single-thread issue
            tmap = tensormap_at(w, map_all[lane])
            coords = [int(c[lane]) for c in coords_all][::-1]  # PTX lists the innermost coordinate first
            rank, dst = split_cluster_address(int(dst_all[lane]), w.cta.rank)
            brank, bar = split_cluster_address(int(bar_all[lane]), w.cta.rank)
            ranks = [rank]
            if multicast:
                mask = int(lanes32(np.asarray(rd_mask(w)))[lane])
                ranks = [r for r in range(len(w.cta.cluster.ctas)) if mask >> r & 1]
            ctas = [w.cta.cluster.ctas[r] for r in ranks]
            # multicast: each destination CTA's mbarrier at the same offset gets the bytes
            bars = [_mbarrier_at(w, c if multicast else w.cta.cluster.ctas[brank], bar, line) for c in ctas]
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
                for c in ctas:
                    c.smem.write(saddr, data)
            op = AsyncOp(kind="TMA load", line=line, text=text, issuer=(w.cta.rank, w.wid), finish=finish,
                         writes=[(c.smem, idx) for c in ctas], tx=[(b, tmap.box_bytes) for b in bars],
                         observe=f"Wait on its mbarrier (shared 0x{bar:x}, mbarrier.try_wait.parity)")
            for c in ctas:  # poison: the bytes are undefined until the load's completion is observed
                c.smem.data[idx] = 0xFF
            engine_of(w).issue(w, op)
    return load


def _mbarrier_at(w, cta, local: int, line: int):
    bar = cta.mbarriers.get(local)
    if bar is None:
        raise EmulationError(f"TMA completes on an uninitialised mbarrier at 0x{local:x} of CTA {cta.rank}",
                             where=w.where())
    return bar


_STORE_OBSERVE = ("Issue cp.async.bulk.commit_group and cp.async.bulk.wait_group.read 0 in the issuing thread "
                  "(then a barrier)")


def _store(ins: Instruction, prog: Program) -> Callable:
    ops = ins.operands
    rd_map, rd_coords = _coords_reader(ops[0], prog, ins)
    rd_src = address_reader(ops[1], prog, ins)
    if ins.opcode.startswith("cp.reduce"):
        raise UnsupportedInstructionError("cp.reduce.async.bulk.tensor (TMA reduce) is not emulated",
                                          line=ins.line, text=ins.text)
    line, text = ins.line, ins.text
    reader = "the TMA store"

    def store(w):
        map_all, src_all = lanes32(rd_map(w)), rd_src(w)
        coords_all = [lanes32(np.asarray(c(w))) for c in rd_coords]
        smem = w.cta.smem
        for lane in active_index(w):
            tmap = tensormap_at(w, map_all[lane])
            coords = [int(c[lane]) for c in coords_all][::-1]
            eb = tmap.elem_bytes
            cells = smem.offsets(tmap.smem_addresses(int(src_all[lane])), eb)[:, None] + np.arange(eb)  # data only
            engine_of(w).check_async_read(smem, cells, reader)
            data = smem.data[cells]

            def finish(tmap=tmap, coords=coords, data=data):
                gaddr, ok = tmap.offsets(coords)
                if ok.any():
                    w.launch.gmem.write(gaddr[ok].astype(np.uint64), data[ok])
            op = AsyncOp(kind="TMA store", line=line, text=text, issuer=(w.cta.rank, w.wid), finish=finish,
                         reads=[(smem, int(cells.min()), int(cells.max()) + 1)], observe=_STORE_OBSERVE)
            w.bulk_open.append(engine_of(w).issue(w, op))
    return store


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
        n_all = lanes32(np.asarray(rd_n(w)))
        engine = engine_of(w)
        for lane in active_index(w):
            n = int(n_all[lane])
            if to_global:
                smem = w.cta.smem
                off = smem.offsets(np.array([int(src_all[lane])]), n)[0] + np.arange(n)
                engine.check_async_read(smem, off, "cp.async.bulk")
                data, gaddr = smem.data[off][None, :], np.array([int(dst_all[lane])], dtype=np.uint64)
                op = AsyncOp(kind="bulk copy to global", line=line, text=text, issuer=(w.cta.rank, w.wid),
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
            op = AsyncOp(kind="bulk copy", line=line, text=text, issuer=(w.cta.rank, w.wid), finish=finish,
                         writes=[(cta.smem, slice(lo, lo + n))],
                         tx=[(_mbarrier_at(w, w.cta.cluster.ctas[brank], bar, line), n)],
                         observe=f"Wait on its mbarrier (shared 0x{bar:x}, mbarrier.try_wait.parity)")
            engine.issue(w, op)
    return bulk


def _bulk_commit(w):
    w.bulk_groups.append(w.bulk_open)
    w.bulk_open = []


def _bulk_wait(ins: Instruction) -> Callable:
    n = int(ins.operands[0].value) if ins.operands else 0  # type: ignore[arg-type]

    def wait(w):
        while len(w.bulk_groups) > n:
            engine_of(w).complete_group(w.bulk_groups.pop(0))
    return wait


def compile_instruction(ins: Instruction, prog: Program) -> Optional[Callable]:
    op = ins.opcode
    if op in ("cp.async.bulk.tensor", "cp.reduce.async.bulk.tensor"):
        mods = ins.modifiers
        if "global" in mods and mods.index("global") == next(i for i, m in enumerate(mods) if m in
                                                             ("global", "shared::cluster", "shared::cta")):
            return _store(ins, prog)
        return _load(ins, prog)
    if op == "cp.async.bulk.commit_group":
        return _bulk_commit
    if op == "cp.async.bulk.wait_group":
        return _bulk_wait(ins)
    if op == "cp.async.bulk":
        return _bulk_copy(ins, prog)
    return None
