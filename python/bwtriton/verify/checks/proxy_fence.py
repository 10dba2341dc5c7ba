"""P15: a generic-proxy shared-memory write (st.shared, stmatrix, red/atom.shared) read by the async proxy
(tcgen05.mma / tcgen05.cp operands) must be ordered before the read by `fence.proxy.async` and, when other warps
wrote the bytes, by a CTA barrier (PTX ISA #tcgen05-memory-consistency-model-smem-access, #proxies).

One path analysis, `proxy_fence_hazards`, serves the check and the `insert-proxy-fence` repair pass. Each pending
write carries flags: F (a proxy fence passed), B (a CTA barrier or mbarrier wait passed), R (an asynchronous
write to shared memory, a TMA load or cp.async, may have refilled the bytes since). A write stops being pending
once F and B both passed (F alone in a one-warp CTA). Writes carried over a loop back edge are "carried": the
previous iteration's store reaching this iteration's read. Fence and barrier may come in either order, as the
emulator accepts both ("store, fence, barrier, issue" and "store, barrier, issuer fences").

Severity: an error when the write surely meets the bytes read (inside an operand's exact extent, or its address
range covering an operand's start), no asynchronous write may have refilled them, and the path is feasible (z3;
`Ctx.add` turns errors on undecided paths into warnings). Addresses that cannot be told apart give a warning
within an iteration and a note across iterations (persistent kernels reuse epilogue scratch as pipeline buffers,
which TMA refills before the MMA reads them). TMA stores are checked by P21 (`tma_store`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bwtriton.ptx.cfg import back_edges
from bwtriton.ptx.ir import Instruction

from .context import Ctx, threads_per_cta
from .dataflow import may_have_run, run_dataflow, union_states
from .mma_operands import smem_reads as _smem_reads
from .sync import _is_generic_smem_write

_READERS = ("tcgen05.mma", "tcgen05.cp")
_STORE_BYTES = 16   # the widest generic store (st.shared.v4.b32): what one thread writes from its address


@dataclass(frozen=True)
class ProxyHazard:
    """A generic write reaching an async-proxy read with the fence (`missing="fence"`) or, after a fence, the CTA
    barrier (`missing="barrier"`) absent on some path. `overlap`: True / None (undecided) / never False here;
    `carried`: the write is from an earlier loop iteration; `refilled`: an asynchronous shared-memory write may
    have replaced the bytes since; `feasible`: the path is known feasible."""

    write: Instruction
    reader: Instruction
    missing: str
    overlap: Optional[bool]
    carried: bool
    refilled: bool
    feasible: bool

    @property
    def proven(self) -> bool:
        """Whether this is a race the verifier reports as an error (and the repair pass fixes)."""
        return bool(self.overlap) and not self.refilled and self.feasible


def _is_cta_barrier(ins: Instruction) -> bool:
    """A wait that orders other warps' earlier stores before this thread: bar/barrier.sync, barrier.cluster.wait,
    an mbarrier wait (the arrivals release, the wait acquires)."""
    if ins.opcode in ("bar", "barrier"):
        return not ins.has("arrive") and not ins.has("red")
    if ins.opcode == "barrier.cluster":
        return ins.has("wait")
    return ins.opcode in ("mbarrier.try_wait", "mbarrier.test_wait", "mbarrier.wait")


def is_proxy_fence(ins: Instruction) -> bool:
    """fence.proxy.async naming shared memory (or all state spaces), including the release variants."""
    if ins.opcode == "fence.proxy.async":
        return not ins.has("global")
    return ins.opcode == "fence" and "proxy" in ins.modifiers and any(m.startswith("async") for m in ins.modifiers)


def _is_async_smem_write(ins: Instruction) -> bool:
    """cp.async / cp.async.bulk{.tensor} into shared memory (the first state space named is the destination)."""
    if not ins.opcode.startswith("cp.async") or ins.opcode.endswith(("_group", "wait_all")):
        return False
    spaces = [m for m in ins.modifiers if m.startswith(("shared", "global"))]
    return bool(spaces) and spaces[0].startswith("shared")


def _overlap(ctx: Ctx, write: Instruction, reads) -> Optional[bool]:
    """Whether the write meets bytes the reader reads: True / False when decidable, None otherwise."""
    w = ctx.resolver.address(write.operands[0]) if write.operands and write.operands[0].kind == "addr" else None
    if reads is None or w is None or w.base is None:
        return None
    verdict: Optional[bool] = False
    for rv, exact, upper in reads:
        if rv.base != w.base:
            verdict = None
            continue
        if rv.lo <= w.lo and w.hi < rv.lo + exact:
            return True       # the write lands inside the operand tile
        if rv.lo == rv.hi and w.lo <= rv.lo < w.hi + _STORE_BYTES and \
                (rv.lo - w.lo) % max(w.stride, 1) < _STORE_BYTES:
            return True       # some thread's store covers the operand's first bytes, which the reader surely reads
        if w.lo < rv.hi + upper and rv.lo < w.hi + _STORE_BYTES:
            verdict = None    # cannot rule the overlap out
    return verdict


def proxy_fence_hazards(ctx: Ctx) -> list[ProxyHazard]:
    """Every (generic write, async-proxy reader) pair left unordered on some path, one per pair and kind."""
    if not any(i.opcode in _READERS for i in ctx.func.instructions):
        return []
    backs = back_edges(ctx.func)
    ins_at = ctx.func.instructions
    one_warp = threads_per_cta(ctx.func) <= 32
    reads_cache: dict = {}
    found: dict = {}

    def settle(st):
        return frozenset(e for e in st if not ("F" in e[2] and ("B" in e[2] or one_warp)))

    def flag(st, f):
        return settle(frozenset((k, i, "".join(sorted(set(fl) | {f}))) for k, i, fl in st))

    def step(st, ins, emit):
        if _is_generic_smem_write(ins):
            return frozenset(e for e in st if e[1] != ins.index) | {("fwd", ins.index, "")}
        if not st:
            return st
        if is_proxy_fence(ins):
            return flag(st, "F")
        if _is_cta_barrier(ins):
            return flag(st, "B")
        if _is_async_smem_write(ins):
            return flag(st, "R")
        if emit and ins.opcode in _READERS:
            if ins.index not in reads_cache:
                reads_cache[ins.index] = _smem_reads(ctx, ins)
            for kind, wi, fl in sorted(st):
                w = ins_at[wi]
                if not may_have_run(ctx, w) or _same_thread(w, ins):
                    continue
                ov = _overlap(ctx, w, reads_cache[ins.index])
                if ov is False:
                    continue
                h = ProxyHazard(w, ins, "barrier" if "F" in fl else "fence", ov, kind == "loop", "R" in fl,
                                ctx.exact)
                key = (wi, ins.index, h.missing)
                old = found.get(key)
                if old is None or _worse(h, old):
                    found[key] = h
        return st

    def edge(u, v, st):
        if (u, v) in backs and st:
            return frozenset(("loop", i, fl) for _, i, fl in st)
        return st

    run_dataflow(ctx, frozenset(), step, union_states, None, edge)
    return sorted(found.values(), key=lambda h: (h.reader.index, h.write.index, h.missing))


def _same_thread(write: Instruction, reader: Instruction) -> bool:
    """The write and the read sit under the same guard register: the same (elected) thread does both."""
    return write.guard is not None and reader.guard is not None and write.guard == reader.guard


def _worse(a: ProxyHazard, b: ProxyHazard) -> bool:
    """Whether `a` makes a stronger case than `b` for the same pair."""
    return (a.proven, not a.carried, a.overlap is True) > (b.proven, not b.carried, b.overlap is True)


def check_proxy_fence(ctx: Ctx) -> None:
    """P15 findings: per reader, the strongest hazard of each kind (see the module docstring for severities)."""
    by_reader: dict = {}
    for h in proxy_fence_hazards(ctx):
        by_reader.setdefault((h.reader.index, h.missing), []).append(h)
    for (_, missing), hs in sorted(by_reader.items()):
        h = max(hs, key=lambda x: (x.proven, x.overlap is True, not x.carried, -x.write.line))
        _report(ctx, h)


def _report(ctx: Ctx, h: ProxyHazard) -> None:
    r, w = h.reader, h.write
    when = " in an earlier loop iteration" if h.carried else ""
    if h.overlap and not h.refilled:
        severity = "error"
    elif h.carried or h.refilled and h.overlap is None:
        severity = "note"
    else:
        severity = "warning"
    saved = ctx.exact
    ctx.exact = h.feasible   # the hazard was found on a path of this feasibility; Ctx.add downgrades accordingly
    if h.missing == "fence":
        what = (f"{r.opcode} reads shared memory through the async proxy that a generic-proxy store (line {w.line}) "
                f"wrote{when} with no fence.proxy.async in between")
        if h.overlap is None:
            what += " (its address could not be told apart from the operands)"
        if h.refilled:
            what += " (an asynchronous copy may have refilled the bytes since)"
        ctx.add("missing-proxy-fence", "P15", severity, r,
                f"{what}; insert fence.proxy.async.shared::cta after the writes (before the barrier)", related=w.line)
    else:
        ctx.add("proxy-fence-unsynced", "P15", severity, r,
                f"{r.opcode} reads shared memory that other threads stored through the generic proxy (line "
                f"{w.line}{when}) and fenced, but no CTA barrier orders those stores before this thread's read: "
                "bar.sync after the fence.proxy.async", related=w.line)
    ctx.exact = saved
