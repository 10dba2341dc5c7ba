"""TMEM allocation lifetime and access checks: P2 (nCols), P3/P4/P5 (alloc order, dealloc on every path,
no alloc after relinquish), P4/P8/P20 (tcgen05.ld/st shapes, lane quarters, columns inside the allocation)."""
from __future__ import annotations

from ...targets import TMEM_ALLOC_COLUMNS
from .context import LD_SHAPE_COLS, Ctx, exact_operand, ld_shape_num, tmem_ref
from .dataflow import may_have_run, run_dataflow, union_states

LEGAL_NCOLS = TMEM_ALLOC_COLUMNS


def check_alloc_columns(ctx: Ctx) -> None:
    """P2: nCols of alloc/dealloc is a power of two in [32, 512]."""
    for ins in ctx.func.instructions:
        if ins.opcode in ("tcgen05.alloc", "tcgen05.dealloc"):
            n = exact_operand(ctx, ins, 1)
            if n is not None and n not in LEGAL_NCOLS:
                ctx.add("alloc-columns", "P2", "error", ins,
                        f"{ins.opcode} of {n} columns: nCols must be a power of two in [32, 512] "
                        f"({', '.join(map(str, LEGAL_NCOLS))})")


def check_alloc_lifetime(ctx: Ctx) -> None:
    """P3 (non-increasing), P4 (dealloc on every path, same columns), P5 (no alloc after relinquish)."""
    allocs = ctx.func.find("tcgen05.alloc")
    if not allocs and not ctx.func.find("tcgen05.dealloc"):
        return
    cols = {a.index: exact_operand(ctx, a, 1) for a in allocs}

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
            c = exact_operand(ctx, ins, 1)
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
        return (union_states(s[0] for s in states), union_states(s[1] for s in states), any(s[2] for s in states))

    def on_exit(st, block):
        for a in sorted(st[0]):
            ins = allocs_by_index[a]
            if not may_have_run(ctx, ins):
                continue   # the path's facts say this thread never allocated (e.g. not warp 0)
            ctx.add("dealloc-missing", "P4", "error", ins,
                    f"TMEM allocated here ({cols.get(a)} columns) can reach the kernel exit (line "
                    f"{block.instructions[-1].line if block.instructions else ctx.func.end_line}) without "
                    "tcgen05.dealloc; free every allocation on every path before exit",
                    related=block.instructions[-1].line if block.instructions else None)

    run_dataflow(ctx, (frozenset(), frozenset(), False), step, join, on_exit)


_LD_REGS = {"32x32b": 1, "16x64b": 1, "16x32bx2": 1, "16x128b": 2, "16x256b": 4}


def check_ld_st_shapes(ctx: Ctx) -> None:
    """P8 (lane quarter, range inside the allocation), P20 (.red), register counts of ld/st."""
    for ins in ctx.func.instructions:
        if ins.opcode not in ("tcgen05.ld", "tcgen05.st"):
            continue
        shape, num = ld_shape_num(ins)
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
        ref = tmem_ref(ctx, addr) if addr is not None else None
        if ref is None:
            continue
        sym, lane, col = ref
        lanes, cols_per = LD_SHAPE_COLS[shape]
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
