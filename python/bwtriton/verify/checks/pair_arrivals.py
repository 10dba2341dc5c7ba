"""T4 across a cluster: the bytes each CTA's barrier expects are the bytes the TMAs routed to it deliver.

A TMA barrier's phase completes when its pending arrivals are in and its transaction count, raised by
`expect_tx`, is back to zero; each `cp.async.bulk.tensor ... mbarrier::complete_tx::bytes [bar]` brings it down
by the bytes of its box in the CTA that owns `bar` (PTX ISA #parallel-synchronization-and-communication-
instructions-mbarrier-tracking-async-operations). In a cluster, `mapa.shared::cluster` names a barrier of
another CTA, and `.cta_group::2` lets a TMA complete on the peer's barrier (#data-movement-and-conversion-
instructions-cp-async-bulk-tensor). The 2-CTA hand-off sends both CTAs' bytes to the leader (rank & ~1),
which expects both halves, and the peer expects 0; a TMA left on its own CTA's barrier (no `mapa`) makes the
leader wait for bytes that never come and the peer's count go below zero.

The box sizes are in the tensor map, not in the PTX, but every CTA of the cluster runs the same instructions
with the same tensor maps, so instruction t delivers the same bytes x_t > 0 whichever CTA issues it. Per
barrier (the register holding the local address) and per rank r of the cluster this gives a linear equation:
the `expect_tx` counts posted in rank r (each evaluated for that rank, e.g. `selp 2n, 0, rank is even`) equal
the x_t of the TMAs, issued by any rank, whose barrier resolves to rank r. z3 finds no positive solution: error.
Decided only where nothing depends on the rank except values (the TMAs and expects are issued by every rank:
guards and branches are rank-independent, the tensor maps too), each TMA's barrier is the local register or its
`mapa` to a rank computable per rank, and no TMA is multicast. TMAs and expects on registers that may hold the
same address join the equations as optional terms (>= 0), so aliasing never makes an error.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bwtriton.ptx.ir import Function, Instruction, Operand
from bwtriton.ptx.smt import z3

from .async_copy import is_tma_load, same_address
from .context import Ctx

#: special registers whose value is the same in every CTA of a cluster
_UNIFORM_SREGS = ("%tid", "%ntid", "%laneid", "%warpid", "%nwarpid", "%nctaid", "%clusterid", "%nclusterid",
                  "%cluster_nctarank", "%cluster_nctaid", "%lanemask")
#: results that may differ per CTA whatever their operands (memory, TMEM); a parameter load is uniform
_LOADS = ("ld", "ldu", "atom", "tcgen05.ld")
_MAX_RANKS = 16
_MASK = 0xFFFFFFFF


def _rank_dependent(func: Function) -> set[str]:
    """Registers whose value may differ between the CTAs of a cluster (flow-insensitive): anything computed from
    the CTA rank or CTA id, loaded from memory, or defined under such a guard."""
    tainted: set[str] = set()
    changed = True
    while changed:
        changed = False
        for ins in func.instructions:
            if not ins.defs or set(ins.defs) <= tainted:
                continue
            dep = (ins.opcode in _LOADS and not ins.has("param")) or \
                (ins.guard is not None and ins.guard.reg in tainted) or \
                any(r in tainted for o in ins.operands[1:] for r in o.regs()) or \
                any(o.kind == "sreg" and not (o.name or "").startswith(_UNIFORM_SREGS) for o in ins.operands)
            if dep:
                tainted |= set(ins.defs)
                changed = True
    return tainted


def _reaching_def(func: Function, reg: str, at: Instruction) -> Optional[Instruction]:
    """The definition of `reg` that `at` reads: its only one, or the last one before `at` in `at`'s block."""
    defs = func.definitions(reg)
    if len(defs) == 1:
        return defs[0]
    for ins in reversed(func.blocks[at.block].instructions):
        if ins.index < at.index and reg in ins.defs:
            return ins if ins.guard is None else None
    return None


def _value(func: Function, op: Operand, rank: int, at: Instruction, depth: int = 0):
    """The integer (or bool) value of `op` read at `at` in the CTA of cluster rank `rank`, or None."""
    if op.kind == "imm" and isinstance(op.value, int):
        return op.value & _MASK
    if op.kind == "sreg":
        return rank if op.name == "%cluster_ctarank" else None
    if op.kind != "reg" or depth > 12:
        return None
    d = _reaching_def(func, op.name, at)
    if d is None or d.guard is not None:
        return None
    vals = [_value(func, o, rank, d, depth + 1) for o in d.operands[1:]]
    if None in vals:
        return None
    return _apply(d, vals)


