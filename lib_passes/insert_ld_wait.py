"""PTX-stage pass `insert-tcgen05-wait-ld`: put `tcgen05.wait::ld` before reads of tcgen05.ld results.

Why: Triton 3.6 emits `tcgen05.ld` and `tcgen05.wait::ld` as separate inline-asm statements, and LLVM is free to
schedule ordinary instructions between them. With several accumulators it hoists the 64-bit packing of the
loaded registers (`cvt.u64.u32`, `shl.b64`, `or.b64`) above the wait. The PTX ISA says "an intra-thread
ordering through true register dependency will be respected regardless of the presence or absence of other forms
of synchronization", and upstream's B200-tested kernels read early, so the verifier (rule P9) reports such reads
as notes, not errors. This pass is optional hardening (on by default, `-insert-tcgen05-wait-ld` turns it off):
it makes the PTX follow CUTLASS's always-wait convention. See docs/verifier.md, rule P9.

How: the verifier's P9 dataflow (`bwtriton.verify.find_ld_wait_hazards`) lists every read that can happen
before a wait. For each tcgen05.ld with such a read, a `tcgen05.wait::ld.sync.aligned;` goes

1. immediately before the first read after the ld in the ld's own basic block (straight-line code after a
   `.sync.aligned` ld: the warp is still converged, as `.sync.aligned` requires), else
2. at the end of the ld's block, before its terminator (the reads are in other blocks), else
3. nowhere: the hazard is left to the verifier (reported under "left_to_verifier").

Moving a wait earlier is always correct: it only shortens the overlap of the load with other work. The PTX is
edited by line, so everything the pass does not touch stays byte-identical; a kernel without hazards is
returned unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass

from bwtriton.passes.base import Pass, PassContext, Stage, register_pass
from bwtriton.ptx import parse_ptx

WAIT_LD = "tcgen05.wait::ld.sync.aligned;"


@dataclass(frozen=True)
class _Insertion:
    before_line: int      # 1-based line of the original PTX the wait goes in front of (0: after `after_line`)
    after_line: int       # used when the block has no terminator: the wait follows this line
    ld_line: int
    read_line: int        # first read the wait protects (0 when the reads are in other blocks)
    placement: str        # "before-first-read" | "end-of-block"
    function: str


def _statement_alone_on_line(func, ins, lines: list[str]) -> bool:
    """True when `ins` is the only statement on its line and the line starts with it (no `{`/label before)."""
    same = [s for s in func.statements if getattr(s, "line", None) == ins.line]
    return len(same) == 1 and lines[ins.line - 1].lstrip().startswith(ins.text.split()[0])


_TERMINATORS = ("bra", "brx", "ret", "exit", "trap")


def _place_wait(func, ld, lines: list[str]):
    """(placement, anchor instruction, lds the wait covers) for one hazardous tcgen05.ld; None when the block
    already waits after the ld, ("left", ...) when no legal spot exists."""
    block = func.blocks[ld.block].instructions
    pending = set(ld.defs)
    covered = {ld.index}
    for ins in block[block.index(ld) + 1:]:
        if ins.opcode == "tcgen05.wait" and ins.has("ld"):
            return None
        if ins.opcode == "tcgen05.ld":
            pending |= set(ins.defs)
            covered.add(ins.index)
            continue
        if pending.intersection(ins.uses):
            ok = _statement_alone_on_line(func, ins, lines)
            return ("before-first-read" if ok else "left", ins, covered)
        pending -= set(ins.defs)
    last = block[-1]
    ok = _statement_alone_on_line(func, last, lines)
    if last.opcode in _TERMINATORS:
        return ("end-of-block" if ok and last is not ld else "left", last, covered)
    return ("end-of-block-after" if ok else "left", last, covered)   # block falls through: wait after it


def plan_insertions(module, lines: list[str], hazards: dict) -> tuple[list[_Insertion], list[dict]]:
    """Where to put waits for the P9 `hazards` of `module` (parsed from `lines`); and what cannot be fixed."""
    plan: list[_Insertion] = []
    left: list[dict] = []
    for func in module.functions:
        found = hazards.get(func.name) or []
        handled: set[int] = set()
        for ld_index in sorted({h.ld.index for h in found}):
            if ld_index in handled:
                continue  # a wait planned for an earlier ld of the block covers this one too
            ld = func.instructions[ld_index]
            spot = _place_wait(func, ld, lines)
            if spot is None:
                continue
            placement, anchor, covered = spot
            if placement == "left":
                left.append({"function": func.name, "ld_line": ld.line,
                             "read_lines": sorted({h.read.line for h in found if h.ld.index == ld_index})})
                continue
            handled |= covered
            after = placement == "end-of-block-after"
            plan.append(_Insertion(0 if after else anchor.line, anchor.line if after else 0, ld.line,
                                   anchor.line if placement == "before-first-read" else 0,
                                   "end-of-block" if after else placement, func.name))
    return plan, left


def apply_insertions(text: str, plan: list[_Insertion]) -> tuple[str, dict[int, int]]:
    """Insert the waits; returns the new text and original anchor line -> line of the inserted wait.
    Lines are counted on "\n" only, as the parser counts them."""
    lines = text.split("\n")
    before = {p.before_line for p in plan if p.before_line}
    after = {p.after_line for p in plan if p.after_line}
    out: list[str] = []
    where: dict[int, int] = {}
    for n, line in enumerate(lines, 1):
        indent = line[:len(line) - len(line.lstrip())]
        if n in before:
            out.append(indent + WAIT_LD)
            where[n] = len(out)
        out.append(line)
        if n in after:
            out.append(indent + WAIT_LD)
            where[n] = len(out)
    return "\n".join(out), where


@register_pass
class InsertTcgen05WaitLd(Pass):
    name = "insert-tcgen05-wait-ld"
    stage = Stage.PTX
    purpose = "insert tcgen05.wait::ld before tcgen05.ld results are read (LLVM hoists reads above the wait)"
    default_enabled = True

    def applies_to(self, target) -> bool:
        return bool(target.has_tcgen05)

    def run(self, ir: str, ctx: PassContext):
        from bwtriton.verify import find_ld_wait_hazards  # heavy: the verifier imports z3

        if "tcgen05.ld" not in ir:
            ctx.report.update(inserted=[], count=0)
            return None
        module = parse_ptx(ir)
        hazards = find_ld_wait_hazards(module, ctx.target.name)
        plan, left = plan_insertions(module, ir.split("\n"), hazards)
        ctx.report["count"] = len(plan)
        if left:
            ctx.report["left_to_verifier"] = left
            ctx.warn(f"{len(left)} tcgen05.ld result(s) read before tcgen05.wait::ld could not be repaired "
                     "(no legal place in the ld's basic block); verify-tcgen05 reports them")
        if not plan:
            ctx.report["inserted"] = []
            return None
        text, where = apply_insertions(ir, plan)
        ctx.report["inserted"] = [
            {"function": p.function, "line": where[p.before_line or p.after_line], "ld_line": p.ld_line,
             "first_read_line": p.read_line or None, "placement": p.placement} for p in plan]
        return text
