"""First-pass values: what a register holds the first time an instruction runs (every loop on the way entered
for the first time), and the waits that cannot block because of it (a thread's first wait on a barrier with
parity 1 returns at once: the phase before the first counts as complete). Shared by the cross-warp rules, P11
and the per-iteration loop model."""
from __future__ import annotations

from typing import Optional

from bwtriton.ptx.cfg import back_edges
from bwtriton.ptx.ir import Instruction, Operand

from .context import Ctx

_FIRST_PASS_DEPTH = 24


def first_pass_value(ctx: Ctx, ins: Instruction, op: Operand, depth: int = 0) -> Optional[int]:
    """The value of operand `op` the first time `ins` executes, when every loop on the way is entered for the
    first time (back edges ignored: the forward edges form a DAG) and the def chain is constant arithmetic;
    None when not determined (paths disagree, a load, a guarded def...)."""
    if op.kind == "imm" and isinstance(op.value, int):
        return op.value
    if op.kind != "reg" or depth > _FIRST_PASS_DEPTH:
        return None
    block = ctx.func.blocks[ins.block]
    return _value_before(ctx, block.id, block.instructions.index(ins), op.name, depth)


def _value_before(ctx: Ctx, block_id: int, limit: int, reg: str, depth: int) -> Optional[int]:
    memo = ctx.edge_facts
    key = ("first-pass", block_id, limit, reg)
    if key in memo:
        return memo[key]
    memo[key] = None   # a re-entry (should not happen on forward edges) stays undetermined
    block = ctx.func.blocks[block_id]
    d = next((i for i in reversed(block.instructions[:limit]) if reg in i.defs), None)
    if d is not None:
        val = None if d.guard is not None else _eval_first(ctx, d, depth + 1)
    else:
        back = getattr(ctx, "_back_edges", None)
        if back is None:
            back = back_edges(ctx.func)
            ctx._back_edges = back  # type: ignore[attr-defined]
        preds = [p for p in block.preds if (p, block_id) not in back]
        vals = {_value_before(ctx, p, len(ctx.func.blocks[p].instructions), reg, depth + 1) for p in preds}
        val = vals.pop() if len(vals) == 1 else None
    memo[key] = val
    return val


def _eval_first(ctx: Ctx, d: Instruction, depth: int) -> Optional[int]:
    ops = d.operands[1:]
    vals = [first_pass_value(ctx, d, o, depth) for o in ops]
    op = d.opcode
    if op == "setp" and len(vals) == 2 and None not in vals:
        rel = next((m for m in d.modifiers if m in ("eq", "ne", "lt", "le", "gt", "ge")), None)
        a, b = vals
        return {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}.get(rel)
    if op == "selp" and len(vals) == 3 and vals[2] is not None:
        return vals[0] if vals[2] else vals[1]
    if None in vals:
        return None
    if op == "bfe" and len(vals) == 3 and d.types[:1] == ("u32",):
        return (vals[0] >> vals[1]) & ((1 << vals[2]) - 1)   # Gluon's phase bit (i // STAGES) & 1
    if op == "mov" and len(vals) == 1:
        return vals[0]
    if op == "not" and len(vals) == 1:
        return int(not vals[0]) if d.types == ("pred",) else ~vals[0]
    fns = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "xor": lambda a, b: a ^ b,
           "and": lambda a, b: a & b, "or": lambda a, b: a | b, "shl": lambda a, b: a << b,
           "shr": lambda a, b: a >> b, "mul": lambda a, b: a * b}
    if op in fns and len(vals) == 2:
        return fns[op](*vals) & 0xFFFFFFFF
    return None


def passes_at_once(ctx: Ctx, wait: Instruction, waited_before: bool) -> bool:
    """A wait that cannot block: this thread's first wait on the barrier, with parity 1 on its first pass."""
    if waited_before or not wait.has("parity") or len(wait.operands) < 3:
        return False
    return first_pass_value(ctx, wait, wait.operands[2]) == 1


__all__ = ["first_pass_value", "passes_at_once"]
