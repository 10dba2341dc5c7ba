"""P8 through warp-id arithmetic: the lane a warp's tcgen05.ld/st addresses must lie in that warp's quarter.

Triton computes the lane of a TMEM access as `((tid.x / 32) % 4) * 32 << 16` (through `shfl.sync.idx` of the
warp index); a kernel that drops the `% 4` (8 warps) or adds a wrong offset makes warps touch another quarter.
The address is translated to z3 with %tid.x as the only free thread variable and the TMEM base as a
lane-0 value; the check asks for a thread of the CTA (within `.reqntid`/`.maxntid`, on the path's branch facts)
whose accessed lanes [lane, lane + L) leave [32 * (warp % 4), +32). Found on an exactly known path: error;
on a path with undecided conditions: warning.
"""
from __future__ import annotations

from typing import Optional

from bwtriton.ptx.ir import Instruction, Operand
from bwtriton.ptx.smt import z3
from bwtriton.ptx.thread_values import ThreadValueNumbering

from bwtriton.tmem.region import TmemRegion

from .context import LD_SHAPE_COLS, Ctx, ld_shape_num
from .dataflow import IMPRECISE, run_dataflow
from .tmem_regions import ld_st_extent


class _LaneNumbering(ThreadValueNumbering):
    """Value keys in which the TMEM base read back from the alloc slot and %warpid are leaves the translator
    models (shfl.sync.idx of lane 0 is keyed by ValueNumbering itself, elect.sync by ThreadValueNumbering);
    anything else unknown gives None."""

    def __init__(self, ctx: Ctx) -> None:
        super().__init__(ctx.func)
        self.ctx = ctx

    def key(self, op: Operand, width=None, depth: int = 0):
        if op.kind == "sreg" and op.name == "%warpid":
            return ("warp.of.tid",)
        return super().key(op, width, depth)

    def _reg(self, name: str, depth: int):
        rng = getattr(self.ctx.resolver, "stages", {}).get(name)
        defs = self.func.definitions(name)
        if rng is None and len(defs) > 1 and not self._one_group(name, defs):
            rng = (0, 0xFFFFFFFF)   # a loop counter (Gluon's tile count t, buffer t % 2): any value
        if rng is not None:
            # a loop-carried accumulator-buffer / stage index: one leaf per register, bounded by its range
            return ("stage", name, rng[0], rng[1])
        return super()._reg(name, depth)

    def _expr(self, ins: Instruction, depth: int):
        if ins.opcode == "ld" and any(m.startswith("shared") for m in ins.modifiers) and len(ins.operands) == 2:
            v = self.ctx.resolver.operand(ins.operands[0], 32)
            if v is not None and v.base is not None and v.base.startswith("tmem@") and v.lo == v.hi:
                return ("tmem.base", v.base)
        return super()._expr(ins, depth)


def _uses_thread(key) -> bool:
    if not isinstance(key, tuple):
        return False
    if key in (("sreg", "%tid.x"), ("warp.of.tid",)):
        return True
    return any(_uses_thread(k) for k in key if isinstance(k, tuple))


def _modelled(key) -> bool:
    """Every leaf is a constant, %tid.x, the TMEM base or a parameter, and every op is one the translator models."""
    if not isinstance(key, tuple) or not key:
        return False
    kind = key[0]
    if kind in ("imm", "tmem.base", "warp.of.tid", "ld.param", "stage") or key == ("sreg", "%tid.x"):
        return True
    if kind == "shfl.lane0":
        return _modelled(key[1])
    if kind in ("add", "sub", "mul", "shl", "shr", "and", "or", "xor") and len(key) >= 5:
        return all(_modelled(k) for k in key[3:])
    if kind in ("neg", "not") and len(key) == 4:   # Triton's cp.async swizzle: -(tid & 1) & 576
        return _modelled(key[3])
    return False


def _stage_leaves(key, tr) -> list:
    """(lo, hi, z3 variable) of each loop-carried index leaf ("stage", reg, lo, hi) of `key`."""
    out = []
    if isinstance(key, tuple) and key[:1] == ("stage",):
        return [(key[2], key[3], tr.term(key, 32))]
    for k in key if isinstance(key, tuple) else ():
        if isinstance(k, tuple):
            out += [x for x in _stage_leaves(k, tr) if all(x[2] is not y[2] for y in out)]
    return out


def _lane_runs(mask: int) -> list[tuple[int, int]]:
    """[lo, hi) runs of consecutive set bits of a 128-bit lane mask."""
    runs, lane = [], 0
    while lane < 128:
        if mask >> lane & 1:
            end = lane
            while end < 128 and mask >> end & 1:
                end += 1
            runs.append((lane, end))
            lane = end
        else:
            lane += 1
    return runs


