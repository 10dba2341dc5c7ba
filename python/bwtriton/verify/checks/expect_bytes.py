"""TMA byte counts and the pair's multicast mask (T4 bytes, P18 mask).

**Expected bytes (T4).** A TMA barrier's phase completes when the arrivals are in and the transaction count,
raised by `expect_tx`, has been brought back to zero by the TMAs' `complete_tx` (PTX ISA
#parallel-synchronization-and-communication-instructions-mbarrier-tracking-async-operations). If the count
expected is smaller than the bytes the waiting MMAs read, the phase can complete while a TMA is still writing
part of the tile. A dense `tcgen05.mma` reads K elements per row of A and per column of B (K from the kind,
#tcgen05-kind-shapes: 16 f16, 8 tf32, 32 8-bit or f8f6f4, 64 (96) mxf4), and the TMA that fills an operand
moves K · bits / 8 bytes of that row from global memory: 32 for every byte-or-wider type and for mxf4's packed
e2m1. The 4- and 6-bit types of `f8f6f4`/`mxf8f6f4` sit in shared memory in the padded layout (16 elements
followed by 8 / 4 bytes of padding, #tcgen05-packing-formats-mat-a-b), which the tensor copy produces from the
packed global data (PTX ISA #tensor-dimension-size-format-sub-bytes-padding-align, `.b4x16_p64`,
`.b6x16_p32`); the bytes counted are the packed ones, 16 / 24 per row, the fewest the copy can complete (so
the padded footprint never raises what is required; upstream Triton expects exactly these). An operand whose
format field is unknown counts the fewest bytes any format of its kind needs. So an MMA group needs
Σ (M + N) · row bytes over its distinct operand tiles; for `.cta_group::2` M and N are the pair's, and the leader's
barrier, on which both CTAs' TMAs complete (`mapa` to the even CTA), must expect both halves. Where each CTA's
TMAs complete on its own barrier (no `mapa`: Triton's own 2-CTA mainloop, which orders the peer's half by a
cluster barrier before the leader's MMAs), that barrier covers its CTA's half only. Decided where the
MMAs' operand addresses are exact (the pipeline prologue, straight-line code) and each operand lies in a tile a
TMA completing on the waited barrier fills; summed over the `expect_tx` of one block, the largest such sum is
compared. The bytes a TMA delivers (its box, in the tensor map) are not in the PTX, so a TMA that completes on the
wrong CTA's barrier (no `mapa`) is not decided here.

**Multicast mask (P18).** `tcgen05.commit.cta_group::2 ... .multicast::cluster [bar], mask` arrives on `bar` in
every CTA whose bit is set in `mask` (#tcgen05-instructions-tcgen05-commit). In a cluster of 2 both CTAs of the
pair wait on that barrier (both refill their halves and read their accumulator rows), so a constant mask
without both bits leaves one CTA waiting forever.
"""
from __future__ import annotations

from bwtriton.ptx.descriptors import AB_FORMATS, FORMAT_BITS

from .async_copy import _WAITS, barrier_operand, is_tma_load, same_address
from .context import Ctx, cta_group_of, decode_mma, exact_operand
from .mma_operands import smem_reads


def _row_bytes(dd, fmt):
    """The fewest bytes a TMA completes for one row of A (column of B) of one dense MMA: K elements of the
    operand's format, packed (the padded sub-byte layouts of f8f6f4 add padding only in shared memory)."""
    k = dd.k
    if k is None:
        return None
    bits = [FORMAT_BITS.get(fmt)] if fmt in FORMAT_BITS else \
        [FORMAT_BITS[f] for f in AB_FORMATS[dd.kind].values() if f in FORMAT_BITS]
    return k * min(bits) // 8


def _group_after(ctx: Ctx, wait) -> list:
    """The MMAs on the fall-through path after `wait`, up to the next commit, wait, jump or exit (a branch that
    skips them, such as the pair leader's test, leaves them as what runs after the wait when they run)."""
    out = []
    for ins in ctx.func.instructions[wait.index + 1:]:
        if ins.opcode == "tcgen05.commit" or ins.opcode in _WAITS or ins.opcode in ("ret", "exit", "brx"):
            break
        if ins.opcode == "bra" and ins.guard is None:
            break
        if ins.opcode == "tcgen05.mma":
            out.append(ins)
    return out


def _completes_on_leader(ctx: Ctx, tma) -> bool:
    """Whether a TMA's mbarrier operand is a `mapa` result (the barrier of another CTA of the cluster)."""
    op = barrier_operand(tma)
    base = getattr(op, "base", None)
    if base is None or base.kind != "reg":
        return False
    return any(d.opcode.startswith("mapa") for d in ctx.func.definitions(base.name))


