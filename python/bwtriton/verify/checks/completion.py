"""Which completion mechanism tracks each asynchronous operation, and when an operation is known complete.

Each asynchronous operation is complete for the issuing thread only through its own mechanism (PTX ISA; the
table with section anchors is in docs/verifier.md, "Completion mechanisms"):

* tcgen05.mma / tcgen05.cp / tcgen05.shift: a later `tcgen05.commit` makes an mbarrier track all of the thread's
  prior asynchronous tcgen05 operations; a wait on that mbarrier's phase completes them.
* cp.async.bulk{.tensor} with `.mbarrier::complete_tx::bytes`: the copy's bytes complete the transaction count
  of its mbarrier; a wait on that mbarrier completes it (a bulk `wait_group` does not).
* cp.async.bulk{.tensor} with `.bulk_group`: `cp.async.bulk.commit_group` closes a group,
  `cp.async.bulk.wait_group N` completes all but the N most recent groups; with `.read` only the reads of the
  source are complete, so a shared-memory *destination* is still being written.
* cp.async (non-bulk): `cp.async.commit_group` / `cp.async.wait_group N` / `cp.async.wait_all`, or
  `cp.async.mbarrier.arrive` followed by a wait on that mbarrier.

`Pending` items are what `async_copy` keeps in its dataflow state; `after` moves them through one instruction.
"""
from __future__ import annotations

from enum import Enum
from typing import Callable, Optional

from bwtriton.ptx.ir import Instruction

#: group counts saturate here: `wait_group N` takes N < 8 in practice, and the lattice must stay finite
_MAX_GROUPS = 8
WAITS = ("mbarrier.try_wait", "mbarrier.test_wait", "mbarrier.wait")


class Mechanism(str, Enum):
    COMMIT = "tcgen05.commit -> mbarrier wait"
    TX_BYTES = "mbarrier complete_tx -> mbarrier wait"
    BULK_GROUP = "cp.async.bulk.commit_group -> cp.async.bulk.wait_group (not .read)"
    ASYNC_GROUP = "cp.async.commit_group -> cp.async.wait_group / wait_all"
    ASYNC_ARRIVE = "cp.async.mbarrier.arrive -> mbarrier wait"


def mechanism(ins: Instruction) -> Optional[Mechanism]:
    """The mechanism that tracks the asynchronous operation `ins`; None when `ins` is not one."""
    op = ins.opcode
    if op in ("tcgen05.mma", "tcgen05.cp", "tcgen05.shift"):
        return Mechanism.COMMIT
    if op in ("cp.async.bulk", "cp.async.bulk.tensor", "cp.reduce.async.bulk", "cp.reduce.async.bulk.tensor"):
        if any(m.startswith("mbarrier::complete_tx") for m in ins.modifiers):
            return Mechanism.TX_BYTES
        if ins.has("bulk_group"):
            return Mechanism.BULK_GROUP
        return None
    if op == "cp.async":
        return Mechanism.ASYNC_GROUP
    return None


def writes_shared(ins: Instruction) -> bool:
    """An asynchronous copy whose destination (operand 0) is shared memory: TMA / bulk loads and cp.async."""
    if mechanism(ins) in (None, Mechanism.COMMIT) or not ins.operands or ins.operands[0].kind != "addr":
        return False
    mods = ins.modifiers
    dst = next((i for i, m in enumerate(mods) if m.startswith("shared")), None)
    src = next((i for i, m in enumerate(mods) if m == "global"), None)
    return dst is not None and src is not None and dst < src


# A pending copy: ("w", index, mechanism, groups closed since issue | arrive index | -1).
Pending = tuple


def issue(ins: Instruction) -> Pending:
    """The pending item a shared-memory-writing copy starts."""
    return ("w", ins.index, mechanism(ins), 0 if mechanism(ins) in (Mechanism.BULK_GROUP, Mechanism.ASYNC_GROUP)
            else -1)


def after(state: frozenset, ins: Instruction, covers: Callable[[Instruction, int], bool]) -> frozenset:
    """Pending copies after `ins`: group commits count, group waits and mbarrier waits complete what their
    mechanism tracks. `covers(wait, index)` says whether `wait` may be on the barrier instruction `index`
    arrives on (the copy's own mbarrier, or a cp.async.mbarrier.arrive)."""
    op = ins.opcode
    if not state:
        return state
    if op in ("cp.async.commit_group", "cp.async.bulk.commit_group"):
        mech = Mechanism.ASYNC_GROUP if op == "cp.async.commit_group" else Mechanism.BULK_GROUP
        return frozenset(("w", x[1], x[2], min(x[3] + 1, _MAX_GROUPS)) if x[0] == "w" and x[2] == mech else x
                         for x in state)
    if op in ("cp.async.wait_group", "cp.async.bulk.wait_group", "cp.async.wait_all"):
        if op == "cp.async.bulk.wait_group" and ins.has("read"):
            return state   # only the source reads are complete; a shared-memory destination is still written
        mech = Mechanism.BULK_GROUP if op == "cp.async.bulk.wait_group" else Mechanism.ASYNC_GROUP
        if op == "cp.async.wait_all":
            keep = -1      # commit_group + wait_group 0: every issued cp.async completes
        else:
            n = ins.operands[0].value if ins.operands and ins.operands[0].kind == "imm" else None
            if not isinstance(n, int):
                return state
            keep = n
        return frozenset(x for x in state if not (x[0] == "w" and x[2] == mech and
                                                 (x[3] > keep if keep >= 0 else True)))
    if op == "cp.async.mbarrier.arrive":
        # the arrive fires when all of the thread's prior cp.async complete
        return frozenset(("w", x[1], Mechanism.ASYNC_ARRIVE, ins.index)
                         if x[0] == "w" and x[2] == Mechanism.ASYNC_GROUP else x for x in state)
    if op in WAITS:
        return frozenset(x for x in state if not (
            x[0] == "w" and (x[2] == Mechanism.TX_BYTES and covers(ins, x[1]) or
                             x[2] == Mechanism.ASYNC_ARRIVE and covers(ins, x[3]))))
    return state
