"""The ISA table: the one map from opcode to the handler that compiles it (pydgin-style), and `dispatch`, the
only way the machine reaches instruction semantics (handed to `machine.program.Program`, so the machine imports
no family); and `MACHINE`, the machine's Warp / CTA / Cluster classes carrying the state the families declare.

Each family module owns its rows (`HANDLERS`: opcode -> `handler(ins, prog) -> closure`); the table is their
union, and an opcode claimed by two families is an error at import. Adding an instruction is one row in its
family. A handler returns None for a form of its opcode that is not emulated; `dispatch` then (or for an opcode
no family has) raises UnsupportedInstructionError naming the PTX line. A family that keeps state in a warp, CTA
or cluster declares it (`STATE`, a `machine.state.FamilyState`); the table builds the machine's classes from
those declarations.
"""
from __future__ import annotations

from typing import Callable, Optional

from ...ptx.ir import Instruction
from ..errors import UnsupportedInstructionError
from ..machine.program import Program
from ..machine.state import MachineClasses, machine_classes
from . import alu, clc, memops, mma_sync, sync, tcgen05, tensormap, tma, wgmma

#: handler(ins, prog) -> the instruction's closure, or None for a form that is not emulated
Handler = Callable[[Instruction, Program], Optional[Callable]]
FAMILIES = (alu, sync, memops, mma_sync, wgmma, tma, tensormap, tcgen05, clc)


def _table() -> dict[str, Handler]:
    table: dict[str, Handler] = {}
    for fam in FAMILIES:
        for op, handler in fam.HANDLERS.items():
            if op in table:
                raise RuntimeError(f"opcode {op} has two families: {table[op].__module__} and {fam.__name__}")
            table[op] = handler
    return table


#: opcode -> handler: every instruction the emulator knows
OPCODES: dict[str, Handler] = _table()
#: (opcode, type) -> handler, for the forms of an opcode that another family owns (CLC's 128-bit `mov`)
TYPED_FORMS: dict[tuple[str, str], Handler] = dict(clc.TYPED_HANDLERS)
#: the machine's state classes with every family's declared fields
MACHINE: MachineClasses = machine_classes([fam.STATE for fam in FAMILIES if hasattr(fam, "STATE")])


def handler_of(opcode: str, types: tuple = ()) -> Optional[Handler]:
    """The handler that compiles `opcode` (of operand `types`), or None."""
    for t in types:
        h = TYPED_FORMS.get((opcode, t))
        if h is not None:
            return h
    return OPCODES.get(opcode)


def dispatch(ins: Instruction, prog: Program) -> Callable:
    """The closure executing `ins` (see machine.program.Program); UnsupportedInstructionError when nothing
    emulates it."""
    handler = handler_of(ins.opcode, tuple(ins.types))
    f = handler(ins, prog) if handler is not None else None
    if f is None:
        raise UnsupportedInstructionError(f"the emulator has no semantics for `{ins.full_opcode}`", line=ins.line,
                                          text=ins.text)
    return f
