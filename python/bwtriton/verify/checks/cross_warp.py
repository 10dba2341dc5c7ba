"""Producer/consumer order between the partitions of a warp-specialized kernel (P13), decided on mbarriers.

The path checks replay one thread. In a warp-specialized kernel the loader warp issues the TMAs, the MMA warp
the MMAs and commits, the epilogue warps the tcgen05.ld's: no single path holds both ends of a hand-off, so
"this MMA waits for that TMA" must be decided on what a thread can observe of the others, which is the phases
of shared mbarriers. Three hand-offs, each a token in a forward dataflow over the consumer's paths:

* TMA -> MMA (`mma-data-unwaited`): an MMA/tcgen05.cp reading smem that some TMA of the kernel writes runs only
  after a wait on a barrier such a TMA completes on; after the thread commits that group, a refillable stage is
  released and the next group needs a new wait ("issued after the commit that releases its stage").
* MMA -> epilogue (`acc-wait-missing`): a tcgen05.ld of columns that MMAs of another thread write (the ld is
  not reachable from them) runs only after a wait on a barrier a commit after those MMAs arrives on; a plain
  mbarrier.arrive of the reader (it hands the accumulator back) requires a new wait for the next tile.
* epilogue -> next tile's MMA (`acc-reuse-unwaited`): after the MMA thread hands an accumulator over (a commit
  on a barrier the reader waits on), the next MMA into those columns waits on a barrier the reader arrives on
  after its loads.

A wait counts only if it can block: the first wait of a thread on a barrier with parity 1 in its first pass
(`first_pass_value`: the value the def chain gives when every loop is entered for the first time) returns at
once, because the phase before the first is complete. That is how a flipped parity on the accumulator wait is
caught. Barriers are compared with `same_address` (a wait on a possibly-equal barrier counts, so undecided
addresses give no error); overlaps of smem/TMEM are "may" overlaps of the resolved ranges.
"""
from __future__ import annotations

from typing import Optional

from bwtriton.ptx.cfg import back_edges, reachable_blocks
from bwtriton.ptx.ir import Instruction, Operand
from bwtriton.tmem.region import ALL_LANES

from .async_copy import _WAITS, barrier_operand, is_tma_load, same_address
from .context import LD_SHAPE_COLS, Ctx, ld_shape_num
from .dataflow import may_have_run, run_dataflow, union_states
from .mbarrier_phase import loop_body, natural_loops
from .first_pass import passes_at_once
from .mma_operands import smem_reads
from .tmem_regions import tmem_region



def _reach(ctx: Ctx) -> dict[int, set[int]]:
    memo = getattr(ctx, "_reach_memo", None)
    if memo is None:
        memo = {}
        ctx._reach_memo = memo  # type: ignore[attr-defined]
    return memo


def reaches(ctx: Ctx, a: Instruction, b: Instruction) -> bool:
    """Whether `b` can run after `a` in the same thread (CFG reachability; same block: later or in a cycle)."""
    memo = _reach(ctx)
    if a.block not in memo:
        memo[a.block] = reachable_blocks(ctx.func, a.block)
        succ_reach = set()
        for s in ctx.func.blocks[a.block].succs:
            succ_reach |= reachable_blocks(ctx.func, s)
        memo[(a.block, "succ")] = succ_reach   # type: ignore[index]
    if a.block == b.block and b.index > a.index:
        return True
    return b.block in memo[(a.block, "succ")]   # type: ignore[index]


# ---------------------------------------------------------------------------------------------------------
def _tmem_cols(ctx: Ctx, op: Operand, width: Optional[int]) -> Optional[tuple[str, int, int]]:
    """(TMEM allocation, first column, last column) an access may touch; the whole allocation when unknown."""
    v = ctx.resolver.address(op) if op.kind == "addr" else ctx.resolver.operand(op)
    if v is None or v.base is None or not v.base.startswith("tmem@"):
        base = _tmem_base_of(ctx, op.base if op.kind == "addr" else op, 8)
        return None if base is None else (base, 0, 511)   # an offset from the base the resolver cannot bound
    lo, hi = v.lo & 0xFFFF, v.hi & 0xFFFF
    if v.lo != v.hi and (v.hi - v.lo) >> 16:
        lo, hi = 0, 511   # lanes and columns vary together: any column
    return v.base, lo, hi + (width or 512) - 1


