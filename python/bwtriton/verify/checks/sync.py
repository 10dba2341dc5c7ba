"""Synchronisation checks: P9/P10 (wait::ld / wait::st), P11/P12 (accumulator read after commit and mbarrier
wait; every MMA committed), P17 (barrier after alloc). P15 (proxy fences) lives in `proxy_fence`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from bwtriton.ptx.ir import Instruction

from .async_copy import barrier_operand, same_address
from .context import Ctx, tmem_ref
from .first_pass import passes_at_once
from .lanes import ld_window_meets
from .dataflow import may_have_run, run_dataflow, union_states
from .tmem_regions import tmem_region


def _is_mbarrier_wait(ins: Instruction) -> bool:
    return ins.opcode in ("mbarrier.try_wait", "mbarrier.test_wait", "mbarrier.wait")


def _is_generic_smem_write(ins: Instruction) -> bool:
    if ins.opcode in ("st", "red", "atom") or ins.opcode == "stmatrix":
        return ins.opcode == "stmatrix" or any(m.startswith("shared") for m in ins.modifiers)
    return False


def _is_thread_barrier(ins: Instruction) -> bool:
    return ins.opcode in ("bar", "barrier", "barrier.cluster") and not ins.has("arrive") or _is_mbarrier_wait(ins)


@dataclass(frozen=True)
class LdHazard:
    """`read` uses `reg`, written by the tcgen05.ld `ld`, on a path with no tcgen05.wait::ld in between."""

    read: Instruction
    reg: str
    ld: Instruction


def _until_wait(ctx: Ctx, issue: str, wait: str, on_issue: Callable, on_pending: Callable) -> None:
    """Shared skeleton of the P9/P10 analyses: what the asynchronous `issue` instructions (tcgen05.ld / st)
    leave pending until a `tcgen05.wait::<wait>`. `on_issue(state, ins) -> state`; for any other instruction
    reached with a non-empty state, `on_pending(state, ins, emit) -> state` (emit: the reporting replay)."""
    if not ctx.func.find(issue):
        return

    def step(state, ins, emit):
        if ins.opcode == issue:
            return on_issue(state, ins)
        if ins.opcode == "tcgen05.wait" and ins.has(wait):
            return frozenset()
        return on_pending(state, ins, emit) if state else state

    run_dataflow(ctx, frozenset(), step, union_states)


def ld_wait_hazards(ctx: Ctx) -> tuple[list[LdHazard], list[tuple[Instruction, Instruction]]]:
    """P9 analysis: (register reads before tcgen05.wait::ld, (TMEM writer, ld) pairs where tcgen05.mma/st/cp or
    dealloc follows an un-waited ld). Shared by the check and by the `insert-tcgen05-wait-ld` pass, which adds
    waits before the reads."""
    reads: list[LdHazard] = []
    writes: list[tuple[Instruction, Instruction]] = []
    seen: set = set()

    # state: frozenset of (register, index of the tcgen05.ld that wrote it), not yet waited for
    def on_ld(pending, ins):
        return frozenset(p for p in pending if p[0] not in ins.defs) | {(r, ins.index) for r in ins.defs}

    def on_pending(pending, ins, emit):
        if emit:
            uses = set(ins.uses)
            for reg, ld in sorted(p for p in pending if p[0] in uses):
                if (ins.index, reg, ld) not in seen:
                    seen.add((ins.index, reg, ld))
                    reads.append(LdHazard(ins, reg, ctx.func.instructions[ld]))
            if ins.opcode in _TMEM_WRITERS:
                for ld in sorted({ld for _, ld in pending}):
                    if (ins.index, ld) not in seen:
                        seen.add((ins.index, ld))
                        writes.append((ins, ctx.func.instructions[ld]))
        return frozenset(p for p in pending if p[0] not in ins.defs) if ins.defs else pending

    _until_wait(ctx, "tcgen05.ld", "ld", on_ld, on_pending)
    reads.sort(key=lambda h: (h.read.index, h.reg))
    return reads, writes


_TMEM_WRITERS = ("tcgen05.mma", "tcgen05.st", "tcgen05.cp", "tcgen05.dealloc")


def check_ld_wait(ctx: Ctx) -> None:
    """P9: a TMEM write or dealloc that can overwrite cells (lanes x columns) a pending tcgen05.ld reads (error
    when they overlap, warning when they cannot be compared); register reads before tcgen05.wait::ld are a note,
    since the ISA respects a true register dependency (the wait is only needed against TMEM anti-dependencies)."""
    reads, writes = ld_wait_hazards(ctx)
    for h in reads:
        ctx.add("ld-without-wait", "P9", "note", h.read,
                f"{h.reg} is read before tcgen05.wait::ld; the hardware honours this register dependency, so it "
                "is legal (the optional insert-tcgen05-wait-ld pass adds the wait anyway)", related=h.ld.line)
    for w, ld in writes:
        a, b = tmem_region(ctx, ld), tmem_region(ctx, w)
        if a is None and b is not None and w.opcode != "tcgen05.dealloc":
            meets = ld_window_meets(ctx, ld, b[0], b[1])   # a load window computed from the warp index
            if meets is False:
                continue  # no warp's window meets what the writer writes
        if a is not None and b is not None and a[0] != b[0]:
            continue  # different allocations
        if a is not None and b is not None and not a[1].overlaps(b[1]):
            continue  # disjoint lanes or columns: no anti-dependency
        sure = a is not None and b is not None
        what = "deallocates the TMEM" if w.opcode == "tcgen05.dealloc" else "writes TMEM columns"
        cells = f"; it touches {b[1]}, the load reads {a[1]}" if sure else ""
        ctx.add("ld-overwritten", "P9", "error" if sure else "warning", w,
                f"{w.opcode} {what} that the tcgen05.ld at line {ld.line} may still be reading "
                f"({'columns overlap' if sure else 'lanes and columns could not be compared'}): issue "
                f"tcgen05.wait::ld.sync.aligned before it{cells}", related=ld.line)


def check_st_wait(ctx: Ctx) -> None:
    """P10: tcgen05.st -> tcgen05.wait::st before TMEM consumers and before signalling other threads."""

    # state: {line of the first un-waited tcgen05.st}
    def on_st(state, ins):
        return state or frozenset([ins.line])

    def on_pending(state, ins, emit):
        src = min(state)
        if not emit:
            return state
        if ins.opcode in ("tcgen05.mma", "tcgen05.ld", "tcgen05.cp"):
            ctx.add("st-without-wait", "P10", "error", ins,
                    f"{ins.opcode} follows tcgen05.st (line {src}) without tcgen05.wait::st: the store may not "
                    "have landed in TMEM", related=src)
        elif _is_thread_barrier(ins) or ins.opcode in ("mbarrier.arrive", "bar", "barrier"):
            ctx.add("st-without-wait", "P10", "warning", ins,
                    f"thread synchronisation after tcgen05.st (line {src}) without tcgen05.wait::st: other "
                    "threads may observe TMEM before the store completes", related=src)
        return state

    _until_wait(ctx, "tcgen05.st", "st", on_st, on_pending)


def _shared_cells(a, b) -> str:
    """'both touch lanes .., columns ..': where two overlapping (symbol, TmemRegion) pairs meet."""
    return f"both touch {a[1].intersection(b[1])}"


def check_accumulator_sync(ctx: Ctx) -> None:
    """P11/P12: tcgen05.ld of an MMA (or tcgen05.shift) result only after commit -> mbarrier wait; every one
    committed (both are tracked by tcgen05.commit: `completion.Mechanism.COMMIT`)."""
    mmas = [i for i in ctx.func.instructions if i.opcode in ("tcgen05.mma", "tcgen05.shift")]
    if not mmas:
        return
    d_ref = {m.index: tmem_ref(ctx, m.operands[0]) for m in mmas}
    d_reg = {m.index: m.operands[0].base.name if m.operands[0].base is not None else None for m in mmas}
    d_region = {m.index: tmem_region(ctx, m) for m in mmas}
    saw_fence = bool(ctx.func.find("tcgen05.fence"))

    covers: dict = {}

    def waits_for(wait: Instruction, commit: int) -> bool:
        """Whether `wait` may be on the barrier the commit arrives on (False only when provably another)."""
        if (wait.index, commit) not in covers:
            covers[(wait.index, commit)] = same_address(
                ctx, barrier_operand(wait), barrier_operand(ctx.func.instructions[commit])) is not False
        return covers[(wait.index, commit)]

    # state: frozenset of (mma index, "U" uncommitted | "C" committed not yet waited | "P" its wait returned at once
    # (first wait, parity 1) | "X" committed and a wait on
    # another barrier passed, commit index | -1)
    def step(st, ins, emit):
        if ins.opcode in ("tcgen05.mma", "tcgen05.shift"):
            return frozenset(x for x in st if x[0] != ins.index) | {(ins.index, "U", -1)}
        if ins.opcode == "tcgen05.commit":
            return frozenset((x[0], "C", ins.index) if x[1] == "U" else x for x in st)
        if _is_mbarrier_wait(ins):
            earlier = any(x[1] == "W" and same_address(ctx, barrier_operand(ins), barrier_operand(
                ctx.func.instructions[x[2]])) is not False for x in st)
            if passes_at_once(ctx, ins, earlier):
                # the thread's first wait on this barrier, with parity 1 on its first pass: returns at once (the
                # phase before the first counts as complete), so it completes no commit
                return frozenset((x[0], "P", x[2]) if x[1] in "CX" and waits_for(ins, x[2]) else x
                                 for x in st) | {(-1, "W", ins.index)}
            # a wait on another barrier leaves the MMA pending, marked "X" (waited, but elsewhere)
            return frozenset(x if x[1] in "UWP" else (x[0], "X", x[2]) for x in st
                             if x[1] in "UWP" or not waits_for(ins, x[2])) | {(-1, "W", ins.index)}
        if ins.opcode == "tcgen05.ld" and st and emit:
            addr = next((o for o in ins.operands if o.kind == "addr"), None)
            reg = tmem_region(ctx, ins)
            for mi, status, commit in sorted(st):
                if status == "W":
                    continue   # the marker "this thread has waited before"
                if not may_have_run(ctx, ctx.func.instructions[mi]):
                    continue  # the MMA's own guard is false on this path
                mref, dreg, overlap = d_ref.get(mi), d_region.get(mi), None
                if reg is not None and mref is not None and reg[0] == mref[0]:
                    # lanes x columns: Triton packs two M=64 accumulators into one column range at lanes +0/+16
                    overlap = dreg is None or reg[1].overlaps(dreg[1])
                elif addr is not None and addr.base is not None and addr.base.name == d_reg.get(mi):
                    overlap = True
                elif reg is None and dreg is not None:
                    # a window computed from the warp index: z3 decides whether every warp's meets the D tile (an
                    # error), none does (the other M=64 tile: nothing to report) or neither is proven (a warning)
                    overlap = ld_window_meets(ctx, ins, dreg[0], dreg[1])
                what = {"C": "committed but not waited for", "U": "not committed",
                        "P": "committed, but the wait on its mbarrier uses parity 1 as this thread's first wait on "
                             "it, which returns at once,",
                        "X": f"committed, but the mbarrier waited on is not the one its tcgen05.commit (line "
                             f"{ctx.func.instructions[commit].line}) arrives on,"}[status]
                mline = next(m.line for m in mmas if m.index == mi)
                kind = "MMA" if ctx.func.instructions[mi].opcode == "tcgen05.mma" else "tcgen05.shift"
                if overlap:
                    cells = f" ({_shared_cells(reg, dreg)})" if reg is not None and dreg is not None else ""
                    ctx.add("acc-read-unsynced", "P11", "error", ins,
                            f"tcgen05.ld reads the accumulator of the {kind} at line {mline}, which is {what} on some "
                            "path: issue tcgen05.commit to an mbarrier, wait on it, then "
                            f"tcgen05.fence::after_thread_sync before reading{cells}", related=mline)
                elif overlap is None:
                    ctx.add("acc-read-unsynced", "P11", "warning", ins,
                            f"tcgen05.ld while the {kind} at line {mline} is {what} (TMEM regions could not be "
                            "compared statically)", related=mline)
        return st

    def on_exit(st, block):
        for mi, status, _ in sorted(st):
            if status == "U":
                m = next(x for x in mmas if x.index == mi)
                what = "MMA" if m.opcode == "tcgen05.mma" else m.opcode
                ctx.add("mma-uncommitted", "P12", "warning", m,
                        f"this {what} can reach the kernel exit without a tcgen05.commit tracking it; nothing can "
                        "wait for its completion")

    run_dataflow(ctx, frozenset(), step, union_states, on_exit)
    if ctx.func.find("tcgen05.ld") and not saw_fence:
        first = ctx.func.find("tcgen05.ld")[0]
        ctx.add("missing-after-thread-sync", "P11", "note", first,
                "no tcgen05.fence::after_thread_sync in this kernel: the PTX canonical pattern is commit -> "
                "mbarrier wait -> tcgen05.fence::after_thread_sync -> tcgen05.ld (Triton 3.6 relies on the "
                "mbarrier wait alone)")


def check_alloc_result_barrier(ctx: Ctx) -> None:
    """P17: the TMEM address written by tcgen05.alloc is read from smem only after a thread barrier."""
    slots = dict(ctx.resolver.tmem_slots)
    allocs = ctx.func.find("tcgen05.alloc")
    if not allocs or not slots:
        return
    alloc_slot = {}
    for a in allocs:
        v = ctx.resolver.address(a.operands[0])
        if v is not None and v.offset is not None:
            alloc_slot[(v.base, v.offset)] = a.line

    def step(st, ins, emit):
        if ins.opcode == "tcgen05.alloc":
            return st | {ins.line}
        if _is_thread_barrier(ins):
            return frozenset()
        if st and emit and ins.opcode == "ld" and any(m.startswith("shared") for m in ins.modifiers):
            v = ctx.resolver.address(ins.operands[1]) if len(ins.operands) > 1 else None
            if v is not None and v.offset is not None and (v.base, v.offset) in alloc_slot:
                ctx.add("alloc-result-unsynced", "P17", "warning", ins,
                        "the TMEM address written by tcgen05.alloc is read without an intervening barrier "
                        "(the alloc's shared-memory store is weak): bar.sync before reading it",
                        related=alloc_slot[(v.base, v.offset)])
        return st

    run_dataflow(ctx, frozenset(), step, union_states)
