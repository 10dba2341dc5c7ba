"""The PTX front end of bwtriton: one parser for the verifier and the CPU emulator.

    from bwtriton.ptx import parse_ptx
    mod = parse_ptx(text)
    for fn in mod.entries:
        for ins in fn.instructions:       # Instruction: opcode, modifiers, types, operands, guard, line, targets
            ...
        fn.blocks                          # BasicBlock: instructions, succs, preds, terminal
        resolve_value(fn, ins, operand)    # def-chain constant/affine resolution (descriptors, TMEM addresses)

See `bwtriton.ptx.ir` for the data-model contract and `bwtriton.ptx.descriptors` for tcgen05 descriptors.
"""
from __future__ import annotations

from .cfg import back_edges, forward_dataflow, reachable_blocks
from .ir import BasicBlock, Directive, Function, Guard, Instruction, Label, Module, Operand, Param, RegDecl
from .parser import parse_ptx, parse_ptx_file

__all__ = ["parse_ptx", "parse_ptx_file", "Module", "Function", "Instruction", "Operand", "Guard", "Label",
           "Directive", "Param", "RegDecl", "BasicBlock", "forward_dataflow", "back_edges", "reachable_blocks"]