def _tmem_base_of(ctx: Ctx, op: Optional[Operand], depth: int) -> Optional[str]:
    """The TMEM allocation a register is computed from (through add/or/mov/cvt), e.g. base + buffer * 128 with
    a loop-carried buffer index; None when no operand of the chain is a TMEM base."""
    if op is None or op.kind != "reg" or depth <= 0:
        return None
    v = ctx.resolver.operand(op)
    if v is not None and v.base is not None and v.base.startswith("tmem@"):
        return v.base
    defs = ctx.func.definitions(op.name)
    if len(defs) != 1 or defs[0].opcode not in ("add", "or", "mov", "cvt", "sub"):
        return None
    for src in defs[0].operands[1:]:
        found = _tmem_base_of(ctx, src, depth - 1)
        if found is not None:
            return found
    return None


def _with_lanes(ctx: Ctx, ins: Instruction, cols: Optional[tuple[str, int, int]]) -> Optional[tuple]:
    """(allocation, first column, last column, lane mask): the lanes from the exact region, else all lanes."""
    if cols is None:
        return None
    reg = tmem_region(ctx, ins)
    return (*cols, reg[1].lanes if reg is not None else ALL_LANES)


def tmem_extent(ctx: Ctx, ins: Instruction) -> Optional[tuple]:
    """(allocation, first column, last column, lane mask) that an MMA's D tile or a tcgen05.ld may touch."""
    if ins.opcode == "tcgen05.mma":
        return _with_lanes(ctx, ins, _tmem_cols(ctx, ins.operands[0], None))
    addr = next((o for o in ins.operands if o.kind == "addr"), None)
    return _with_lanes(ctx, ins, _tmem_cols(ctx, addr, _ld_cols(ins))) if addr is not None else None


def _cells(ctx: Ctx, ins: Instruction, what: str) -> str:
    """' (what lanes .., columns ..)' for a message, when the instruction's TMEM region is known."""
    reg = tmem_region(ctx, ins)
    return f" ({what} {reg[1]})" if reg is not None else ""


def _overlap(a, b) -> bool:
    """Same allocation, a shared column and a shared lane (two M=64 accumulators at lanes +0/+16 never meet)."""
    return a is not None and b is not None and a[0] == b[0] and a[1] <= b[2] and b[1] <= a[2] and bool(a[3] & b[3])


def _ld_cols(ins: Instruction) -> int:
    shape, num = ld_shape_num(ins)
    return LD_SHAPE_COLS.get(shape or "", (0, 1))[1] * (num or 1)


