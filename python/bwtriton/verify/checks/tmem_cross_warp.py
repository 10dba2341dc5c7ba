"""P9 across warps: a tcgen05.st of one warp over TMEM cells that another warp's tcgen05.ld reads, unordered.

`tcgen05.wait::ld` orders a warp's own load before its later TMEM writes (`sync.check_ld_wait`). It orders
nothing for other warps: with eight warps, warps w and w + 4 share a lane quarter (warp w may access lanes
32 * (w % 4) .. +31), so warp w + 4's store can reach cells warp w loads -- Triton 3.6/3.7 zero a reused
accumulator that way right after loading it (fla#1228). The store is ordered after the other warp's load only
when the loading warp completed the load (its tcgen05.wait::ld) and then synchronised with the storing warp: a
CTA barrier (bar.sync / barrier.sync, barrier.cluster.wait) or an mbarrier wait (a hand-off).

The replay follows one thread (every warp runs the same code): a tcgen05.ld is *exposed* from its issue until a
barrier that follows its wait::ld. At a tcgen05.st reached with exposed loads, z3 looks for two threads of
different warps of the CTA, both allowed by the path's value facts, such that the load's window of the first
(lanes x columns of its address, a function of %tid.x) meets the store's window of the second. Found on a path
known feasible: error; on an undecided path: warning. Addresses z3 cannot model, or that depend on a
loop-carried index, give no finding (the column-only rules and the emulator cover them)."""
from __future__ import annotations

from typing import Optional

from bwtriton.ptx.ir import Instruction
from bwtriton.ptx.smt import z3

from .context import LD_SHAPE_COLS, Ctx, exact_operand, ld_shape_num, threads_per_cta
from .dataflow import IMPRECISE, may_have_run, run_dataflow, union_states
from .lanes import _LaneNumbering, _modelled, _stage_leaves, _tmem_bases


def _orders(ins: Instruction) -> bool:
    """A synchronisation after which other warps' later instructions follow this warp's earlier ones."""
    if ins.opcode in ("mbarrier.try_wait", "mbarrier.test_wait", "mbarrier.wait"):
        return True
    return ins.opcode in ("bar", "barrier", "barrier.cluster") and not ins.has("arrive")


def _window(ctx: Ctx, ins: Instruction, num: _LaneNumbering, tid) -> Optional[tuple]:
    """(allocation, lane, lanes, [(first column, columns)...]) of thread `tid`'s window of tcgen05.ld/st `ins`
    as z3 terms; None when the address is not a modelled function of the thread and a TMEM base."""
    shape, count = ld_shape_num(ins)
    addr = next((o for o in ins.operands if o.kind == "addr"), None)
    if shape is None or count is None or addr is None or addr.base is None or addr.base.kind != "reg":
        return None
    key = num.key(addr.base, 32)
    tr = ctx.facts_oracle.translator
    if key is None or not _modelled(key) or _stage_leaves(key, tr):
        return None
    bases = _tmem_bases(key)
    if len(bases) != 1:
        return None
    taddr = z3.substitute(tr.term(key, 32), (tr.tid(), tid)) + (addr.offset or 0)
    lanes, per = LD_SHAPE_COLS[shape]
    width = per * count * (2 if ins.has("pack::16b") or ins.has("unpack::16b") else 1)
    col = taddr & 0xFFFF
    spans = [(col, width)]
    if shape == "16x32bx2":   # the second half: the same 16 lanes, immHalfSplitoff columns further
        off = exact_operand(ctx, ins, 2 if ins.opcode == "tcgen05.ld" else 1)
        if off is None:
            return None
        spans.append((col + off, width))
    return bases[0], z3.LShR(taddr, 16), lanes, spans


def _meet(a: tuple, b: tuple):
    """z3: windows `a` and `b` share a cell."""
    def inter(lo1, n1, lo2, n2):
        return z3.And(z3.ULT(lo1, lo2 + n2), z3.ULT(lo2, lo1 + n1))
    cols = [inter(c1, w1, c2, w2) for c1, w1 in a[3] for c2, w2 in b[3]]
    return z3.And(inter(a[1], a[2], b[1], b[2]), z3.Or(*cols))


def _path_constraints(ctx: Ctx, t1, t2) -> list:
    """The path's value facts, holding for both threads (each reaches the load and the store on this path)."""
    tr, out = ctx.facts_oracle.translator, []
    for key, val in ctx.current_facts:
        if isinstance(key, tuple) and key[:1] in (("eq",), ("ge",)):
            e = tr.fact(key, val)
            if e is not None:
                out += [z3.substitute(e, (tr.tid(), t1)), z3.substitute(e, (tr.tid(), t2))]
    return out


