"""PTX-stage pass `insert-proxy-fence`: order generic-proxy shared-memory stores before the async-proxy reads of
tcgen05.mma / tcgen05.cp that the verifier proves racy (rule P15).

Why: Triton 3.6 places the `fence.proxy.async.shared::cta` for an MMA operand that a loop stores through
`st.shared` (a bf16 tile computed in registers and fed to the next `tl.dot` of the same iteration, with the
buffer allocated outside the loop) above the loop: the first iteration is fenced, every later one reads through
the async proxy bytes the generic proxy wrote with no fence in between, and the tensor core may see the previous
iteration's tile. Triton 3.7.1 and 3.9.0 emit the fence inside the loop; on their PTX this pass changes nothing.

How: `bwtriton.verify.checks.proxy_fence.proxy_fence_hazards` lists, per (store, reader) pair, what is missing on
some feasible path (the fence, or after a fence the CTA barrier that orders other warps' stores). Only proven
races are repaired (the write surely meets the operand bytes, no asynchronous copy refilled them, the path is
feasible); undecided ones stay warnings of the verifier. From the reader the pass walks back through its block
and then its dominators (every path to the reader passes them), stopping at the header of the innermost loop
around the reader, to the first of:

1. a CTA barrier (`bar.sync` / `barrier.sync`, unguarded): a missing fence goes right before it, so every thread
   fences its own stores and the barrier hands them to the issuing thread ("before-barrier");
2. an unguarded `fence.proxy.async` (the barrier is what is missing): `bar.sync 0;` goes right after it
   ("after-fence");
3. a generic shared-memory store, with no barrier between it and the reader: the fence (and in a CTA of more
   than one warp `bar.sync 0;` after it) goes right after that store ("after-store");
4. none of these, or no legal spot: nothing, the hazard is left to the verifier (reported under
   "left_to_verifier").

A fence already planned between the reader and the store covers it. The analysis then runs again on the
repaired text (a dominator's fence may precede a store on a side branch), up to `MAX_ROUNDS` times; what is
still proven racy is left to the verifier.

Inside a loop the walk stays inside the iteration, so the fence lands between the iteration's last store and its
MMA issue, where the proof needs it. The PTX is edited by line; everything else stays byte-identical, and a
kernel without proven hazards is returned unchanged. The report's lines (inserted statement, stores, readers) are
lines of the final PTX. See docs/verifier.md (P15) and docs/writing_passes.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bwtriton.passes.base import Pass, PassContext, Stage, register_pass
from bwtriton.ptx import parse_ptx
from bwtriton.ptx.cfg import back_edges

FENCE = "fence.proxy.async.shared::cta;"
BARRIER = "bar.sync 0;"
MAX_ROUNDS = 4


@dataclass(frozen=True)
class _Spot:
    """Text to insert next to line `line` of the original PTX (`after`: below it, else above it)."""

    line: int
    after: bool
    text: tuple[str, ...]
    placement: str


def _generic_store(ins) -> bool:
    from bwtriton.verify.checks.sync import _is_generic_smem_write  # heavy: the verifier imports z3
    return _is_generic_smem_write(ins)


def _alone_on_line(func, ins, lines: list[str]) -> bool:
    """`ins` is the only statement on its line and the line starts with it (no `{` or label in front)."""
    same = [s for s in func.statements if getattr(s, "line", None) == ins.line]
    return len(same) == 1 and lines[ins.line - 1].lstrip().startswith(ins.text.split()[0])


def immediate_dominators(func) -> dict[int, int]:
    """Block -> its immediate dominator (the entry block and unreachable blocks have none)."""
    n = len(func.blocks)
    everything = set(range(n))
    dom = {b: ({0} if b == 0 else everything) for b in range(n)}
    changed = True
    while changed:
        changed = False
        for b in range(1, n):
            preds = [p for p in func.blocks[b].preds if p in dom]
            new = {b} | set.intersection(*(dom[p] for p in preds)) if preds else {b}
            if new != dom[b]:
                dom[b], changed = new, True
    return {b: max(dom[b] - {b}, key=lambda d: len(dom[d])) for b in range(1, n) if dom[b] - {b}}


def _walk_back(func, reader, backs: set, idom: dict[int, int]):
    """The instructions on every path to `reader`, newest first: its block, then its dominators up to the header
    of the innermost loop around it (a repair must stay inside the iteration)."""
    headers = {v for _, v in backs}
    block = func.blocks[reader.block]
    body = block.instructions[:block.instructions.index(reader)]
    while True:
        yield from reversed(body)
        if block.id in headers or block.id not in idom:
            return
        block = func.blocks[idom[block.id]]
        body = block.instructions


def _is_bar_sync(ins) -> bool:
    return ins.opcode in ("bar", "barrier") and ins.guard is None and not ins.has("arrive") and not ins.has("red")


def place_repair(func, hazard, lines: list[str], backs: set, idom: dict[int, int], one_warp: bool,
                 planned: set) -> "Optional[_Spot] | str":
    """Where the repair of one proven hazard goes: a spot, "covered" when a fence already planned (`planned`: the
    spots chosen so far) sits between the reader and the store, or None (no legal spot on the reader's
    dominator path)."""
    from bwtriton.verify.checks.proxy_fence import is_proxy_fence  # heavy: the verifier imports z3
    fence_lines = {(s.line, s.after) for s in planned if FENCE in s.text}
    barrier: Optional[_Spot] = None
    for ins in _walk_back(func, hazard.reader, backs, idom):
        if hazard.missing == "fence" and ((ins.line, False) in fence_lines or (ins.line, True) in fence_lines):
            return "covered"
        if hazard.missing == "fence" and _is_bar_sync(ins) and barrier is None:
            if not _alone_on_line(func, ins, lines):
                return None
            barrier = _Spot(ins.line, False, (FENCE,), "before-barrier")
        if hazard.missing == "barrier" and is_proxy_fence(ins) and ins.guard is None:
            return _Spot(ins.line, True, (BARRIER,), "after-fence") if _alone_on_line(func, ins, lines) else None
        if _generic_store(ins):
            if barrier is not None:
                return barrier
            if ins.guard is not None or not _alone_on_line(func, ins, lines):
                return None
            text = (FENCE,) if hazard.missing == "fence" else ()
            text += () if one_warp else (BARRIER,)
            return _Spot(ins.line, True, text, "after-store") if text else None
    return barrier


def plan_repairs(module, text: str, target: str) -> tuple[list[tuple[str, _Spot, list]], list[dict]]:
    """(function, spot, hazards it repairs) for every proven P15 race of `module`; and the ones left alone."""
    from bwtriton.verify import function_contexts  # heavy: the verifier imports z3
    from bwtriton.verify.checks.context import threads_per_cta  # heavy: the verifier package imports z3
    from bwtriton.verify.checks.proxy_fence import proxy_fence_hazards  # heavy: the verifier imports z3

    lines = text.split("\n")
    plan: dict = {}
    left: list[dict] = []
    for ctx in function_contexts(module, target, drop_dead=True):
        proven = [h for h in proxy_fence_hazards(ctx) if h.proven]
        if not proven:
            continue
        backs = back_edges(ctx.func)
        idom = immediate_dominators(ctx.func)
        one_warp = threads_per_cta(ctx.func) <= 32
        for h in sorted(proven, key=lambda x: x.reader.index):   # earlier readers' fences may cover later ones
            spot = place_repair(ctx.func, h, lines, backs, idom, one_warp, {s for (f, s) in plan if f == ctx.func.name})
            if spot == "covered":
                continue
            if spot is None:
                left.append({"function": ctx.func.name, "store_line": h.write.line, "reader_line": h.reader.line,
                             "missing": h.missing})
                continue
            plan.setdefault((ctx.func.name, spot), []).append(h)
    return [(fn, spot, hs) for (fn, spot), hs in plan.items()], left


def apply_repairs(text: str, spots: list[_Spot]) -> tuple[str, dict[_Spot, int], list[int]]:
    """Insert the spots' statements (indented like their anchor line); returns the text, spot -> the line of
    its first inserted statement, and old line -> new line (index 0 unused). Lines are counted on "\\n" only, as
    the parser counts them."""
    lines = text.split("\n")
    before: dict[int, list[_Spot]] = {}
    after: dict[int, list[_Spot]] = {}
    for s in spots:
        (after if s.after else before).setdefault(s.line, []).append(s)
    out: list[str] = []
    where: dict[_Spot, int] = {}
    moved = [0]

    def emit(indent: str, group: list[_Spot]) -> None:
        done: set = set()
        for s in group:
            where[s] = len(out) + 1
            for stmt in s.text:
                if stmt not in done:   # one fence / barrier serves every spot of this line
                    out.append(indent + stmt)
                    done.add(stmt)

    for n, line in enumerate(lines, 1):
        indent = line[:len(line) - len(line.lstrip())]
        emit(indent, before.get(n, []))
        out.append(line)
        moved.append(len(out))
        emit(indent, after.get(n, []))
    return "\n".join(out), where, moved


@register_pass
class InsertProxyFence(Pass):
    name = "insert-proxy-fence"
    stage = Stage.PTX
    purpose = "insert fence.proxy.async (and the CTA barrier) where generic smem stores race an MMA's async read"
    default_enabled = True

    def applies_to(self, target) -> bool:
        return bool(target.has_tcgen05)

    def run(self, ir: str, ctx: PassContext):
        generic = ("st.shared", "stmatrix", "red.shared", "atom.shared")   # what the analysis counts as a store
        if "tcgen05.mma" not in ir and "tcgen05.cp" not in ir or not any(g in ir for g in generic):
            ctx.report.update(inserted=[], count=0)   # no async-proxy reader, or no generic store that could race
            return None
        text, inserted, left = ir, [], []
        for _ in range(MAX_ROUNDS):
            plan, left = plan_repairs(parse_ptx(text), text, ctx.target.name)
            if not plan:
                break
            text, where, moved = apply_repairs(text, [spot for _, spot, _ in plan])
            inserted = [_shift(e, moved) for e in inserted] + [
                {"function": fn, "line": where[spot], "statements": list(spot.text), "placement": spot.placement,
                 "store_lines": sorted({moved[h.write.line] for h in hs}),
                 "reader_lines": sorted({moved[h.reader.line] for h in hs}), "carried": any(h.carried for h in hs)}
                for fn, spot, hs in plan]
        else:
            _, left = plan_repairs(parse_ptx(text), text, ctx.target.name)
        if left:
            ctx.report["left_to_verifier"] = left
            ctx.warn(f"{len(left)} proven generic->async proxy race(s) could not be repaired (no legal spot on the "
                     "reader's dominator path); verify-tcgen05 reports them")
        ctx.report["count"] = len(inserted)
        ctx.report["inserted"] = sorted(inserted, key=lambda e: e["line"])
        return text if inserted else None


def _shift(entry: dict, moved: list[int]) -> dict:
    """An insertion reported by an earlier round, its lines moved by what a later round inserted above them."""
    return {**entry, "line": moved[entry["line"]], "store_lines": [moved[n] for n in entry["store_lines"]],
            "reader_lines": [moved[n] for n in entry["reader_lines"]]}