def ld_window_meets(ctx: Ctx, ins: Instruction, alloc: str, region: TmemRegion) -> Optional[bool]:
    """Whether the tcgen05.ld/st window of `ins`, an address computed from the thread index (e.g. the 8-warp
    epilogue's `base + ((w % 4) * 32 << 16) + (w / 4) * 64`), meets `region` of TMEM allocation `alloc` in lanes
    and columns: True when z3 finds no thread of the CTA whose window misses it, False when it finds none whose
    window meets it (an M=64 tile at the other lane offset), None when neither is proven or the address is
    not modelled."""
    if z3 is None or ctx.facts_oracle.translator is None:
        return None
    ext = ld_st_extent(ctx, ins)
    addr = next((o for o in ins.operands if o.kind == "addr"), None)
    if ext is None or addr is None or addr.base is None or addr.base.kind != "reg":
        return None
    key = _LaneNumbering(ctx).key(addr.base, 32)
    if key is None or not _uses_thread(key) or not _modelled(key) or _stage_leaves(key, ctx.facts_oracle.translator):
        return None
    bases = [k for k in _tmem_bases(key)]
    if bases != [("tmem.base", alloc)]:
        return None
    tr = ctx.facts_oracle.translator
    lanes, width = ext
    ntid = (ctx.func.directives.get("reqntid") or ctx.func.directives.get("maxntid") or (1024,))[0]
    b = tr.term(bases[0], 32)
    rel = tr.term(key, 32) + (addr.offset or 0) - b
    col, lane = rel & 0xFFFF, z3.LShR(rel, 16) & 0xFFFF
    misses = z3.Or(z3.ULE(col + width, region.col_lo), z3.UGE(col, region.col_hi),
                   z3.And([z3.Or(z3.ULE(lane + lanes, lo), z3.UGE(lane, hi)) for lo, hi in _lane_runs(region.lanes)]))
    launch = [z3.ULT(tr.tid(), ntid), z3.LShR(b, 16) == 0, z3.ULT(b & 0xFFFF, 512), z3.ULT(col, 512),
              z3.ULT(lane, 128)]
    if ctx.facts_oracle.unsat(launch + [misses]):
        return True
    if ctx.facts_oracle.unsat(launch + [z3.Not(misses)]):
        return False
    return None


#: the leaves P8 quantifies over besides the thread: loop-carried indices and the TMEM base
_QUANTIFIED = ("stage", "tmem.base")


def _mentions(key, kinds: tuple) -> bool:
    """Whether a value key holds a leaf of one of `kinds` (e.g. `_QUANTIFIED`)."""
    if not isinstance(key, tuple) or not key:
        return False
    if key[0] in kinds:
        return True
    return any(_mentions(k, kinds) for k in key if isinstance(k, tuple))


def _tmem_bases(key) -> list:
    if not isinstance(key, tuple):
        return []
    if key[:1] == ("tmem.base",):
        return [key]
    out = []
    for k in key:
        for x in _tmem_bases(k):
            if x not in out:
                out.append(x)
    return out