def _race(ctx: Ctx, ld: Instruction, st: Instruction) -> Optional[dict]:
    """A model {t1, t2, ...} of a thread t1 loading with `ld` and a thread t2 of another warp storing with `st`
    to a shared cell, on the current path's facts; None when z3 finds none or cannot model the addresses."""
    tr = ctx.facts_oracle.translator
    t1, t2 = z3.BitVec("xw_t1", 32), z3.BitVec("xw_t2", 32)
    num = _LaneNumbering(ctx)
    a, b = _window(ctx, ld, num, t1), _window(ctx, st, num, t2)
    if a is None or b is None or a[0] != b[0]:
        return None
    ntid = threads_per_cta(ctx.func)
    base = tr.term(a[0], 32)
    extra = [z3.ULT(t1, ntid), z3.ULT(t2, ntid), z3.LShR(t1, 5) != z3.LShR(t2, 5), z3.LShR(base, 16) == 0,
             z3.ULT(base & 0xFFFF, 512), _meet(a, b)] + _path_constraints(ctx, t1, t2)
    model = ctx.facts_oracle.solve([], extra)
    if model is None:
        return None
    model["lanes"] = _cells_of(model, a, b, t1, t2, extra + [base & 0xFFFF == 0])
    return model


def _cells_of(model: dict, a: tuple, b: tuple, t1, t2, extra: list) -> str:
    """'lanes L..L+n-1, columns C..' the two threads' windows share, from the model's thread ids (`extra` puts
    the allocation at column 0, so the columns read as offsets into it)."""
    s = z3.Solver()
    s.add(*extra, t1 == model["xw_t1"], t2 == model["xw_t2"])
    if s.check() != z3.sat:
        return ""
    m = s.model()

    def ev(x) -> int:
        return m.eval(x, model_completion=True).as_long()
    lo, hi = max(ev(a[1]), ev(b[1])), min(ev(a[1]) + a[2], ev(b[1]) + b[2]) - 1
    spans = []
    for c1, w1 in a[3]:
        for c2, w2 in b[3]:
            c_lo, c_hi = max(ev(c1), ev(c2)), min(ev(c1) + w1, ev(c2) + w2) - 1
            if c_lo <= c_hi:
                spans.append([c_lo, c_hi])
    merged: list = []
    for c_lo, c_hi in sorted(spans):
        if merged and c_lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], c_hi)
        else:
            merged.append([c_lo, c_hi])
    return f"lanes {lo}-{hi}, columns {', '.join(f'{a}-{b}' for a, b in merged)}"


def check_tmem_cross_warp(ctx: Ctx) -> None:
    """P9 across warps: a tcgen05.st that another warp's tcgen05.ld of the same cells does not precede through
    tcgen05.wait::ld and then a barrier (or mbarrier hand-off), on some feasible path."""
    if z3 is None or ctx.facts_oracle.translator is None:
        return
    if not ctx.func.find("tcgen05.ld") or not ctx.func.find("tcgen05.st"):
        return
    answers: dict = {}

    # state: frozenset of (index of an exposed tcgen05.ld, whether this thread's wait::ld followed it)
    def step(state, ins, emit):
        if ins.opcode == "tcgen05.ld":
            return frozenset(x for x in state if x[0] != ins.index) | {(ins.index, False)}
        if ins.opcode == "tcgen05.wait" and ins.has("ld"):
            return frozenset((i, True) for i, _ in state)
        if _orders(ins):
            return frozenset(x for x in state if not x[1])   # a barrier orders only completed loads
        if ins.opcode == "tcgen05.st" and state and emit:
            for ld_index in sorted({i for i, _ in state}):
                _report(ctx, ctx.func.instructions[ld_index], ins, answers)
        return state

    run_dataflow(ctx, frozenset(), step, union_states)


def _report(ctx: Ctx, ld: Instruction, st: Instruction, answers: dict) -> None:
    if not may_have_run(ctx, ld) or not may_have_run(ctx, st):
        return
    facts = frozenset(f for f in ctx.current_facts if isinstance(f[0], tuple) and f[0][:1] in (("eq",), ("ge",)))
    key = (ld.index, st.index, facts)
    if key not in answers:
        answers[key] = _race(ctx, ld, st)
    model = answers[key]
    if model is None:
        return
    undecided = IMPRECISE in ctx.current_facts or any(f[0][0] == "reg" for f in ctx.current_facts)
    w1, w2 = model["xw_t1"] // 32, model["xw_t2"] // 32
    ctx.add("ld-overwritten-cross-warp", "P9", "warning" if undecided else "error", st,
            f"tcgen05.st of warp {w2} writes {model['lanes']} that the tcgen05.ld at line {ld.line} of warp {w1} "
            f"reads, and nothing orders the two (warps {w1} and {w2} share lane quarter {w1 % 4}): after the load's "
            "tcgen05.wait::ld, synchronise the warps (bar.sync, or an mbarrier the storing warp waits on) before "
            "the store", related=ld.line)


__all__ = ["check_tmem_cross_warp"]
