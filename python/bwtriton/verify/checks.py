"""The tcgen05 protocol checks. Each check is a function `(ctx) -> None` that appends `Finding`s.

Path-based checks use the forward dataflow solver of `bwtriton.ptx.cfg` ("may" analyses: a state element
survives a join if it holds on some path). Anything not statically decidable (register-held values, loops
that cannot be unrolled) is skipped or reported as a warning, never as an error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

from bwtriton.ptx.cfg import back_edges, forward_dataflow, reachable_blocks
from bwtriton.ptx.descriptors import (BLOCK_SCALED, FORMAT_BITS, d_tile_columns, decode_idesc, decode_smem_desc,
                                      idesc_problems, smem_desc_problems)
from bwtriton.ptx.ir import Function, Instruction, Module
from bwtriton.ptx.values import AbsVal, ValueNumbering, ValueResolver

from .findings import Finding

LEGAL_NCOLS = (32, 64, 128, 256, 512)


@dataclass
class Ctx:
    module: Module
    func: Function
    target: str
    resolver: ValueResolver
    findings: list[Finding] = field(default_factory=list)
    alloc_cols: dict[str, Optional[int]] = field(default_factory=dict)   # tmem symbol -> allocated columns
    _seen: set = field(default_factory=set)
    numbering: ValueNumbering = field(init=False)
    edge_facts: dict = field(default_factory=dict)   # (u, v) -> predicate facts of that CFG edge (cached)

    def __post_init__(self) -> None:
        self.numbering = ValueNumbering(self.func)

    def add(self, check: str, rule: str, severity: str, ins_or_line, message: str,
            related: Optional[int] = None) -> None:
        line = ins_or_line.line if isinstance(ins_or_line, Instruction) else int(ins_or_line)
        key = (check, line, message)
        if key in self._seen:
            return
        self._seen.add(key)
        self.findings.append(Finding(check, rule, severity, message, line, self.func.name, related))


# ---------------------------------------------------------------------------------------------------------
# helpers
def cta_group_of(ins: Instruction) -> Optional[int]:
    v = ins.modifier_value("cta_group")
    return int(v) if v and v.isdigit() else None


def _is_mbarrier_wait(ins: Instruction) -> bool:
    return ins.opcode in ("mbarrier.try_wait", "mbarrier.test_wait", "mbarrier.wait")


def _is_generic_smem_write(ins: Instruction) -> bool:
    if ins.opcode in ("st", "red", "atom") or ins.opcode == "stmatrix":
        return ins.opcode == "stmatrix" or any(m.startswith("shared") for m in ins.modifiers)
    return False


def _is_thread_barrier(ins: Instruction) -> bool:
    return ins.opcode in ("bar", "barrier", "barrier.cluster") and not ins.has("arrive") or _is_mbarrier_wait(ins)


def _exact(ctx: Ctx, ins: Instruction, idx: int, width: int = 32) -> Optional[int]:
    if idx >= len(ins.operands):
        return None
    v = ctx.resolver.operand(ins.operands[idx], width)
    return None if v is None else v.exact


def _fact(ctx: Ctx, reg: str, value: bool) -> tuple[tuple, bool]:
    """A predicate fact in canonical form: keyed by the predicate's *value* when it is a kernel-invariant
    integer comparison (so `K > 0` and a separately computed `K < 1` are one fact, opposite polarity), else by
    the register (("reg", name): killed when the register is redefined)."""
    canon = ctx.numbering.predicate(reg)
    if canon is None:
        return (("reg", reg), value)
    key, flip = canon
    return (key, value != flip)


def _branch_facts(ctx: Ctx, u: int, v: int) -> Optional[tuple[tuple[tuple, bool], ...]]:
    """Predicate facts that hold on edge u -> v of a conditional `@%p bra` (with or/and/not.pred derivations)."""
    if (u, v) in ctx.edge_facts:
        return ctx.edge_facts[(u, v)]
    ctx.edge_facts[(u, v)] = facts = _derive_branch_facts(ctx, u, v)
    return facts


def _derive_branch_facts(ctx: Ctx, u: int, v: int) -> Optional[tuple[tuple[tuple, bool], ...]]:
    blocks = ctx.func.blocks
    last = blocks[u].instructions[-1] if blocks[u].instructions else None
    if last is None or last.opcode != "bra" or last.guard is None or len(blocks[u].succs) < 2:
        return None
    taken = ctx.func.label_block.get(last.targets[0]) if last.targets else None
    if taken is None or taken == u + 1:
        return None
    if len(ctx.func.definitions(last.guard.reg)) != 1:
        return None  # loop-carried or scoped (e.g. try_wait's `complete`): facts would only split paths
    value = (v == taken) != last.guard.negated
    facts = [(last.guard.reg, value)]
    work = [(last.guard.reg, value)]
    while work and len(facts) < 16:
        reg, val = work.pop()
        defs = ctx.func.definitions(reg)
        if len(defs) != 1:
            continue
        d = defs[0]
        srcs = [o for o in d.operands[1:] if o.kind == "reg"]
        derived = []
        if d.opcode == "or" and not val:
            derived = [(o.name, o.negated) for o in srcs]        # a|b false -> a false, b false
        elif d.opcode == "and" and val:
            derived = [(o.name, not o.negated) for o in srcs]    # a&b true -> a true, b true
        elif d.opcode == "not" and srcs:
            derived = [(srcs[0].name, not val)]
        for f in derived:
            if f not in facts:
                facts.append(f)
                work.append(f)
    canonical: dict[tuple, bool] = {}
    for reg, val in facts:
        key, cval = _fact(ctx, reg, val)
        if canonical.setdefault(key, cval) != cval:
            return None  # the branch contradicts itself: leave the edge alone rather than guess
    return tuple(canonical.items())


_MAX_BUNDLES = 64


def run_dataflow(ctx: Ctx, init: frozenset, step: Callable, join: Callable[[Iterable], frozenset],
                 on_exit: Optional[Callable] = None, edge: Optional[Callable] = None) -> None:
    """Path-sensitive (on branch predicates) set dataflow; replays the fixpoint once with `emit` enabled.

    The state is a set of bundles (facts, payload): `facts` are predicate values learned from conditional
    branches (killed when the predicate is redefined); an edge contradicting a bundle's facts drops the bundle,
    which removes infeasible paths such as "MMA issued under !%p2 ... wait skipped under %p2".
    """
    func = ctx.func
    # facts keyed by a register die when it is redefined; value-keyed facts (invariant comparisons) never do
    pred_defs = {ins.index: frozenset(("reg", r) for r in ins.defs) for ins in func.instructions if ins.defs}

    def norm(bundles) -> frozenset:
        by_facts: dict = {}
        for facts, payload in bundles:
            by_facts[facts] = join([by_facts[facts], payload]) if facts in by_facts else payload
        if len(by_facts) > _MAX_BUNDLES:  # too many paths: forget the facts, keep the payload
            return frozenset([(frozenset(), join(list(by_facts.values())))])
        return frozenset(by_facts.items())

    def run_block(block, bundles, emit):
        out = []
        for facts, payload in bundles:
            for ins in block.instructions:
                payload = step(payload, ins, emit)
                killed = pred_defs.get(ins.index)
                if killed and facts:
                    facts = frozenset(f for f in facts if f[0] not in killed)
            out.append((facts, payload))
        return out

    def transfer(block, bundles):
        return norm(run_block(block, bundles, False))

    def edge_fn(u, v, bundles):
        facts_uv = _branch_facts(ctx, u, v)
        out = []
        for facts, payload in bundles:
            if edge is not None:
                payload = edge(u, v, payload)
            if facts_uv:
                d = dict(facts)
                if any(d.get(r, val) != val for r, val in facts_uv):
                    continue  # infeasible for this bundle
                facts = facts | frozenset(facts_uv)
            out.append((facts, payload))
        return frozenset(out)

    def join_bundles(states):
        allb = []
        for s in states:
            allb.extend(s)
        return norm(allb)

    ins_states = forward_dataflow(func, frozenset([(frozenset(), init)]), transfer, join_bundles, edge_fn)
    for b in func.blocks:
        if b.id not in ins_states:
            continue
        outs = run_block(b, ins_states[b.id], True)
        if b.terminal == "exit" and on_exit is not None:
            for _, payload in outs:
                on_exit(payload, b)


def _union(states):
    out = frozenset()
    for s in states:
        out |= s
    return out


def _tmem_ref(ctx: Ctx, op) -> Optional[tuple[str, int, int]]:
    """(tmem symbol, lane, column) of a TMEM address operand that is alloc-base + offset with a known column.

    The lane may vary per warp (Triton adds (warp % 4) * 32 << 16): then the lowest lane is returned, which
    is what lane-quarter alignment needs, and the column is still exact when the stride is a multiple of 1<<16."""
    v = ctx.resolver.address(op) if op.kind == "addr" else ctx.resolver.operand(op)
    if v is None or v.base is None or not v.base.startswith("tmem@") or v.lo < 0:
        return None
    if v.lo != v.hi and v.stride % (1 << 16):
        return None
    return v.base, (v.lo >> 16) & 0xFFFF, v.lo & 0xFFFF


# ---------------------------------------------------------------------------------------------------------
# setup: link the TMEM base address back to the allocation
def discover_tmem(ctx: Ctx) -> None:
    r = ctx.resolver
    for k, ins in enumerate(ctx.func.find("tcgen05.alloc")):
        if not ins.operands:
            continue
        addr = r.address(ins.operands[0])
        sym = f"tmem@{ins.line}"
        ctx.alloc_cols[sym] = _exact(ctx, ins, 1)
        if addr is not None and addr.offset is not None:
            r.tmem_slots[(addr.base, addr.offset)] = sym
    if not r.tmem_slots:
        return
    # The TMEM base may be handed to other warps through shared memory (warp specialization).
    for _ in range(2):
        r.reset()
        for ins in ctx.func.instructions:
            if ins.opcode == "st" and any(m.startswith("shared") for m in ins.modifiers) and len(ins.operands) == 2:
                val = r.operand(ins.operands[1], 32)
                addr = r.address(ins.operands[0])
                if val is not None and val.base and val.base.startswith("tmem@") and val.offset == 0 \
                        and addr is not None and addr.offset is not None:
                    r.tmem_slots.setdefault((addr.base, addr.offset), val.base)
    r.reset()


# ---------------------------------------------------------------------------------------------------------
def check_trap_only(ctx: Ctx) -> None:
    """T1: an entry whose every path ends in `trap` (Triton's answer to resource overflow)."""
    f = ctx.func
    if not f.is_entry or not f.blocks:
        return
    reach = reachable_blocks(f)
    traps = [b for b in reach if f.blocks[b].terminal == "trap"]
    exits = [b for b in reach if f.blocks[b].terminal == "exit"]
    if traps and not exits:
        line = f.blocks[traps[0]].instructions[-1].line
        real = [i for i in f.instructions if i.opcode not in ("trap", "ret", "exit")]
        what = "whose whole body is `trap`" if not real else "on which every path ends in `trap`"
        ctx.add("trap-only-body", "T1", "error", line,
                f"entry {f.name} is a kernel {what}: it can never do useful work. Triton 3.6 emits this when "
                "a kernel over-subscribes a resource (e.g. accumulators needing more than 512 TMEM columns); "
                "shrink the tile/accumulators or the number of stages")


def check_cta_group(ctx: Ctx) -> None:
    """P1: one cta_group for every tcgen05 instruction of the kernel."""
    groups = [(cta_group_of(i), i) for i in ctx.func.instructions if i.is_tcgen05 and cta_group_of(i)]
    if not groups:
        return
    first = groups[0]
    for g, ins in groups[1:]:
        if g != first[0]:
            ctx.add("cta-group-mixed", "P1", "error", ins,
                    f"{ins.full_opcode} uses cta_group::{g} but line {first[1].line} uses cta_group::{first[0]}; "
                    "all tcgen05 instructions of a kernel must use the same .cta_group", related=first[1].line)


def check_cluster(ctx: Ctx) -> None:
    """P18: cta_group::2 needs a cluster of (an even number >= 2 of) CTAs."""
    two = [i for i in ctx.func.instructions if i.is_tcgen05 and cta_group_of(i) == 2]
    if not two:
        return
    size = ctx.func.cluster_size
    if size is None:
        ctx.add("cta-group2-cluster", "P18", "warning", two[0],
                "cta_group::2 is used but the entry declares no .reqnctapercluster: it only works when launched "
                "with a cluster of 2 (or an even number of) CTAs; declare `.reqnctapercluster 2` / "
                "`.explicitcluster` (Triton: num_ctas=2)")
    elif size < 2 or size % 2:
        ctx.add("cta-group2-cluster", "P18", "error", two[0],
                f"cta_group::2 needs CTA pairs but .reqnctapercluster gives {size} CTA(s) per cluster; "
                "use an even cluster size (Triton: num_ctas=2)")


def check_sync_aligned(ctx: Ctx) -> None:
    """P6: warp-collective tcgen05 instructions must be .sync.aligned."""
    for ins in ctx.func.instructions:
        if ins.opcode in ("tcgen05.alloc", "tcgen05.dealloc", "tcgen05.relinquish_alloc_permit", "tcgen05.ld",
                          "tcgen05.st", "tcgen05.wait") and not (ins.has("sync") and ins.has("aligned")):
            ctx.add("not-sync-aligned", "P6", "error", ins,
                    f"{ins.opcode} is warp-collective and must carry .sync.aligned")


def check_single_thread_issue(ctx: Ctx) -> None:
    """P7: mma/cp/commit/shift start one operation per issuing thread: expect an elect/predicate guard."""
    for ins in ctx.func.instructions:
        if ins.opcode in ("tcgen05.mma", "tcgen05.cp", "tcgen05.commit", "tcgen05.shift") and ins.guard is None:
            ctx.add("unguarded-issue", "P7", "warning", ins,
                    f"{ins.opcode} is issued by every thread that reaches it (no predicate guard): each thread "
                    "starts its own operation; guard it with an elect.sync predicate")


def check_alloc_columns(ctx: Ctx) -> None:
    """P2: nCols of alloc/dealloc is a power of two in [32, 512]."""
    for ins in ctx.func.instructions:
        if ins.opcode in ("tcgen05.alloc", "tcgen05.dealloc"):
            n = _exact(ctx, ins, 1)
            if n is not None and n not in LEGAL_NCOLS:
                ctx.add("alloc-columns", "P2", "error", ins,
                        f"{ins.opcode} of {n} columns: nCols must be a power of two in [32, 512] "
                        f"({', '.join(map(str, LEGAL_NCOLS))})")


def check_alloc_lifetime(ctx: Ctx) -> None:
    """P3 (non-increasing), P4 (dealloc on every path, same columns), P5 (no alloc after relinquish)."""
    allocs = ctx.func.find("tcgen05.alloc")
    if not allocs and not ctx.func.find("tcgen05.dealloc"):
        return
    cols = {a.index: _exact(ctx, a, 1) for a in allocs}

    # state: (outstanding alloc indices, last-alloc column counts, relinquished?)
    def step(st, ins, emit):
        out, last, rel = st
        if ins.opcode == "tcgen05.alloc":
            c = cols.get(ins.index)
            if emit and rel:
                ctx.add("alloc-after-relinquish", "P5", "error", ins,
                        "tcgen05.alloc is reachable after tcgen05.relinquish_alloc_permit; a CTA may not allocate "
                        "after relinquishing: move the relinquish after the last allocation")
            if emit and c is not None and last:
                known = [p for p in last if p is not None]
                if known and all(c > p for p in known):
                    ctx.add("alloc-increasing", "P3", "error", ins,
                            f"allocation of {c} columns follows an allocation of {max(known)} columns: allocation "
                            "sizes must not increase in execution order; allocate the largest block first")
                elif known and any(c > p for p in known):
                    ctx.add("alloc-increasing", "P3", "warning", ins,
                            f"on some path this allocation of {c} columns follows a smaller one "
                            f"({min(known)} columns); allocation sizes must not increase")
            return (out | {ins.index}, frozenset([c]), rel)
        if ins.opcode == "tcgen05.dealloc":
            c = _exact(ctx, ins, 1)
            if c is None:
                return (frozenset(), last, rel)
            match = frozenset(a for a in out if cols.get(a) in (c, None))
            if match:
                return (out - match, last, rel)
            if out and emit:
                have = sorted({cols[a] for a in out if cols.get(a) is not None})
                ctx.add("dealloc-columns", "P4", "error", ins,
                        f"tcgen05.dealloc frees {c} columns but the live allocation has {have} columns; "
                        "deallocate with the same nCols as the allocation",
                        related=min(allocs_by_index[a].line for a in out))
            return (frozenset(), last, rel) if out else (out, last, rel)
        if ins.opcode == "tcgen05.relinquish_alloc_permit":
            return (out, last, True)
        return st

    allocs_by_index = {a.index: a for a in allocs}

    def join(states):
        states = list(states)
        return (_union(s[0] for s in states), _union(s[1] for s in states), any(s[2] for s in states))

    def on_exit(st, block):
        for a in sorted(st[0]):
            ins = allocs_by_index[a]
            ctx.add("dealloc-missing", "P4", "error", ins,
                    f"TMEM allocated here ({cols.get(a)} columns) can reach the kernel exit (line "
                    f"{block.instructions[-1].line if block.instructions else ctx.func.end_line}) without "
                    "tcgen05.dealloc; free every allocation on every path before exit",
                    related=block.instructions[-1].line if block.instructions else None)

    run_dataflow(ctx, (frozenset(), frozenset(), False), step, join, on_exit)


_LD_SHAPE_COLS = {"32x32b": (32, 1), "16x64b": (16, 2), "16x128b": (16, 4), "16x256b": (16, 8),
                  "16x32bx2": (16, 1)}
_LD_REGS = {"32x32b": 1, "16x64b": 1, "16x32bx2": 1, "16x128b": 2, "16x256b": 4}


def _shape_num(ins: Instruction) -> tuple[Optional[str], Optional[int]]:
    shape = next((m for m in ins.modifiers if m in _LD_SHAPE_COLS), None)
    num = next((int(m[1:]) for m in ins.modifiers if m.startswith("x") and m[1:].isdigit()), None)
    return shape, num


def check_ld_st_shapes(ctx: Ctx) -> None:
    """P8 (lane quarter, range inside the allocation), P20 (.red), register counts of ld/st."""
    for ins in ctx.func.instructions:
        if ins.opcode not in ("tcgen05.ld", "tcgen05.st"):
            continue
        shape, num = _shape_num(ins)
        if shape is None or num is None:
            continue
        if ins.opcode == "tcgen05.ld" and ins.has("red"):
            if shape not in ("32x32b", "16x32bx2") or num < 2:
                ctx.add("ld-red-shape", "P20", "error", ins,
                        "tcgen05.ld.red needs .num >= .x2 and shape .32x32b or .16x32bx2")
            if ctx.target.startswith("sm_100"):
                ctx.add("ld-red-shape", "P20", "error", ins, "tcgen05.ld.red is not available on sm_100a")
        max_num = {"16x128b": 64, "16x256b": 32}.get(shape, 128)
        if num > max_num:
            ctx.add("ld-st-shape", "P20", "error", ins, f".{shape}.x{num} is not a legal combination "
                    f"(largest .num for .{shape} is .x{max_num})")
        vec = next((o for o in ins.operands if o.kind == "vec"), None)
        packed = ins.has("pack::16b") or ins.has("unpack::16b")
        if vec is not None and not packed and len(vec.items) != _LD_REGS[shape] * num:
            ctx.add("ld-st-shape", "P20", "error", ins,
                    f".{shape}.x{num} moves {_LD_REGS[shape] * num} registers per thread but the vector has "
                    f"{len(vec.items)}")
        addr = next((o for o in ins.operands if o.kind == "addr"), None)
        ref = _tmem_ref(ctx, addr) if addr is not None else None
        if ref is None:
            continue
        sym, lane, col = ref
        lanes, cols_per = _LD_SHAPE_COLS[shape]
        if lane % 32 + lanes > 32:
            ctx.add("lane-quarter", "P8", "error", ins,
                    f"{ins.opcode} .{shape} at lane {lane} spans lanes {lane}..{lane + lanes - 1}, crossing a "
                    "32-lane quarter: a warp can only access the lane quarter (warp_id % 4) * 32 .. +31")
        ncols = cols_per * num
        alloc = ctx.alloc_cols.get(sym)
        if alloc is not None and col + ncols > alloc:
            ctx.add("tmem-out-of-bounds", "P4", "error", ins,
                    f"{ins.opcode} touches columns {col}..{col + ncols - 1} but the allocation (line "
                    f"{sym.split('@')[1]}) has {alloc} columns", related=int(sym.split("@")[1]))


def _decode_mma(ctx: Ctx, ins: Instruction):
    kind = ins.modifier_value("kind")
    if kind is None or len(ins.operands) < 4:
        return None
    v = ctx.resolver.operand(ins.operands[3], 32)
    if v is None:
        return None
    val, mask = v.known_bits(32)
    if mask == 0:
        return None
    try:
        return decode_idesc(val, kind, mask)
    except ValueError:
        return None


def check_mma(ctx: Ctx) -> None:
    """P19 (idesc/sdesc legal for the kind and the instruction), D tile inside the allocation."""
    for ins in ctx.func.find("tcgen05.mma"):
        kind = ins.modifier_value("kind")
        cg = cta_group_of(ins) or 1
        if kind is None:
            ctx.add("mma-kind", "P19", "error", ins, "tcgen05.mma without .kind")
            continue
        scale_vec = next((m for m in ins.modifiers if m.startswith("scale_vec::") or m in ("block16", "block32")),
                         None)
        if kind not in BLOCK_SCALED and (scale_vec or ins.has("block_scale")):
            ctx.add("idesc-kind", "P19", "error", ins, f".block_scale/.scale_vec used with kind::{kind}")
        if kind == "mxf4nvf4" and scale_vec is None:
            ctx.add("idesc-kind", "P19", "error", ins, "kind::mxf4nvf4 requires an explicit .scale_vec/.blockN")
        d = _decode_mma(ctx, ins)
        if d is None:
            continue
        sparse = ins.has("sp")
        ws = ins.has("ws")
        for msg in idesc_problems(d, cta_group=cg, scale_vec=scale_vec, sparse_inst=sparse, ws=ws,
                                  target_name=ctx.target):
            ctx.add("idesc-field", "P19", "error", ins, f"instruction descriptor 0x{d.value:08X} "
                    f"(kind::{kind}, cta_group::{cg}): {msg}")
        # shared-memory descriptors of A (unless A is in TMEM) and B
        for idx, name, major_bit in ((1, "A", "transpose_a"), (2, "B", "transpose_b")):
            op = ins.operands[idx]
            if op.kind != "reg":
                continue
            v = ctx.resolver.operand(op, 64)
            if v is None:
                continue
            val, mask = v.known_bits(64)
            if mask == 0:
                continue
            sd = decode_smem_desc(val, mask)
            for msg in smem_desc_problems(sd, ctx.target):
                ctx.add("smem-desc-field", "P19", "error", ins, f"{name} shared-memory descriptor: {msg}")
            sw = sd.swizzle
            mj = d.fields.get(major_bit)
            ty = d.a_type if name == "A" else d.b_type
            if sw is not None and mj is not None:
                if mj == 0 and sw == "128B_base32B":
                    ctx.add("smem-desc-swizzle", "P19", "error", ins,
                            f"{name} is K-major but its descriptor uses 128B swizzle with 32B atomicity "
                            "(only valid for MN-major)")
                if mj == 1 and ty == "tf32" and sw != "128B_base32B":
                    ctx.add("smem-desc-swizzle", "P19", "error", ins,
                            f"tf32 {name} is MN-major: only 128B swizzle with 32B atomicity supports it, "
                            f"descriptor has {sw}")
                if mj == 1 and FORMAT_BITS.get(ty or "", 0) in (8, 16) and sw == "128B_base32B":
                    ctx.add("smem-desc-swizzle", "P19", "error", ins,
                            f"8/16-bit MN-major {name} cannot use 128B swizzle with 32B atomicity")
        # D tile inside the allocation
        ref = _tmem_ref(ctx, ins.operands[0])
        if ref is not None and d.m is not None and d.n is not None:
            sym, lane, col = ref
            need = d_tile_columns(d.m, d.n, cg, ws)
            alloc = ctx.alloc_cols.get(sym)
            if alloc is not None and col + need > alloc:
                ctx.add("mma-d-outside-alloc", "P4", "error", ins,
                        f"MMA D tile (M={d.m}, N={d.n}, cta_group::{cg}) needs columns {col}..{col + need - 1} "
                        f"but the allocation (line {sym.split('@')[1]}) has {alloc} columns",
                        related=int(sym.split("@")[1]))
            if lane not in (0, 16) or (lane == 16 and not (d.m == 64 and cg == 1)):
                ctx.add("mma-d-lane", "P19", "error", ins,
                        f"MMA D address has lane {lane}: D must start at lane 0 (or 16 for M=64 layout F)")


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

    run_dataflow(ctx, frozenset(), step, _union)


def ld_wait_hazards(ctx: Ctx) -> tuple[list[LdHazard], list[tuple[Instruction, Instruction]]]:
    """P9 analysis: (register reads before tcgen05.wait::ld, (tcgen05.mma, ld) pairs where an MMA follows an
    un-waited ld). Shared by the check and by the `insert-tcgen05-wait-ld` pass, which repairs the reads."""
    reads: list[LdHazard] = []
    mmas: list[tuple[Instruction, Instruction]] = []
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
            if ins.opcode == "tcgen05.mma" and (ins.index, None) not in seen:
                seen.add((ins.index, None))
                mmas.append((ins, ctx.func.instructions[min(ld for _, ld in pending)]))
        return frozenset(p for p in pending if p[0] not in ins.defs) if ins.defs else pending

    _until_wait(ctx, "tcgen05.ld", "ld", on_ld, on_pending)
    reads.sort(key=lambda h: (h.read.index, h.reg))
    return reads, mmas


def check_ld_wait(ctx: Ctx) -> None:
    """P9: registers written by tcgen05.ld are used only after tcgen05.wait::ld."""
    reads, mmas = ld_wait_hazards(ctx)
    for h in reads:
        ctx.add("ld-without-wait", "P9", "error", h.read,
                f"{h.reg} is read before tcgen05.wait::ld: tcgen05.ld is asynchronous and its destination "
                "registers are only valid after tcgen05.wait::ld.sync.aligned (the insert-tcgen05-wait-ld pass "
                "repairs this in bwtriton.compile)", related=h.ld.line)
    for mma, _ in mmas:
        ctx.add("ld-without-wait", "P9", "warning", mma,
                "tcgen05.mma may race ahead of an earlier tcgen05.ld that was not waited for "
                "(tcgen05.wait::ld missing)")


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


def check_accumulator_sync(ctx: Ctx) -> None:
    """P11/P12: tcgen05.ld of an MMA result only after commit -> mbarrier wait; every MMA committed."""
    mmas = ctx.func.find("tcgen05.mma")
    if not mmas:
        return
    d_ref = {m.index: _tmem_ref(ctx, m.operands[0]) for m in mmas}
    d_reg = {m.index: m.operands[0].base.name if m.operands[0].base is not None else None for m in mmas}
    d_cols: dict[int, Optional[int]] = {}
    for m in mmas:
        dd = _decode_mma(ctx, m)
        d_cols[m.index] = d_tile_columns(dd.m, dd.n, cta_group_of(m) or 1, m.has("ws")) \
            if dd is not None and dd.m and dd.n else None
    saw_fence = bool(ctx.func.find("tcgen05.fence"))

    # state: frozenset of (mma index, "U" uncommitted | "C" committed, not yet waited)
    def step(st, ins, emit):
        if ins.opcode == "tcgen05.mma":
            return frozenset(x for x in st if x[0] != ins.index) | {(ins.index, "U")}
        if ins.opcode == "tcgen05.commit":
            return frozenset((i, "C") for i, _ in st)
        if _is_mbarrier_wait(ins):
            return frozenset(x for x in st if x[1] == "U")
        if ins.opcode == "tcgen05.ld" and st and emit:
            addr = next((o for o in ins.operands if o.kind == "addr"), None)
            ref = _tmem_ref(ctx, addr) if addr is not None else None
            shape, num = _shape_num(ins)
            for mi, status in sorted(st):
                mref, overlap = d_ref.get(mi), None
                if ref is not None and mref is not None and ref[0] == mref[0]:
                    ld_cols = _LD_SHAPE_COLS.get(shape or "", (0, 1))[1] * (num or 1)
                    dc = d_cols.get(mi)
                    overlap = dc is None or (ref[2] < mref[2] + dc and mref[2] < ref[2] + ld_cols)
                elif addr is not None and addr.base is not None and addr.base.name == d_reg.get(mi):
                    overlap = True
                what = "committed but not waited for" if status == "C" else "not committed"
                mline = next(m.line for m in mmas if m.index == mi)
                if overlap:
                    ctx.add("acc-read-unsynced", "P11", "error", ins,
                            f"tcgen05.ld reads the accumulator of the MMA at line {mline}, which is {what} on some "
                            "path: issue tcgen05.commit to an mbarrier, wait on it, then "
                            "tcgen05.fence::after_thread_sync before reading", related=mline)
                elif overlap is None:
                    ctx.add("acc-read-unsynced", "P11", "warning", ins,
                            f"tcgen05.ld while the MMA at line {mline} is {what} (TMEM regions could not be "
                            "compared statically)", related=mline)
        return st

    def on_exit(st, block):
        for mi, status in sorted(st):
            if status == "U":
                m = next(x for x in mmas if x.index == mi)
                ctx.add("mma-uncommitted", "P12", "warning", m,
                        "this MMA can reach the kernel exit without a tcgen05.commit tracking it; nothing can "
                        "wait for its completion")

    run_dataflow(ctx, frozenset(), step, _union, on_exit)
    if ctx.func.find("tcgen05.ld") and not saw_fence:
        first = ctx.func.find("tcgen05.ld")[0]
        ctx.add("missing-after-thread-sync", "P11", "note", first,
                "no tcgen05.fence::after_thread_sync in this kernel: the PTX canonical pattern is commit -> "
                "mbarrier wait -> tcgen05.fence::after_thread_sync -> tcgen05.ld (Triton 3.6 relies on the "
                "mbarrier wait alone)")


def _desc_smem_address(ctx: Ctx, op) -> Optional[AbsVal]:
    """Follow a descriptor register back (or/add/cvt/bfe/shr/and/mov) to the smem address it encodes."""
    r = ctx.resolver
    cur = op
    for _ in range(12):
        if cur is None or cur.kind != "reg":
            return None
        v = r.operand(cur)
        if v is not None and v.base is not None and v.base_max is not None:
            return v  # an address relative to a shared-memory symbol
        defs = ctx.func.definitions(cur.name)
        if len(defs) != 1:
            return None
        d = defs[0]
        srcs = [o for o in d.operands[1:] if o.kind in ("reg", "sym")]
        if d.opcode in ("or", "add", "cvt", "bfe", "shr", "and", "mov", "cvta") and srcs:
            nonconst = [o for o in srcs if (r.operand(o) or AbsVal(None, 0, 1)).exact is None]
            if len(nonconst) != 1:
                return None
            cur = nonconst[0]
            if cur.kind == "sym":
                return r.operand(cur)
            continue
        return None
    return None


# Upper bound of the bytes one MMA reads from an operand's start address: 256 rows x 128-byte swizzle rows.
_MMA_OPERAND_EXTENT = 256 * 128


def _smem_reads(ctx: Ctx, ins: Instruction) -> Optional[list[tuple[AbsVal, int, int]]]:
    """(start address, exact extent, upper-bound extent) of each smem operand an MMA/cp reads; None if unknown.

    K-major swizzled operands span rows/8 * SBO bytes exactly; otherwise only a generous bound is known."""
    idxs = (1, 2) if ins.opcode == "tcgen05.mma" else (1,)
    d = _decode_mma(ctx, ins) if ins.opcode == "tcgen05.mma" else None
    out = []
    for i in idxs:
        if i >= len(ins.operands) or ins.operands[i].kind == "addr":
            continue  # A from TMEM
        v = _desc_smem_address(ctx, ins.operands[i])
        if v is None:
            return None
        dv = ctx.resolver.operand(ins.operands[i], 64)
        sd = decode_smem_desc(*dv.known_bits(64)) if dv is not None else None
        rows = None
        if d is not None:
            rows = d.m if i == 1 else d.n
        sbo, lbo = (sd.sbo, sd.lbo) if sd is not None else (None, None)
        major = d.fields.get("transpose_a" if i == 1 else "transpose_b") if d is not None else None
        if rows and sbo and major == 0 and sd.swizzle not in (None, "none"):
            exact = upper = -(-rows // 8) * sbo
        else:
            exact = 16
            upper = max(_MMA_OPERAND_EXTENT, (-(-(rows or 256) // 8) + 2) * max(sbo or 0, lbo or 0, 1024))
        out.append((v, exact, upper))
    if ins.opcode == "tcgen05.cp":
        out = [(v, 16, 128 * 32) for v, _, _ in out]
    return out


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
        u = _union(states)
        fwd = {ln for t, ln in u if t == "fwd"}
        return frozenset((t, ln) for t, ln in u if t == "fwd" or ln not in fwd)

    def edge(u, v, st):
        if (u, v) in backs and st:
            return frozenset(("loop", ln) for _, ln in st)
        return st

    run_dataflow(ctx, frozenset(), step, join, None, edge)


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

    run_dataflow(ctx, frozenset(), step, _union)


ALL_CHECKS: tuple[Callable[[Ctx], None], ...] = (
    check_cta_group, check_cluster, check_sync_aligned, check_single_thread_issue, check_alloc_columns,
    check_alloc_lifetime, check_ld_st_shapes, check_mma, check_ld_wait, check_st_wait, check_accumulator_sync,
    check_proxy_fence, check_alloc_result_barrier,
)