def check_cross_warp(ctx: Ctx) -> None:
    """P13: TMA -> MMA, MMA -> tcgen05.ld and tcgen05.ld -> next MMA hand-offs ordered by mbarrier waits."""
    ins_at = ctx.func.instructions
    mmas = [i for i in ins_at if i.opcode == "tcgen05.mma"]
    readers = [i for i in ins_at if i.opcode in ("tcgen05.mma", "tcgen05.cp")]
    tmas = [i for i in ins_at if is_tma_load(i)]
    lds = [i for i in ins_at if i.opcode == "tcgen05.ld"]
    commits = [i for i in ins_at if i.opcode == "tcgen05.commit"]
    waits = [i for i in ins_at if i.opcode in _WAITS]
    if not waits or not (readers and tmas or mmas and lds):
        return
    same: dict = {}

    def may_same(a: Instruction, b: Instruction) -> bool:
        key = (a.index, b.index)
        if key not in same:
            same[key] = same_address(ctx, barrier_operand(a), barrier_operand(b)) is not False
        return same[key]

    # TMA -> MMA families: the TMAs whose destination may lie in a reader's operand tile
    looped = set()
    for _, body in natural_loops(ctx.func):
        looped |= body
    data_fam: dict[int, frozenset] = {}
    for r in readers:
        reads = smem_reads(ctx, r)
        if not reads:
            # loop-carried stage descriptors: the operand may be any stage a TMA of the kernel fills
            if tmas:
                data_fam[r.index] = frozenset(t.index for t in tmas)
            continue
        fam = set()
        for t in tmas:
            dst = ctx.resolver.address(t.operands[0]) if t.operands and t.operands[0].kind == "addr" else None
            if dst is None or dst.base is None:
                continue
            if dst.base.startswith("?"):
                fam.add(t.index)   # a loop-carried stage offset the resolver cannot bound: any stage
                continue
            for rv, _, upper in reads:
                if rv.base == dst.base and dst.lo < rv.hi + upper and rv.lo <= dst.hi:
                    fam.add(t.index)
        if fam:
            data_fam[r.index] = frozenset(fam)
    refillable = {f for f in data_fam.values() if any(ins_at[t].block in looped for t in f)}

    # MMA -> ld: for each ld, the MMAs of other threads writing its columns and the commits after them
    d_cols = {m.index: tmem_extent(ctx, m) for m in mmas}
    acc_commits: dict[int, frozenset] = {}
    handover: set[int] = set()
    for ld in lds:
        cols = tmem_extent(ctx, ld)
        # another thread's MMAs: no path of one thread runs both (an ld before the MMA in program order is the
        # same thread reading the previous value)
        writers = [m for m in mmas if _overlap(cols, d_cols[m.index]) and not reaches(ctx, m, ld)
                   and not reaches(ctx, ld, m)]
        cs = frozenset(c.index for c in commits for m in writers if reaches(ctx, m, c))
        if writers and cs:
            acc_commits[ld.index] = cs
            # the commits that hand the accumulator over: on a barrier the reader waits on before the ld (the
            # stage commits of the K loop release shared memory, not the accumulator)
            ld_waits = [w for w in waits if reaches(ctx, w, ld) and not any(reaches(ctx, m, w) for m in writers)]
            handover |= {c for c in cs if any(may_same(ins_at[c], w) for w in ld_waits)}
    # epilogue -> MMA: the arrives following cross-thread loads of an MMA's columns
    arrives = [i for i in ins_at if i.opcode == "mbarrier.arrive" and not i.has("expect_tx")]
    release: dict[int, frozenset] = {}
    for m in mmas:
        rs = set()
        for ld in lds:
            if ld.index in acc_commits and any(reaches(ctx, m, ins_at[c]) for c in acc_commits[ld.index]) \
                    and not reaches(ctx, m, ld) and not reaches(ctx, ld, m):
                rs |= {a.index for a in arrives if reaches(ctx, ld, a)}
        if rs:
            release[m.index] = frozenset(rs)
    if not data_fam and not acc_commits and not release:
        return

    init = frozenset([("unready", f) for f in set(data_fam.values())] +
                     [("unsynced", ld) for ld in acc_commits])

    def step(st, ins, emit):
        op = ins.opcode
        if op in _WAITS:
            earlier = any(x[0] == "waited" and may_same(ins, ins_at[x[1]]) for x in st)
            blocking = not passes_at_once(ctx, ins, earlier)
            out = set(st)
            out.add(("waited", ins.index))
            if blocking:
                for x in st:
                    if x[0] in ("unready", "released") and any(may_same(ins, ins_at[t]) for t in x[1]):
                        out.discard(x)
                    elif x[0] == "unsynced" and any(may_same(ins, ins_at[c]) for c in acc_commits[x[1]]):
                        out.discard(x)
            for x in st:     # any wait (even one that passes at once) on a release barrier frees the columns
                if x[0] == "busy" and any(may_same(ins, ins_at[a]) for a in x[1]):
                    out.discard(x)
            return frozenset(out)
        if op in ("tcgen05.mma", "tcgen05.cp"):
            out = set(st)
            fam = data_fam.get(ins.index)
            if fam is not None:
                if emit and may_have_run(ctx, ins):
                    if ("released", fam) in st:
                        ctx.add("mma-data-unwaited", "P13", "error", ins,
                                f"this {op} is issued after the tcgen05.commit that releases its shared-memory "
                                "stage to the loader: the loader may refill the stage while it reads; issue every "
                                "MMA of the stage before that commit")
                    elif ("unready", fam) in st:
                        # a path that bypasses an existing blocking wait may be infeasible (a wait skipped
                        # under the same condition that skips the TMAs): the dataflow cannot tell, so warn
                        bypassed = any(reaches(ctx, w, ins) and not passes_at_once(ctx, w, False)
                                       and any(may_same(w, ins_at[t]) for t in fam) for w in waits)
                        ctx.add("mma-data-unwaited", "P13", "warning" if bypassed else "error", ins,
                                f"this {op} reads shared memory a TMA fills (line {ins_at[min(fam)].line}) with no "
                                "blocking wait on the mbarrier that TMA completes on since the stage was last "
                                "released: wait on the stage's ready barrier (with the phase's parity) first",
                                related=ins_at[min(fam)].line)
                out.add(("consumed", fam))
            rel = release.get(ins.index)
            if rel is not None:
                if emit and ("busy", rel) in st and may_have_run(ctx, ins):
                    a = ins_at[min(rel)]
                    ctx.add("acc-reuse-unwaited", "P13", "error", ins,
                            f"this MMA overwrites an accumulator another warp may still be reading: no wait on "
                            f"the barrier the reader arrives on after its tcgen05.ld (line {a.line}) since the "
                            f"accumulator was handed over; wait on the accumulator's empty barrier first"
                            f"{_cells(ctx, ins, 'the MMA writes')}", related=a.line)
                out.add(("issued", rel))
            return frozenset(out)
        if op == "tcgen05.commit":
            out = set(st)
            for x in st:
                if x[0] == "consumed":
                    out.discard(x)
                    if x[1] in refillable:
                        out |= {("released", x[1]), ("unready", x[1])}
                elif x[0] == "issued" and ins.index in handover:
                    out.discard(x)
                    out.add(("busy", x[1]))
            return frozenset(out)
        if op == "tcgen05.ld" and ("unsynced", ins.index) in st and emit and may_have_run(ctx, ins):
            c = ins_at[min(acc_commits[ins.index])]
            ctx.add("acc-wait-missing", "P13", "error", ins,
                    f"tcgen05.ld of an accumulator that another warp's MMAs write, with no blocking wait on the "
                    f"mbarrier their tcgen05.commit (line {c.line}) arrives on since the accumulator was last "
                    "handed back: wait on the accumulator's full barrier with the phase's parity first"
                    f"{_cells(ctx, ins, 'the load reads')}", related=c.line)
        if op == "mbarrier.arrive" and not ins.has("expect_tx") and any(
                x[0] == "waited" for x in st):
            return st | {("unsynced", ld) for ld in acc_commits if reaches(ctx, ins, ins_at[ld])}
        return st

    dispatch = _dispatch_back_edges(ctx)

    def edge(u, v, st):
        # a warp goes round Triton's brx dispatch loop once per partition: each round starts afresh
        return init if (u, v) in dispatch else st

    run_dataflow(ctx, init, step, union_states, edge=edge)