def check_lane_quarter_by_warp(ctx: Ctx) -> None:
    """P8: a tcgen05.ld/st lane computed from the thread index stays in the issuing warp's lane quarter."""
    if z3 is None or ctx.facts_oracle.translator is None:
        return
    num = _LaneNumbering(ctx)
    todo: dict[int, tuple] = {}
    for ins in ctx.func.instructions:
        if ins.opcode not in ("tcgen05.ld", "tcgen05.st"):
            continue
        shape, _ = ld_shape_num(ins)
        addr = next((o for o in ins.operands if o.kind == "addr"), None)
        if shape is None or addr is None or addr.base is None or addr.base.kind != "reg":
            continue
        key = num.key(addr.base, 32)
        if key is not None and _uses_thread(key) and _modelled(key):
            todo[ins.index] = (key, addr.offset, LD_SHAPE_COLS[shape][0])
    if not todo:
        return
    tr = ctx.facts_oracle.translator
    ntid = (ctx.func.directives.get("reqntid") or ctx.func.directives.get("maxntid") or (1024,))[0]

    def constraints(ins: Instruction, inside: bool = False) -> list:
        """A thread of the CTA whose window leaves its quarter (`inside`: stays in it)."""
        key, offset, lanes = todo[ins.index]
        t = tr.tid()
        taddr = tr.term(key, 32) + offset
        lane = z3.LShR(taddr, 16)
        q = (z3.LShR(t, 5) & 3) * 32
        within = z3.And(z3.ULE(q, lane), z3.ULE(lane + lanes, q + 32))
        extra = [z3.ULT(t, ntid), within if inside else z3.Not(within)]
        for name in tr.names:
            if name[0].startswith("('tmem.base'"):
                b = tr.names[name]
                extra += [z3.LShR(b, 16) == 0, z3.ULT(b & 0xFFFF, 512)]
        for lo, hi, v in _stage_leaves(key, tr):
            extra += [z3.UGE(v, lo), z3.ULE(v, hi)]
        return extra

    never: dict[tuple, bool] = {}      # lane expression -> no thread leaves its quarter under any facts
    answers: dict[tuple, Optional[dict]] = {}

    def violation(ins: Instruction, facts) -> Optional[dict]:
        """A model (thread, values) in which the lane leaves the quarter on this path's facts, or None."""
        what = todo[ins.index]
        if what not in never:
            never[what] = ctx.facts_oracle.unsat(constraints(ins))   # one query per lane expression
        if never[what]:
            return None   # facts only add constraints: unsat without them is unsat with them
        value_facts = frozenset(f for f in facts if isinstance(f[0], tuple) and f[0][:1] in (("eq",), ("ge",)))
        if (what, value_facts) not in answers:
            answers[(what, value_facts)] = ctx.facts_oracle.solve(facts, constraints(ins))
        return answers[(what, value_facts)]

    leave_memo: dict = {}
    inside_at_low: dict[tuple, bool] = {}

    def stays_for_some_index(ins: Instruction, facts) -> bool:
        """Whether every thread stays in its quarter with each loop-carried index at its lowest value, on facts
        that do not mention those indices or the TMEM base. Then the per-thread query below finds, for whichever
        thread a model names, an index value that keeps it inside (the facts constrain other variables only,
        and the model satisfies them), so no claim follows; one facts-free query per lane expression."""
        what = todo[ins.index]
        leaves = _stage_leaves(what[0], tr)
        if not leaves or any(_mentions(f[0], _QUANTIFIED) for f in facts):
            return False
        if what not in inside_at_low:
            low = [v == lo for lo, _, v in leaves]
            inside_at_low[what] = ctx.facts_oracle.unsat(constraints(ins) + low)
        return inside_at_low[what]

    def all_leave(ins: Instruction, facts, tid) -> bool:
        """No thread (or: not thread `tid`) the value facts allow stays in its quarter; one z3 query per lane
        expression, value facts and thread (unsat_with reads only the value facts)."""
        value_facts = frozenset(f for f in facts if isinstance(f[0], tuple) and f[0][:1] in (("eq",), ("ge",)))
        if tid is not None and not _mentions(todo[ins.index][0], ("ld.param",)) and \
                not any(_mentions(f[0], _QUANTIFIED) for f in value_facts):
            # the lane depends on the thread only, which is fixed, and the facts on none of its other variables;
            # `tid` comes from a model of these facts, so they hold beside any lane values: drop them
            value_facts = frozenset()
        key = (todo[ins.index], value_facts, tid)
        if key not in leave_memo:
            extra = constraints(ins, inside=True) + ([] if tid is None else [tr.tid() == tid])
            leave_memo[key] = ctx.facts_oracle.unsat_with(value_facts, extra)
        return leave_memo[key]

    def step(payload, ins, emit):
        if emit and ins.index in todo:
            facts = ctx.current_facts
            if stays_for_some_index(ins, facts):
                return payload
            model = violation(ins, facts)
            if model is not None:
                tid = model.get(str(tr.tid()))
                if _stage_leaves(todo[ins.index][0], tr) and (tid is None or not all_leave(ins, facts, tid)):
                    return payload   # only some values of the loop-carried index leave the quarter: no claim
                undecided = IMPRECISE in facts or any(f[0][0] == "reg" for f in facts)
                if undecided and IMPRECISE not in facts and all_leave(ins, facts, None):
                    undecided = False   # every thread the value facts allow leaves its quarter: whichever runs
                who = f" (e.g. thread {tid}, warp {tid // 32})" if tid is not None else ""
                ctx.add("lane-quarter", "P8", "warning" if undecided else "error", ins,
                        f"{ins.opcode} lane computed from the thread index leaves the warp's lane quarter{who}: "
                        "warp w may only access lanes 32*(w%4) .. 32*(w%4)+31; compute the lane from "
                        "(warp_id % 4) * 32")
        return payload

    run_dataflow(ctx, frozenset([0]), step, lambda states: frozenset().union(*states))