def _apply(d: Instruction, vals: list):
    op = d.opcode
    if op == "mov" and len(vals) == 1:
        return vals[0]
    if op == "selp" and len(vals) == 3:
        return vals[0] if vals[2] else vals[1]
    if op == "setp" and len(vals) == 2:
        a, b = vals
        if any(t.startswith("s") for t in d.types):
            a, b = (v - (1 << 32) if v & 0x80000000 else v for v in (a, b))
        rel = next((m for m in d.modifiers if m in _REL), None)
        return None if rel is None else _REL[rel](a, b)
    if len(vals) == 2 and op in _BIN:
        return _BIN[op](vals[0], vals[1]) & _MASK
    return None


_REL = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
        "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "lo": lambda a, b: a < b, "ls": lambda a, b: a <= b,
        "hi": lambda a, b: a > b, "hs": lambda a, b: a >= b}
_BIN = {"and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b, "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "shl": lambda a, b: a << (b & 31),
        "shr": lambda a, b: a >> (b & 31)}


def _barrier(func: Function, tma: Instruction, rank: int) -> Optional[tuple[int, str, int]]:
    """(rank owning the barrier, local address register, offset) of the TMA's mbarrier operand, issued in
    `rank`: the operand register itself, a `mov` of another, or a `mapa` of one to a computable rank."""
    addr = tma.operands[-1]
    if addr.kind != "addr" or addr.base is None or addr.base.kind != "reg":
        return None
    reg, at = addr.base.name, tma
    for _ in range(4):
        d = _reaching_def(func, reg, at)
        if d is None:
            return None   # several definitions reach it: which CTA it names is not known
        if d.opcode not in ("mov", "mapa") or d.operands[1].kind != "reg":
            return rank, reg, addr.offset
        if d.opcode == "mapa":
            target = _value(func, d.operands[2], rank, d)
            return None if target is None else (target, d.operands[1].name, addr.offset)
        reg, at = d.operands[1].name, d
    return None


def _derived_from_mapa(func: Function) -> set[str]:
    out: set[str] = set()
    changed = True
    while changed:
        changed = False
        for ins in func.instructions:
            if ins.defs and not set(ins.defs) <= out and (
                    ins.opcode == "mapa" or any(r in out for o in ins.operands[1:] for r in o.regs())):
                out |= set(ins.defs)
                changed = True
    return out


def _rank_uniform_blocks(func: Function, tainted: set[str]) -> Optional[set[int]]:
    """Blocks every rank runs alike: not decided by a branch on a rank-dependent predicate (a block is under
    such a branch when one successor reaches it without passing the branch again and the other does not).
    None when a rank-dependent exit or indirect branch makes the question moot."""
    branches = []
    for b in func.blocks:
        last = b.instructions[-1] if b.instructions else None
        if last is None:
            continue
        dep = last.guard is not None and last.guard.reg in tainted
        if last.opcode in ("brx", "brx.idx") and any(r in tainted for o in last.operands for r in o.regs()):
            return None
        if dep and last.opcode in ("ret", "exit", "trap"):
            return None
        if dep and last.opcode == "bra" and len(b.succs) == 2:
            branches.append(b)
    out = set(range(len(func.blocks)))
    for u in branches:
        reach = [_reachable(func, s, u.id) for s in u.succs]
        out -= reach[0] ^ reach[1]
    return out


def _reachable(func: Function, start: int, avoid: int) -> set[int]:
    seen, todo = set(), [start]
    while todo:
        b = todo.pop()
        if b in seen or b == avoid:
            continue
        seen.add(b)
        todo.extend(func.blocks[b].succs)
    return seen


def _is_expect(ins: Instruction) -> bool:
    return ins.opcode in ("mbarrier.arrive", "mbarrier.expect_tx") and \
        (ins.has("expect_tx") or ins.opcode == "mbarrier.expect_tx")


def _local(ins: Instruction) -> Optional[tuple[str, int]]:
    addr = next((o for o in ins.operands if o.kind == "addr"), None)
    if addr is None or addr.base is None or addr.base.kind != "reg":
        return None
    return addr.base.name, addr.offset


@dataclass
class _Cluster:
    """What the equations of every barrier of one function share."""

    ctx: Ctx
    ranks: int
    tmas: list[Instruction]
    expects: list[Instruction]
    tainted: set[str]
    uniform: set[int]
    #: TMA index -> per issuing rank, (rank owning the barrier, local register, offset) or None
    routes: dict[int, list]


def check_pair_tx_balance(ctx: Ctx) -> None:
    """T4 in a cluster: per barrier and CTA rank, the expected transaction bytes can equal the bytes of the
    TMAs that complete there (see the module docstring)."""
    func = ctx.func
    ranks = func.cluster_size
    tmas = [i for i in func.instructions if is_tma_load(i)]
    expects = [i for i in func.instructions if _is_expect(i)]
    if z3 is None or not ranks or ranks < 2 or ranks > _MAX_RANKS or not tmas or not expects:
        return
    if any(i.opcode == "mbarrier.complete_tx" for i in func.instructions):
        return   # bytes completed by hand: not counted here
    tainted = _rank_dependent(func)
    uniform = _rank_uniform_blocks(func, tainted)
    if uniform is None:
        return
    cl = _Cluster(ctx, ranks, tmas, expects, tainted, uniform,
                  {t.index: [_barrier(func, t, r) for r in range(ranks)] for t in tmas})
    from_mapa = _derived_from_mapa(func)
    groups: dict[tuple[str, int], list[Instruction]] = {}
    for e in expects:
        key = _local(e)
        if key is not None:
            groups.setdefault(key, []).append(e)
    for key, exp in groups.items():
        if len(func.definitions(key[0])) != 1 or key[0] in from_mapa:
            continue   # a barrier register redefined (loop-carried) or itself remote: not compared
        members = [t for t in tmas if all(rt is not None and rt[1:] == key for rt in cl.routes[t.index])]
        if members:
            _decide(cl, key, exp, members)


