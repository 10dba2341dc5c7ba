"""Cluster Launch Control: `clusterlaunchcontrol.try_cancel` / `query_cancel` and the 128-bit response register
(`mov.b128`). A cancel steals from the lazy grid scheduler (machine/grid.py); the response is delivered to shared
memory as an asynchronous operation completing an mbarrier.

Response encoding (opaque in PTX; what ptxas-blackwell's decode of `query_cancel` reads, measured by
disassembling it: `LDS.128 R4..R7`, canceled = ``R6 & 1``, ``get_first_ctaid::x = R4``, ``::y = R5 & 0xffff``,
``::z = R5 >> 16``): 32-bit word 0 = first CTA id x, word 1 = y | z << 16, word 2 bit 0 = canceled, word 3 = 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ...ptx.ir import Instruction
from ..errors import EmulationError, UnsupportedInstructionError
from ..machine.async_engine import AsyncOp, engine_of, issuer_of
from ..machine.memory import split_cluster_address
from ..machine.program import address_reader
from ..machine.state import FamilyState
from .tma import mbarrier_at


@dataclass
class ClcCTAState:
    #: a query_cancel of this CTA saw a failed cancel (a later try_cancel is undefined behaviour)
    clc_saw_failure: bool = False


STATE = FamilyState("clc", cta=ClcCTAState)

RESPONSE_BYTES = 16
_U32 = np.uint32


def _response(victim: Optional[tuple], nctas: int) -> np.ndarray:
    words = np.zeros(4, dtype=_U32)
    if victim is not None:
        x, y, z = victim
        words[0], words[1], words[2] = x * nctas, (y & 0xFFFF) | ((z & 0xFFFF) << 16), 1
    return words.view(np.uint8)


def _try_cancel(ins: Instruction, prog) -> Callable:
    if "mbarrier::complete_tx::bytes" not in ins.modifiers or len(ins.operands) != 2:
        raise UnsupportedInstructionError("clusterlaunchcontrol.try_cancel needs the "
                                          ".mbarrier::complete_tx::bytes form with [addr], [mbar]", line=ins.line)
    multicast = "multicast::cluster::all" in ins.modifiers
    rd_addr = address_reader(ins.operands[0], prog, ins)
    rd_bar = address_reader(ins.operands[1], prog, ins)
    line, text = ins.line, ins.text

    def try_cancel(w):
        sched = w.launch.grid_schedule
        if sched is None:
            raise EmulationError("clusterlaunchcontrol.try_cancel needs the lazy grid scheduler "
                                 "(bwtriton.emu.machine.grid.run_grid); this launch path has none", where=w.where())
        if w.cta.clc_saw_failure:
            raise EmulationError("clusterlaunchcontrol.try_cancel after this CTA observed a failed one (query_cancel"
                                 ".is_canceled false): undefined behaviour in PTX; end the persistent loop when a "
                                 "cancel fails", where=w.where())
        cluster = w.cta.cluster
        addrs, bars = np.broadcast_to(rd_addr(w), (32,)), np.broadcast_to(rd_bar(w), (32,))
        lanes = np.flatnonzero(w.mask if w.mask is not None else w.live)
        for lane in lanes:  # every active thread issues its own request (the verifier flags more than one)
            _, addr = split_cluster_address(int(addrs[lane]), w.cta.rank)
            _, bar = split_cluster_address(int(bars[lane]), w.cta.rank)
            if addr % 16:
                raise EmulationError(f"try_cancel response address 0x{addr:x} is not 16-byte aligned",
                                     where=w.where())
            victim = sched.cancel(cluster.cluster_id)
            data = _response(victim, len(cluster.ctas))
            targets = cluster.ctas if multicast else [w.cta]

            saddr = np.array([addr], dtype=np.uint64)

            def deliver(targets=targets, saddr=saddr, data=data):
                for cta in targets:
                    cta.smem.write(saddr, data[None, :])
            cells = [(cta.smem, slice(int(o), int(o) + RESPONSE_BYTES))
                     for cta in targets for o in cta.smem.offsets(saddr, RESPONSE_BYTES)]
            op = AsyncOp(kind="clusterlaunchcontrol.try_cancel", line=line, text=text, issuer=issuer_of(w),
                         finish=deliver, writes=cells,
                         tx=[(mbarrier_at(w, cta, bar, line), RESPONSE_BYTES) for cta in targets],
                         observe=f"Wait on its mbarrier (shared 0x{bar:x}, mbarrier.try_wait.parity)")
            for smem, idx in cells:  # poison: the response is undefined until its mbarrier wait
                smem.data[idx] = 0xFF
            engine_of(w).issue(w, op)
    return try_cancel


def _mov_b128(ins: Instruction, prog) -> Callable:
    dst, src = ins.operands
    d = prog.slot(dst.name, ins)
    if src.kind == "vec" and len(src.items) == 2:
        lo, hi = (prog.src(it, np.dtype(np.uint64), ins) for it in src.items)

        def pack(w):
            v = np.stack([np.broadcast_to(lo(w), (32,)), np.broadcast_to(hi(w), (32,))], axis=1)
            w.R[d] = v if w.mask is None else np.where(w.mask[:, None], v, w.R[d])
        return pack
    if src.kind == "reg":
        s = prog.slot(src.name, ins)

        def copy(w):
            w.R[d] = w.R[s].copy() if w.mask is None else np.where(w.mask[:, None], w.R[s], w.R[d])
        return copy
    raise UnsupportedInstructionError("mov.b128 from something other than {lo64, hi64} or a .b128 register",
                                      line=ins.line, text=ins.text)


def _query_cancel(ins: Instruction, prog) -> Callable:
    what = ins.modifiers[0] if ins.modifiers else ""
    dst, src = ins.operands
    if src.kind != "reg":
        raise UnsupportedInstructionError("query_cancel needs a .b128 register response", line=ins.line)
    s = prog.slot(src.name, ins)
    words = {"get_first_ctaid::x": lambda lo, hi: lo & 0xFFFFFFFF,
             "get_first_ctaid::y": lambda lo, hi: (lo >> 32) & 0xFFFF,
             "get_first_ctaid::z": lambda lo, hi: (lo >> 48) & 0xFFFF,
             "is_canceled": lambda lo, hi: hi & 1}
    if what not in words:
        raise UnsupportedInstructionError(f"clusterlaunchcontrol.query_cancel.{what} is not emulated "
                                          "(is_canceled, get_first_ctaid::x/y/z are)", line=ins.line)
    decode = words[what]
    out = prog.dst(dst, ins)

    def query(w):
        r = w.R[s]
        if r.ndim != 2:
            raise EmulationError(f"{src.name} holds no try_cancel response (not written as .b128)", where=w.where())
        v = decode(r[:, 0], r[:, 1])
        if what == "is_canceled":
            act = w.mask if w.mask is not None else w.live
            if (act & (v == 0)).any():
                w.cta.clc_saw_failure = True  # a later try_cancel of this CTA is undefined behaviour
            out(w, v != 0)
        else:
            out(w, v.astype(_U32))
    return query


#: opcode -> instruction compiler (rows of the ISA table, isa/table.py)
HANDLERS: dict[str, Callable] = {
    "clusterlaunchcontrol.try_cancel": _try_cancel,
    "clusterlaunchcontrol.query_cancel": _query_cancel,
}
#: (opcode, type) -> compiler, for the forms of another family's opcode that CLC owns: 128-bit registers exist
#: only for CLC responses
TYPED_HANDLERS: dict[tuple[str, str], Callable] = {("mov", "b128"): _mov_b128}