def _dispatch_back_edges(ctx: Ctx) -> frozenset:
    """Back edges of loops containing a `brx.idx` (Triton's warp-specialization dispatch loop)."""
    out = set()
    func = ctx.func
    for u, h in back_edges(func):
        body = loop_body(func, u, h)
        if any(i.opcode == "brx" for b in body for i in func.blocks[b].instructions):
            out.add((u, h))
    return frozenset(out)


def check_pair_operands_synced(ctx: Ctx) -> None:
    """P18 (pair hand-off): a cta_group::2 MMA reads the shared memory of both CTAs of the pair, so generic
    stores into shared memory (the peer's half of the operands) must be ordered before it across the cluster:
    a `barrier.cluster.wait` (after the stores' arrive) on every path from the stores to the MMA. An mbarrier
    wait is accepted as well (a cluster-scope barrier the peer arrives on carries the same order)."""
    from .sync import _is_generic_smem_write  # noqa: PLC0415 - sync imports this module's neighbours

    pair_mmas = [i for i in ctx.func.instructions if i.opcode == "tcgen05.mma" and i.modifier_value("cta_group") == "2"]
    if not pair_mmas:
        return

    def step(st, ins, emit):
        if _is_generic_smem_write(ins):
            return frozenset([ins.index])
        if ins.opcode == "barrier.cluster.wait" or ins.opcode == "barrier.cluster" and ins.has("wait") \
                or ins.opcode in _WAITS:
            return frozenset()
        if ins.opcode == "tcgen05.mma" and st and emit and ins.modifier_value("cta_group") == "2" \
                and may_have_run(ctx, ins):
            w = ctx.func.instructions[min(st)]
            ctx.add("cta-pair-unsynced", "P18", "error", ins,
                    f"this cta_group::2 MMA reads both CTAs' shared memory, but the generic stores into it (e.g. "
                    f"line {w.line}) are not ordered before it across the cluster: put fence.proxy.async and "
                    "barrier.cluster.arrive.release / barrier.cluster.wait.acquire between them", related=w.line)
        return st

    run_dataflow(ctx, frozenset(), step, union_states)
