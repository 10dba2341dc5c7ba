"""What every check works on: the per-function `Ctx`, and the operand helpers several check families share
(exact operand values, TMEM references, decoded MMA instruction descriptors, tcgen05.ld/st shapes)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from bwtriton.ptx.descriptors import InstrDesc, decode_idesc
from bwtriton.ptx.ir import Function, Instruction, Module
from bwtriton.ptx.smt import Facts
from bwtriton.ptx.thread_values import ThreadValueNumbering
from bwtriton.ptx.values import ValueNumbering, ValueResolver

from ..findings import Finding


@dataclass
class Ctx:
    """One function under verification: its value resolver, the TMEM allocations found, and the findings so far."""

    module: Module
    func: Function
    target: str
    resolver: ValueResolver
    findings: list[Finding] = field(default_factory=list)
    alloc_cols: dict[str, Optional[int]] = field(default_factory=dict)   # tmem symbol -> allocated columns
    _seen: set = field(default_factory=set)
    numbering: ValueNumbering = field(init=False)
    edge_facts: dict = field(default_factory=dict)   # (u, v) -> predicate facts of that CFG edge (cached)
    facts_oracle: Facts = field(default_factory=Facts)   # z3 feasibility of branch facts (cached per function)
    current_facts: frozenset = frozenset()   # branch facts of the path being replayed (run_dataflow)
    exact: bool = True   # False while a path check reports from a path not known to be feasible
    #: (block id, facts) -> how the facts evolve through the block and which guarded instructions they skip;
    #: the same for every path check of the function (run_dataflow), so computed once
    block_replay: dict = field(default_factory=dict)
    path_values: Optional[object] = None   # dataflow.PathValues of the function (built on first use)

    def __post_init__(self) -> None:
        self.numbering = ThreadValueNumbering(self.func)
        self.facts_oracle = Facts(ntid=threads_per_cta(self.func))

    def add(self, check: str, rule: str, severity: str, ins_or_line, message: str,
            related: Optional[int] = None) -> None:
        line = ins_or_line.line if isinstance(ins_or_line, Instruction) else int(ins_or_line)
        if severity == "error" and not self.exact:
            # soundness: an error needs a path known to be feasible; this one could not be decided
            severity = "warning"
            message += " [on a path the verifier could not prove feasible]"
        key = (check, line, message)
        if key in self._seen:
            return
        self._seen.add(key)
        self.findings.append(Finding(check, rule, severity, message, line, self.func.name, related))


def threads_per_cta(func: Function) -> int:
    """Threads of one CTA along x from `.reqntid` / `.maxntid` (1024, the hardware limit, when undeclared)."""
    dims = func.directives.get("reqntid") or func.directives.get("maxntid")
    return int(dims[0]) if dims else 1024


def cta_group_of(ins: Instruction) -> Optional[int]:
    """The `.cta_group::N` of a tcgen05 instruction, or None when it has none."""
    v = ins.modifier_value("cta_group")
    return int(v) if v and v.isdigit() else None


def exact_operand(ctx: Ctx, ins: Instruction, idx: int, width: int = 32) -> Optional[int]:
    """The statically known value of operand `idx` of `ins`, or None when it is not known exactly."""
    if idx >= len(ins.operands):
        return None
    v = ctx.resolver.operand(ins.operands[idx], width)
    return None if v is None else v.exact


def tmem_ref(ctx: Ctx, op) -> Optional[tuple[str, int, int]]:
    """(tmem symbol, lane, column) of a TMEM address operand that is alloc-base + offset with a known column.

    The lane may vary per warp (Triton adds (warp % 4) * 32 << 16): then the lowest lane is returned, which
    is what lane-quarter alignment needs, and the column is still exact when the stride is a multiple of 1<<16."""
    v = ctx.resolver.address(op) if op.kind == "addr" else ctx.resolver.operand(op)
    if v is None or v.base is None or not v.base.startswith("tmem@") or v.lo < 0:
        return None
    if v.lo != v.hi and v.stride % (1 << 16):
        return None
    return v.base, (v.lo >> 16) & 0xFFFF, v.lo & 0xFFFF


#: tcgen05.ld/st shape -> (lanes, columns per .num)
LD_SHAPE_COLS = {"32x32b": (32, 1), "16x64b": (16, 2), "16x128b": (16, 4), "16x256b": (16, 8),
                 "16x32bx2": (16, 1)}


def ld_shape_num(ins: Instruction) -> tuple[Optional[str], Optional[int]]:
    """(shape, .num) of a tcgen05.ld/st, e.g. ('32x32b', 16); None for what it does not carry."""
    shape = next((m for m in ins.modifiers if m in LD_SHAPE_COLS), None)
    num = next((int(m[1:]) for m in ins.modifiers if m.startswith("x") and m[1:].isdigit()), None)
    return shape, num


def scale_vec_of(ins: Instruction) -> Optional[str]:
    """The block-scale vector modifier of a tcgen05.mma ('scale_vec::2X', or the older 'block16'/'block32')."""
    return next((m for m in ins.modifiers if m.startswith("scale_vec::") or m in ("block16", "block32")), None)


def decode_mma(ctx: Ctx, ins: Instruction) -> Optional[InstrDesc]:
    """The decoded instruction descriptor of a tcgen05.mma (known bits only); None when no bit is known."""
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


# ---------------------------------------------------------------------------------------------------------
# setup: link the TMEM base address back to the allocation
def discover_tmem(ctx: Ctx) -> None:
    """Record each tcgen05.alloc's columns and teach the resolver which smem slots hold a TMEM base address."""
    r = ctx.resolver
    for ins in ctx.func.find("tcgen05.alloc"):
        if not ins.operands:
            continue
        addr = r.address(ins.operands[0])
        sym = f"tmem@{ins.line}"
        ctx.alloc_cols[sym] = exact_operand(ctx, ins, 1)
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
