"""Instruction semantics: one module per family (alu, sync, memops, mma_sync, tma, tensormap, tcgen05, clc; with
operands.py and numerics.py, the tcgen05 operand and number-format decoders), and the opcode -> handler table
(table.py) that the machine dispatches through, with the machine classes built from the state the families
declare."""
from __future__ import annotations

from .table import MACHINE, OPCODES, dispatch, handler_of

__all__ = ["MACHINE", "OPCODES", "dispatch", "handler_of"]
