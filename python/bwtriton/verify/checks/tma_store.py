"""TMA stores (shared -> global through the async proxy) after generic-proxy shared-memory writes (P21).

A `cp.async.bulk{.tensor}.global.shared::cta` reads its shared-memory source through the async proxy; the
generic-proxy `st.shared`/`stmatrix` writes that produced the tile are visible to it only after
`fence.proxy.async.shared::cta` (PTX ISA, memory consistency model, "proxies"; Triton emits the fence and a
`bar.sync` before every TMA store of its epilogue). The store's extent comes from the tensor map, which the PTX
does not contain, so only the source's start addresses are known: a write whose address range meets them is an
error, a write above them in the same buffer or to a buffer that may alias is a warning, a write below them
or to a different named buffer is fine.
"""
from __future__ import annotations

from typing import Optional

from bwtriton.ptx.cfg import back_edges
from bwtriton.ptx.ir import Instruction, Operand

from .context import Ctx
from .dataflow import may_have_run, run_dataflow, union_states

_WRITE_BYTES = 16   # the widest generic store (st.shared.v4.b32); a TMA reads at least 16 bytes (box rule)


def is_tma_store(ins: Instruction) -> bool:
    """cp.async.bulk{.tensor} / cp.reduce.async.bulk{.tensor} with a global destination and a shared source."""
    if not ins.opcode.startswith(("cp.async.bulk", "cp.reduce.async.bulk")) or ins.opcode.endswith("_group"):
        return False
    mods = ins.modifiers
    gl = next((i for i, m in enumerate(mods) if m == "global"), None)
    sh = next((i for i, m in enumerate(mods) if m.startswith("shared")), None)
    return gl is not None and sh is not None and gl < sh


def _source(ins: Instruction) -> Optional[Operand]:
    addrs = [o for o in ins.operands if o.kind == "addr"]
    return addrs[-1] if addrs else None


def _is_generic_write(ins: Instruction) -> bool:
    return ins.opcode == "stmatrix" or ins.opcode in ("st", "red", "atom") and any(
        m.startswith("shared") for m in ins.modifiers)


def _may_alias(a: Optional[str], b: Optional[str]) -> bool:
    """Whether two address bases may name overlapping shared memory (distinct named buffers do not)."""
    return a is None or b is None or a.startswith("?") or b.startswith("?") or a == b


def overlap(ctx: Ctx, write: Instruction, store: Instruction) -> Optional[bool]:
    """True: the write's addresses meet the store's source start addresses; None: cannot be ruled out; False:
    provably apart."""
    src = _source(store)
    s = ctx.resolver.address(src) if src is not None else None
    w = ctx.resolver.address(write.operands[0]) if write.operands and write.operands[0].kind == "addr" else None
    if s is None or w is None or s.base is None or w.base is None or s.base != w.base:
        return None if _may_alias(s.base if s else None, w.base if w else None) else False
    if w.hi + _WRITE_BYTES <= s.lo:
        return False      # below the source: a TMA reads upwards from its start
    if w.lo < s.hi + _WRITE_BYTES:
        return True
    return None           # above the start: inside the tile or not, depending on the tensor map's box


def check_tma_store_fence(ctx: Ctx) -> None:
    """P21: a generic st.shared that can reach a TMA store of the same buffer without fence.proxy.async."""
    stores = [i for i in ctx.func.instructions if is_tma_store(i)]
    if not stores:
        return
    backs = back_edges(ctx.func)
    writes = {i.index: i for i in ctx.func.instructions if _is_generic_write(i)}
    ins_at = ctx.func.instructions

    # state: ("fwd" | "loop", write index) not yet fenced; "loop" = carried over a back edge
    def step(st, ins, emit):
        if ins.index in writes:
            return st - {("loop", ins.index)} | {("fwd", ins.index)}
        if ins.opcode == "fence.proxy.async" and not ins.has("global"):
            return frozenset()
        if emit and st and is_tma_store(ins):
            _report(ctx, ins, [(kind, ins_at[i]) for kind, i in sorted(st) if may_have_run(ctx, ins_at[i])])
        return st

    def edge(u, v, st):
        return frozenset(("loop", i) for _, i in st) if (u, v) in backs and st else st

    run_dataflow(ctx, frozenset(), step, union_states, None, edge)


def _report(ctx: Ctx, store: Instruction, pending: list) -> None:
    verdicts = [(kind, w, overlap(ctx, w, store)) for kind, w in pending]
    sure = [w for kind, w, v in verdicts if v and kind == "fwd"]
    maybe = [w for kind, w, v in verdicts if v is None and kind == "fwd" or v and kind == "loop"]
    fix = "insert fence.proxy.async.shared::cta after the stores (before the bar.sync that precedes the TMA store)"
    if sure:
        ctx.add("tma-store-unfenced", "P21", "error", store,
                f"this TMA store reads shared memory that the generic-proxy store at line {sure[0].line} wrote "
                f"with no fence.proxy.async in between: the async proxy may read stale data; {fix}",
                related=sure[0].line)
    elif maybe:
        ctx.add("tma-store-unfenced", "P21", "warning", store,
                f"a generic-proxy shared-memory store (line {maybe[0].line}) reaches this TMA store without "
                f"fence.proxy.async, and its address could not be told apart from the store's source; {fix}",
                related=maybe[0].line)