def _maybe_same(ctx: Ctx, key: tuple[str, int], other: Optional[tuple[str, int]]) -> bool:
    if other is None or other == key:
        return True
    a, b = (Operand("addr", f"[{r}+{o}]", base=Operand("reg", r, name=r), offset=o) for r, o in (key, other))
    return same_address(ctx, a, b) is not False


def _issued_alike(cl: _Cluster, ins: Instruction) -> bool:
    """Every rank issues `ins` alike: a rank-uniform block, a rank-independent guard and (a TMA) the same bytes:
    a rank-independent tensor map, or size for a non-tensor bulk copy, and one destination CTA."""
    if ins.block not in cl.uniform or (ins.guard is not None and ins.guard.reg in cl.tainted):
        return False
    if not is_tma_load(ins):
        return True
    # the tensor map (not the coordinates, which differ per CTA) or the byte count fixes the bytes delivered
    src = ins.operands[1].base if ins.opcode == "cp.async.bulk.tensor" else ins.operands[2]
    return src is not None and not ins.has("multicast::cluster") and all(r not in cl.tainted for r in src.regs())


def _decide(cl: _Cluster, key: tuple[str, int], exp: list[Instruction], members: list[Instruction]) -> None:
    """Build the per-rank equations of one barrier and report when z3 finds them without a solution. TMAs and
    expects that may be on the same barrier through another register are optional terms (>= 0)."""
    ctx = cl.ctx
    opt_t = [t for t in cl.tmas if t not in members and
             any(rt is None or _maybe_same(ctx, key, rt[1:]) for rt in cl.routes[t.index])]
    opt_e = [e for e in cl.expects if e not in exp and _maybe_same(ctx, key, _local(e))]
    terms, posts = members + opt_t, exp + opt_e
    if not all(_issued_alike(cl, i) for i in terms + posts) or \
            any(rt is None for t in terms for rt in cl.routes[t.index]):
        return
    counts = {}
    for e in posts:
        tx = e.operands[-1]
        vals = [_value(ctx.func, tx, r, e) for r in range(cl.ranks)]
        if None in vals and any(reg in cl.tainted for reg in tx.regs()):
            return
        counts[e.index] = None if None in vals else vals   # None: one unknown count, the same in every rank
    x = {t.index: z3.Int(f"x{t.index}") for t in terms}
    m = {e.index: z3.Int(f"m{e.index}") for e in posts}
    s = z3.Solver()
    s.set("timeout", 1000)
    s.add(*[v >= 0 for v in (*x.values(), *m.values())], z3.Sum([x[t.index] for t in members]) >= 1)
    for r in range(cl.ranks):
        expected = z3.Sum([m[i] * (v[r] if v is not None else 1) for i, v in counts.items()] + [z3.IntVal(0)])
        got = z3.Sum([x[t.index] for t in terms for rt in cl.routes[t.index] if rt[0] == r] + [z3.IntVal(0)])
        s.add(expected == got)
    if s.check() == z3.unsat:
        ctx.add("tma-bytes-unbalanced", "T4", "error", members[0],
                _message(exp, members, cl.routes, counts, cl.ranks), related=exp[0].line)


def _message(exp: list[Instruction], members: list[Instruction], routes: dict, counts: dict, ranks: int) -> str:
    parts = []
    for r in range(ranks):
        posted = sorted({counts[e.index][r] for e in exp if counts.get(e.index) is not None})
        sources = sorted({src for t in members for src, rt in enumerate(routes[t.index]) if rt[0] == r})
        parts.append(f"CTA rank {r} expects {' or '.join(map(str, posted)) or 'some'} bytes and receives the TMAs "
                     f"of rank(s) {', '.join(map(str, sources)) or 'none'}")
    return (f"the TMAs completing on this mbarrier (expect_tx at line {exp[0].line}) cannot bring its "
            f"transaction count to zero in every CTA of the cluster: {'; '.join(parts)}. Every CTA issues these "
            "TMAs with the same tensor maps, so no box sizes balance this; in the 2-CTA hand-off each CTA's TMA "
            "completes on the leader's barrier (mapa.shared::cluster to rank & ~1), whose expect_tx counts both "
            "halves, and the peer expects 0")


__all__ = ["check_pair_tx_balance"]
