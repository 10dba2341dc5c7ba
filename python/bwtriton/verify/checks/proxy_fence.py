"""P15: generic-proxy shared-memory writes need `fence.proxy.async` before the async proxy (tcgen05.mma /
tcgen05.cp) reads the same bytes."""
from __future__ import annotations

from typing import Optional

from bwtriton.ptx.cfg import back_edges
from bwtriton.ptx.ir import Instruction
from bwtriton.ptx.values import AbsVal

from .context import Ctx
from .dataflow import run_dataflow, union_states
from .mma_operands import smem_reads as _smem_reads
from .sync import _is_generic_smem_write


def check_proxy_fence(ctx: Ctx) -> None:
    """P15: generic-proxy shared-memory writes need fence.proxy.async before tcgen05.mma/cp read smem."""
    readers = ("tcgen05.mma", "tcgen05.cp")
    if not any(i.opcode in readers for i in ctx.func.instructions):
        return
    backs = back_edges(ctx.func)

    reads_cache: dict[int, Optional[list[AbsVal]]] = {}

    def overlaps(write: Instruction, reader: Instruction) -> Optional[bool]:
        """True/False when decidable: does the generic write hit what the reader reads?"""
        if reader.index not in reads_cache:
            reads_cache[reader.index] = _smem_reads(ctx, reader)
        reads = reads_cache[reader.index]
        w = ctx.resolver.address(write.operands[0]) if write.operands else None
        if reads is None or w is None or w.base is None:
            return None
        verdict: Optional[bool] = False
        for rv, exact, upper in reads:
            if rv.base != w.base:
                verdict = None
                continue
            if rv.lo <= w.lo and w.hi < rv.lo + exact:
                return True       # the write lands inside the operand tile
            if w.lo < rv.hi + upper and rv.lo < w.hi + 16:
                verdict = None    # cannot rule the overlap out
        return verdict

    writes = {i.line: i for i in ctx.func.instructions if _is_generic_smem_write(i)}

    def step(st, ins, emit):
        if _is_generic_smem_write(ins):
            if not any(t == "fwd" and ln == ins.line for t, ln in st):
                return st | {("fwd", ins.line)}
            return st
        if ins.opcode == "fence.proxy.async" and not ins.has("global"):
            return frozenset()
        if ins.opcode in readers and st and emit:
            verdict = {ln: overlaps(writes[ln], ins) for _, ln in st}
            sure = sorted(ln for t, ln in st if t == "fwd" and verdict[ln])
            maybe_fwd = sorted(ln for t, ln in st if t == "fwd" and verdict[ln] is None)
            maybe_loop = sorted(ln for t, ln in st if t == "loop" and verdict[ln] is not False)
            if sure:
                ctx.add("missing-proxy-fence", "P15", "error", ins,
                        f"{ins.opcode} reads shared memory through the async proxy that a generic-proxy store "
                        f"(line {sure[0]}) wrote with no fence.proxy.async in between; insert "
                        "fence.proxy.async.shared::cta after the writes (before the barrier)", related=sure[0])
            elif maybe_fwd:
                ctx.add("missing-proxy-fence", "P15", "warning", ins,
                        f"a generic-proxy shared-memory write (line {maybe_fwd[0]}) reaches this {ins.opcode} "
                        "without fence.proxy.async, and its address could not be told apart from the MMA operands",
                        related=maybe_fwd[0])
            elif maybe_loop:
                # typical of persistent kernels: epilogue scratch reused by the next tile's pipeline buffers
                ctx.add("missing-proxy-fence", "P15", "note", ins,
                        f"a generic-proxy shared-memory write (line {maybe_loop[0]}) from an earlier loop iteration "
                        f"reaches this {ins.opcode} without fence.proxy.async (fine if the buffer is refilled "
                        "before the MMA reads it)", related=maybe_loop[0])
        return st

    def join(states):
        u = union_states(states)
        fwd = {ln for t, ln in u if t == "fwd"}
        return frozenset((t, ln) for t, ln in u if t == "fwd" or ln not in fwd)

    def edge(u, v, st):
        if (u, v) in backs and st:
            return frozenset(("loop", ln) for _, ln in st)
        return st

    run_dataflow(ctx, frozenset(), step, join, None, edge)
