"""The ISA table: which instruction family gives an opcode its semantics (pydgin-style: one table from opcode to
implementation, so the core -- program.py -- imports no family, and adding an instruction is one row).

Each family module has `compile_instruction(ins, prog) -> closure | None`. `dispatch` looks the opcode up (exact
name first, then its family prefix such as "tcgen05." or "mbarrier.") and raises UnsupportedInstructionError,
with the PTX line, for anything the table does not know or the family refuses.

Optional families are imported on first use, so a family living in its own file can be added without touching
anything else: `clusterlaunchcontrol.*` goes to `bwtriton.emu.clc` (the CLC work's module) once it exists.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Callable

from ..ptx.ir import Instruction
from . import alu, memops, mma_sync, sync, tcgen05, tma
from .errors import UnsupportedInstructionError
from .program import Program

_ALU = ("mov add sub mul mad fma div rem min max neg abs and or xor not cnot shl shr selp setp set bfe bfi prmt "
        "popc clz brev rcp sqrt rsqrt ex2 lg2 sin cos tanh copysign testp mul24 mad24 sad bfind fns shf lop3 dp4a "
        "dp2a cvt cvta").split()
_SYNC = ("bra brx ret exit trap bar barrier barrier.cluster elect shfl vote redux activemask fence "
         "fence.proxy.async fence.proxy.tensormap fence.proxy.alias membar setmaxnreg bar.warp nanosleep pmevent").split()
_MEMOPS = ("ld ld.global.nc st atom red cp.async cp.async.commit_group cp.async.wait_group cp.async.wait_all "
           "ldmatrix stmatrix prefetch prefetchu cp.async.bulk.prefetch cp.async.bulk.prefetch.tensor discard "
           "applypriority createpolicy mapa getctarank").split()
_TMA = ("cp.async.bulk.tensor cp.reduce.async.bulk.tensor cp.async.bulk cp.async.bulk.commit_group "
        "cp.async.bulk.wait_group").split()

#: opcode -> family module (or the dotted name of an optional one)
OPCODES: dict[str, object] = {
    **{op: alu for op in _ALU}, **{op: sync for op in _SYNC}, **{op: memops for op in _MEMOPS},
    **{op: tma for op in _TMA}, "mma": mma_sync,
}
#: opcode prefix -> family (for families whose opcodes share a head)
PREFIXES: dict[str, object] = {
    "tcgen05.": tcgen05,
    "mbarrier.": sync,
    "griddepcontrol.": sync,
    "tensormap.": "bwtriton.emu.tensormap",
    "clusterlaunchcontrol.": "bwtriton.emu.clc",
}


def family_of(opcode: str):
    """The family module (or optional module name) that owns `opcode`, or None."""
    fam = OPCODES.get(opcode)
    if fam is not None:
        return fam
    for prefix, fam in PREFIXES.items():
        if opcode.startswith(prefix):
            return fam
    return None


def _load(fam, ins: Instruction) -> ModuleType:
    if isinstance(fam, ModuleType):
        return fam
    try:
        return importlib.import_module(fam)
    except ModuleNotFoundError as exc:
        if exc.name != fam:
            raise
        raise UnsupportedInstructionError(f"`{ins.full_opcode}` belongs to the family {fam}, which is not part of "
                                          "this emulator yet", line=ins.line, text=ins.text) from None


def dispatch(ins: Instruction, prog: Program) -> Callable:
    """The closure executing `ins` (see program.Program); UnsupportedInstructionError when nothing emulates it."""
    fam = family_of(ins.opcode)
    f = _load(fam, ins).compile_instruction(ins, prog) if fam is not None else None
    if f is None:
        raise UnsupportedInstructionError(f"the emulator has no semantics for `{ins.full_opcode}`", line=ins.line,
                                          text=ins.text)
    return f