def _tx_bytes(ctx: Ctx, e):
    """Upper bound of the bytes an expect_tx adds to the transaction count; None when unknown."""
    addr = next((k for k, o in enumerate(e.operands) if o.kind == "addr"), None)
    if addr is None or addr + 1 >= len(e.operands):
        return None
    v = ctx.resolver.operand(e.operands[addr + 1], 32)
    return None if v is None or v.base is not None else v.hi


def check_expect_bytes(ctx: Ctx) -> None:
    """T4: the bytes expected on a TMA barrier cover the operand tiles the MMAs after the wait read."""
    ins_at = ctx.func.instructions
    expects = [i for i in ins_at if i.opcode in ("mbarrier.arrive", "mbarrier.expect_tx") and i.has("expect_tx")]
    tmas = [i for i in ins_at if is_tma_load(i)]
    if not expects or not tmas:
        return
    dests = []
    for t in tmas:
        d = ctx.resolver.address(t.operands[0]) if t.operands and t.operands[0].kind == "addr" else None
        if d is not None and d.base is not None and d.lo == d.hi and not d.base.startswith("?"):
            dests.append((d.base, d.lo, t))
    for w in (i for i in ins_at if i.opcode in _WAITS):
        group = _group_after(ctx, w)
        if not group:
            continue
        need, tiles, fed = 0, set(), []
        for m in group:
            dd, reads = decode_mma(ctx, m), smem_reads(ctx, m)
            if dd is None or not dd.m or not dd.n or reads is None or m.has("sp"):
                need = None
                break
            rows = [(dd.m, dd.a_type), (dd.n, dd.b_type)]
            if m.operands[1].kind == "addr":
                rows = rows[1:]
            ops = [o for o in m.operands[1:3] if o.kind != "addr"]
            for (v, _, _), (r, fmt), op in zip(reads, rows, ops):
                per_row = _row_bytes(dd, fmt)
                if per_row is None:
                    need = None
                    break
                if v.lo != v.hi:
                    need = None
                    break
                below = [x for x in dests if x[0] == v.base and x[1] <= v.lo]
                if not below:
                    need = None
                    break
                tma = max(below, key=lambda x: x[1])[2]
                fed.append(tma)
                if same_address(ctx, barrier_operand(tma), barrier_operand(w)) is False:
                    need = None   # this operand is another barrier's (e.g. Q loaded once): not decided here
                    break
                # one K slice of a tile per distinct descriptor value (the slices differ in the start field)
                key = ctx.numbering.key(op, 64) or ("reg", op.text)
                if key not in tiles:
                    tiles.add(key)
                    need += r * per_row
            if need is None:
                break
        if not need:
            continue
        per_block: dict = {}
        for e in expects:
            if same_address(ctx, barrier_operand(e), barrier_operand(w)) is False:
                continue
            t = _tx_bytes(ctx, e)
            if t is None:
                per_block = {}
                break
            per_block[e.block] = per_block.get(e.block, 0) + t
        if not per_block:
            continue
        have = max(per_block.values())
        pair = cta_group_of(group[0]) == 2
        if pair and not any(_completes_on_leader(ctx, t) for t in fed):
            need //= 2   # each CTA's barrier expects its own half
        if have < need:
            where = " across the CTA pair" if pair else ""
            both = " (both CTAs: 2 x each CTA's bytes on the leader)" if pair else ""
            ctx.add("tma-bytes-short", "T4", "error", group[0],
                    f"the MMAs after this wait (line {w.line}) read {need} bytes of shared memory{where}, but the "
                    f"barrier's expect_tx counts at most {have}: the phase can complete while a TMA is still "
                    f"writing the tile; expect the bytes of every TMA completing on it{both}", related=w.line)


def check_multicast_mask(ctx: Ctx) -> None:
    """P18: a cta_group::2 multicast commit in a cluster of 2 arrives in both CTAs."""
    dims = ctx.func.directives.get("reqnctapercluster") or ctx.func.directives.get("explicitcluster")
    size = 1
    for d in dims or ():
        size *= int(d) if str(d).isdigit() else 1
    if size != 2:
        return
    waits = [i for i in ctx.func.instructions if i.opcode in _WAITS]
    for c in ctx.func.instructions:
        if c.opcode != "tcgen05.commit" or cta_group_of(c) != 2 or not c.has("multicast::cluster"):
            continue
        mask = exact_operand(ctx, c, len(c.operands) - 1, 16)
        if mask is None or mask & 3 == 3:
            continue
        if any(same_address(ctx, barrier_operand(w), barrier_operand(c)) is not False for w in waits):
            ctx.add("cta-mask-partial", "P18", "error", c,
                    f"this multicast commit's CTA mask is {mask:#04b}: in the 2-CTA cluster only "
                    f"{'CTA 0' if mask & 1 else 'CTA 1' if mask & 2 else 'no CTA'} sees the barrier arrive, and the "
                    "other CTA's wait on it never completes; use mask 0b11 (both CTAs of the pair)")


__all__ = ["check_expect_bytes", "check_multicast_mask"]
