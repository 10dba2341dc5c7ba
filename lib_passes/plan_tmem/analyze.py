"""Build a `TmemPlan` from printed TTGIR: find `ttng.tmem_alloc`s, classify them, size, time and place them."""
from __future__ import annotations

from bwtriton import mlir as mu
from bwtriton.mlir import ops as irt
from bwtriton.mlir.mma import MMA_OPS
from bwtriton.targets import TMEM_COLUMNS
from bwtriton.tmem.plan import TmemAllocation, TmemPlan, accumulator_footprint, scales_footprint

from .placement import place

#: Ops whose results are views of (alias) their memdesc operand.
VIEW_OPS = {"ttg.memdesc_index", "ttg.memdesc_subslice", "ttng.tmem_subslice", "ttg.memdesc_reinterpret",
            "ttg.memdesc_trans", "ttg.memdesc_reshape", "ttg.memdesc_subview"}


def plan_from_ttgir(text: str, budget: int = TMEM_COLUMNS) -> TmemPlan:
    """The TMEM plan of a printed TTGIR module (placement included)."""
    aliases = mu.parse_aliases(text)
    ops = irt.all_ops(irt.parse_ops(text))
    users: dict[str, list[irt.Op]] = {}
    for op in ops:
        for name in op.operands:
            users.setdefault(name, []).append(op)
    allocations: list[TmemAllocation] = []
    row_links: dict[str, str] = {}
    alias_sets: dict[str, set[str]] = {}
    for op in ops:
        if op.name != "ttng.tmem_alloc" or not op.results:
            continue
        md = mu.parse_memdesc(op.result_types_text.split("->")[-1], aliases)
        if md is None:
            continue
        name = op.results[0]
        names = _alias_closure(name, users)
        alias_sets[name.lstrip("%")] = names
        alloc = _describe(op, md, names, users, aliases)
        allocations.append(alloc)
    # Classify by use in MMAs: position 0 = A operand, 2 = accumulator, 3/4 = scales.
    owner = {n: a for a in allocations for n in alias_sets[a.name]}
    for op in ops:
        if op.name not in MMA_OPS:
            continue
        vals = op.operands
        a_alloc = owner.get(vals[0]) if vals else None
        d_alloc = owner.get(vals[2]) if len(vals) > 2 else None
        if d_alloc is not None and d_alloc.kind == "other":
            d_alloc.kind = "acc"
        if a_alloc is not None:
            a_alloc.kind = "operand"
            if d_alloc is not None:
                if a_alloc.lanes == 64:
                    row_links[a_alloc.name] = d_alloc.name
                    row_links.setdefault(d_alloc.name, a_alloc.name)
    plan = TmemPlan(allocations=allocations, budget=budget)
    place(allocations, row_links)
    return plan


def _alias_closure(root: str, users: dict[str, list[irt.Op]]) -> set[str]:
    """`root` and every value that views it: view-op results, loop-carried copies, warp_specialize captures."""
    names, work = {root}, [root]
    while work:
        cur = work.pop()
        for user in users.get(cur, []):
            new: list[str] = []
            if user.name in VIEW_OPS:
                new = user.result_refs()
            elif user.name == "scf.for":
                refs = user.result_refs()
                for idx, (arg, init) in enumerate(irt.iter_args(user)):
                    if init == cur:
                        new.append(arg)
                        if idx < len(refs):
                            new.append(refs[idx])
            elif user.name == "ttg.warp_specialize":
                positions = [i for i, v in enumerate(_ws_captures(user)) if v == cur]
                for args in irt.partition_arguments(user):
                    new.extend(args[i] for i in positions if i < len(args))
            elif user.name in ("scf.yield",):
                parent = user.parent
                if parent is not None and parent.name == "scf.if":
                    idx = user.operands.index(cur)
                    refs = parent.result_refs()
                    if idx < len(refs):
                        new.append(refs[idx])
            for n in new:
                if n not in names:
                    names.add(n)
                    work.append(n)
    return names


def _ws_captures(op: irt.Op) -> list[str]:
    head = mu.strip_loc(op.head)
    lp = head.find("(")
    if lp < 0:
        return []
    return [v.strip() for v in mu.split_top_level(head[lp + 1:mu.matching_close(head, lp)])]


def _describe(op: irt.Op, md: mu.MemDesc, names: set[str], users: dict[str, list[irt.Op]],
              aliases: dict[str, str]) -> TmemAllocation:
    params = mu.parse_attr_params(md.encoding) if "<" in md.encoding else {}
    split = (int(params.get("CTASplitM", 1)), int(params.get("CTASplitN", 1)))
    if "scales" in md.encoding_name:
        fp = scales_footprint(list(md.shape), split)
        kind, block_m, block_n, col_stride = "scales", 128, 0, 1
    else:
        block_m = int(params.get("blockM", 128))
        block_n = int(params.get("blockN", md.shape[-1]))
        col_stride = int(params.get("colStride", 1))
        fp = accumulator_footprint(list(md.shape), mu.element_bits(md.element), block_m, block_n, col_stride,
                                   split)
        kind = "other"
    start = op.index
    end = op.index + 1
    for n in names:
        for user in users.get(n, []):
            anchor = irt.ancestor_in(user, op.parent)
            end = max(end, anchor.index + 1)
    loc = op.head[op.head.rfind(" loc("):] if " loc(" in op.head else ""
    return TmemAllocation(name=op.results[0].lstrip("%"), location=irt.resolve_location(loc, aliases),
                          shape=list(md.shape), dtype=md.element, kind=kind, buffers=fp.buffers,
                          columns=fp.columns, lanes=fp.lanes, block_m=block_m, block_n=block_n,
                          col_stride=col_stride, live_start=start, live_end=end, op_index=op.index)


def oversized_dots(ttir: str, num_ctas: int = 1, budget: int = TMEM_COLUMNS) -> list[dict]:
    """`tt.dot`/`tt.dot_scaled` ops of a TTIR module whose accumulator alone exceeds the TMEM budget.

    Triton 3.6 rejects these inside `make_ttgir` with a raw MLIR verifier error ("nCol ... must be less than or
    equal to 512 * 32 / bitwidth"), before any TTGIR pass could help, so they are caught at TTIR. One
    M x N accumulator takes ceil(M/128) 128-row blocks of N columns (fp32), split over the CTAs of a cluster.
    """
    aliases = mu.parse_aliases(ttir)
    found = []
    for op in irt.all_ops(irt.parse_ops(ttir)):
        if op.name not in ("tt.dot", "tt.dot_scaled"):
            continue
        out = mu.parse_type(op.result_types_text.rpartition("->")[2])
        if not isinstance(out, mu.TensorType) or len(out.shape) != 2:
            continue
        (rows, cols), elem = out.shape, out.elem
        if rows < 64 or ("inputPrecision = ieee" in op.head and "xf32>" in op.head.split("->")[0]):
            continue  # not a tcgen05 MMA (FMA or mma.sync path): no TMEM accumulator
        bits = max(mu.element_bits(elem), 32) if elem.startswith(("f", "i")) else 32
        columns = max(1, -(-rows // 128)) * cols * bits // 32 // max(1, num_ctas)
        if columns > budget:
            loc = op.head[op.head.rfind(" loc("):] if " loc(" in op.head else ""
            found.append({"name": (op.results[0] if op.results else "").lstrip("%"), "shape": [rows, cols],
                          "dtype": elem, "columns": columns, "location": irt.resolve_location(loc, aliases)})
    return found
