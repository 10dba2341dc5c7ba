"""Correctness-preserving TTIR rewrites that lower a kernel's TMEM demand, and re-running Triton's TTGIR
lowering on the result. Used by `plan-tmem` when the plan of Triton's TTGIR exceeds the 512-column budget.

Why at TTIR: TMEM allocations, their multi-buffering and their live ranges are all decided inside Triton's
`make_ttgir` (accelerate-matmul, hoist-tmem-alloc, warp-specialize, pipeline). Rewriting the program *before*
those passes lets Triton produce ordinary, verified tcgen05 code for the smaller plan; patching the finished
TTGIR would mean re-doing the pipeliner's barrier and buffer bookkeeping by hand.

Rewrites (each returns new TTIR text and a description, or None when it does not apply):
- `disallow_acc_multi_buffer`: mark every loop `tt.disallow_acc_multi_buffer` (what `tl.range(...,
  disallow_acc_multi_buffer=True)` emits), so warp specialization keeps one accumulator buffer instead of two.
  Same arithmetic, less epilogue/MMA overlap.
- `serialize_accumulators`: loop fission. A K loop that carries several independent `tt.dot` accumulators is
  split into one loop per accumulator; shared pure values (pointers, counters) are recomputed in each loop.
  The accumulators' live ranges become disjoint, so Triton's allocator reuses the same columns. Each
  accumulator sees exactly the same sequence of MMAs, so results are bitwise identical; the cost is
  re-loading shared operands (A) once per accumulator.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bwtriton import mlir as mu
from bwtriton.mlir import ops as irt

#: Ops that may be duplicated into each fissioned loop: no side effects, no regions with side effects.
_PURE_PREFIXES = ("arith.", "math.")
_PURE_TT = {"tt.load", "tt.dot", "tt.dot_scaled", "tt.addptr", "tt.splat", "tt.broadcast", "tt.expand_dims",
            "tt.make_range", "tt.reshape", "tt.trans", "tt.descriptor_load", "tt.advance", "tt.make_tensor_ptr",
            "tt.fp_to_fp", "tt.bitcast", "tt.int_to_ptr", "tt.ptr_to_int", "tt.get_program_id",
            "tt.get_num_programs", "tt.join", "tt.split", "tt.cat", "tt.clampf", "tt.precise_sqrt",
            "tt.precise_divf", "tt.mulhiui", "tt.reduce", "tt.reduce.return", "tt.scan", "tt.scan.return",
            "tt.unsplat", "tt.gather", "ub.poison"}
_DOT_OPS = {"tt.dot", "tt.dot_scaled"}


def _is_pure(op: irt.Op) -> bool:
    return all(o.name.startswith(_PURE_PREFIXES) or o.name in _PURE_TT for o in op.walk())


# ----------------------------------------------------------------------------------------------------------
# Rewrite 1: no accumulator multi-buffering
# ----------------------------------------------------------------------------------------------------------

def disallow_acc_multi_buffer(ttir: str) -> tuple[str, str] | None:
    """Add `tt.disallow_acc_multi_buffer` to every `scf.for` that lacks it; None if there is none to mark."""
    tops = irt.parse_ops(ttir)
    lines = ttir.splitlines(keepends=True)
    changed = 0
    for op in irt.all_ops(tops):
        if op.name != "scf.for" or "tt.disallow_acc_multi_buffer" in op.text.splitlines()[-1]:
            continue
        last = op.line + len(op.text.splitlines()) - 1
        close = lines[last]
        body, nl = close.rstrip("\n"), close[len(close.rstrip("\n")):]
        stripped = mu.strip_loc(body)
        loc = body[len(stripped):]
        m = re.match(r"^(\s*\})\s*(\{(.*)\})?\s*$", stripped)
        if not m:
            continue
        attrs = m.group(3)
        new_attrs = f"{attrs}, tt.disallow_acc_multi_buffer" if attrs else "tt.disallow_acc_multi_buffer"
        lines[last] = f"{m.group(1)} {{{new_attrs}}}{loc}{nl}"
        changed += 1
    if not changed:
        return None
    return "".join(lines), f"marked {changed} loop(s) tt.disallow_acc_multi_buffer (one accumulator buffer)"


# ----------------------------------------------------------------------------------------------------------
# Rewrite 2: loop fission of independent accumulators
# ----------------------------------------------------------------------------------------------------------

@dataclass
class _Loop:
    op: irt.Op
    iv: str
    bounds: str                    # '%lb to %ub step %st'
    iter_args: list[tuple[str, str]]
    result_types: list[str]
    tail: str                      # text after the result types on the head line (' : i32 {')
    body: list[irt.Op]
    yield_op: irt.Op
    yields: list[str]
    yield_types: str


_FOR_HEAD_RE = re.compile(r"^(?P<indent>\s*)(?P<res>%[\w$.\-]+)(?::(?P<n>\d+))?\s*=\s*scf\.for\s+(?P<iv>%[\w$.\-]+)"
                          r"\s*=\s*(?P<bounds>.*?)\s+iter_args\(")


def _parse_loop(op: irt.Op) -> _Loop | None:
    head = op.head
    m = _FOR_HEAD_RE.match(head)
    if not m or len(op.regions) != 1 or not op.regions[0]:
        return None
    lp = head.index("iter_args(") + len("iter_args")
    rp = mu.matching_close(head, lp)
    pairs = [p.split("=", 1) for p in mu.split_top_level(head[lp + 1:rp])]
    iter_args = [(a.strip(), b.strip()) for a, b in pairs]
    rest = head[rp + 1:]
    arrow = rest.index("->")
    after = rest[arrow + 2:].lstrip()
    if after.startswith("("):
        close = mu.matching_close(after, 0)
        types = mu.split_top_level(after[1:close])
        tail = after[close + 1:]
    else:  # single result: '-> type  : i32 {'
        colon = after.rindex(" : ")
        types, tail = [after[:colon].strip()], after[colon:]
    body = op.regions[0]
    yop = body[-1]
    if yop.name != "scf.yield":
        return None
    ytext = mu.strip_loc(yop.head).strip()[len("scf.yield"):]
    colon = ytext.rindex(" : ") if " : " in ytext else len(ytext)
    yields = [v.strip() for v in mu.split_top_level(ytext[:colon])]
    return _Loop(op=op, iv=m.group("iv"), bounds=m.group("bounds"), iter_args=iter_args, result_types=types,
                 tail=tail, body=body[:-1], yield_op=yop, yields=yields, yield_types=ytext[colon + 3:])


def _deps(loop: _Loop) -> tuple[dict[str, set[int]], dict[str, irt.Op]]:
    """For each value defined in the body (and each iter arg), the iter-arg indices it depends on."""
    arg_index = {a: i for i, (a, _) in enumerate(loop.iter_args)}
    dep: dict[str, set[int]] = {a: {i} for a, i in arg_index.items()}
    producer: dict[str, irt.Op] = {}
    for op in loop.body:
        used = set()
        for inner in op.walk():
            for v in inner.operands:
                used |= dep.get(v, set())
        for ref in op.result_refs():
            dep[ref] = used
            producer[ref] = op
    return dep, producer


def serialize_accumulators(ttir: str) -> tuple[str, str] | None:
    """Split the first loop with 2+ independent dot accumulators into one loop per accumulator."""
    tops = irt.parse_ops(ttir)
    for op in irt.all_ops(tops):
        if op.name != "scf.for":
            continue
        loop = _parse_loop(op)
        if loop is None:
            continue
        plan = _fission_plan(loop)
        if plan is None:
            continue
        return _emit_fission(ttir, loop, plan)
    return None


def _fission_plan(loop: _Loop) -> list[list[int]] | None:
    if not all(_is_pure(op) for op in loop.body):
        return None  # stores/atomics/calls: re-running them per accumulator would change the program
    dep, producer = _deps(loop)
    accs = [i for i, y in enumerate(loop.yields) if y in producer and producer[y].name in _DOT_OPS
            and loop.iter_args[i][0] in producer[y].operands]
    if len(accs) < 2:
        return None
    groups: list[list[int]] = []
    acc_set = set(accs)
    for i in accs:
        need = _closure({i}, loop, dep)
        if need & acc_set != {i}:
            return None  # accumulators feed each other: not separable
        groups.append(sorted(need))
    shared = set().union(*map(set, groups)) - acc_set
    for j in shared:  # a shared value must not depend on any accumulator, or copies would diverge
        if dep.get(loop.yields[j], set()) & acc_set:
            return None
    rest = set(range(len(loop.iter_args))) - set().union(*map(set, groups))
    if rest:
        extra = _closure(rest, loop, dep)
        if extra & acc_set:
            return None
        groups[0] = sorted(set(groups[0]) | extra)
    return groups


def _closure(start: set[int], loop: _Loop, dep: dict[str, set[int]]) -> set[int]:
    need, work = set(start), list(start)
    while work:
        j = work.pop()
        for k in dep.get(loop.yields[j], set()) | {j}:
            if k not in need:
                need.add(k)
                work.append(k)
    return need


def _emit_fission(ttir: str, loop: _Loop, groups: list[list[int]]) -> tuple[str, str]:
    lines = ttir.splitlines(keepends=True)
    op = loop.op
    first, last = op.line, op.line + len(op.text.splitlines()) - 1
    indent = re.match(r"\s*", op.head).group(0)
    close_line = lines[last].rstrip("\n")
    res_name = op.results[0]
    n_results = op.result_counts[0]
    _, producer = _deps(loop)
    taken = set(re.findall(r"%[\w$.\-]+", ttir))
    new_text: list[str] = []
    result_map: dict[int, str] = {}
    for g, idxs in enumerate(groups):
        name = _fresh(f"{res_name}_tmemser{g}", taken)
        needed = _backward_slice([loop.yields[j] for j in idxs], producer)
        args = ", ".join(f"{loop.iter_args[j][0]} = {loop.iter_args[j][1]}" for j in idxs)
        types = [loop.result_types[j] for j in idxs]
        type_text = f"({', '.join(types)})" if len(types) > 1 else types[0]
        count = f":{len(idxs)}" if len(idxs) > 1 else ""
        new_text.append(f"{indent}{name}{count} = scf.for {loop.iv} = {loop.bounds} iter_args({args}) -> "
                        f"{type_text}{loop.tail}\n")
        for body_op in loop.body:
            if id(body_op) in needed:
                new_text.append(body_op.text + "\n")
        yloc = loop.yield_op.head[len(mu.strip_loc(loop.yield_op.head)):]
        yindent = re.match(r"\s*", loop.yield_op.head).group(0)
        new_text.append(f"{yindent}scf.yield {', '.join(loop.yields[j] for j in idxs)} : "
                        f"{', '.join(types)}{yloc}\n")
        new_text.append(close_line + "\n")
        for local, j in enumerate(idxs):
            if j not in result_map:
                result_map[j] = name if len(idxs) == 1 else f"{name}#{local}"
    # Sink each accumulator's pure epilogue ops (e.g. the truncf to the output type) to right after its own loop.
    # Why: otherwise every accumulator stays live in registers as fp32 until the end, and LLVM then schedules
    # the packing of the last tcgen05.ld results before tcgen05.wait::ld (caught by verify-tcgen05).
    group_of = {j: g for g, idxs in enumerate(groups) for j in idxs}
    sunk: dict[int, list[str]] = {}
    moved_lines: set[int] = set()
    defined_after: set[str] = set()
    siblings = _siblings_after(op)
    for sib in siblings:
        uses = set(sib.operands)
        from_loop = {int(u.split("#")[1]) if "#" in u else 0 for u in uses
                     if u.split("#")[0] == res_name}
        groups_used = {group_of[j] for j in from_loop}
        movable = (len(groups_used) == 1 and not sib.regions and sib.name.startswith(_PURE_PREFIXES)
                   and not (uses & defined_after))
        if movable:
            sunk.setdefault(groups_used.pop(), []).append(lines[sib.line])
            moved_lines.add(sib.line)
        else:
            defined_after.update(sib.result_refs())
            defined_after.update(sib.results)
    if sunk:
        rebuilt, loop_no = [], -1
        for chunk in new_text:
            rebuilt.append(chunk)
            if chunk == close_line + "\n":
                loop_no += 1
                rebuilt.extend(sunk.get(loop_no, []))
        new_text = rebuilt
    after = "".join(line for k, line in enumerate(lines[last + 1:], start=last + 1) if k not in moved_lines)

    def rename(m: re.Match) -> str:
        if m.group(1) != res_name:
            return m.group(0)
        idx = int(m.group(2)) if m.group(2) else 0
        return result_map[idx] if (m.group(2) or n_results == 1) else m.group(0)
    pattern = r"(%[\w$.\-]+)(?:#(\d+))?(?![\w$.\-])"
    after = re.sub(pattern, rename, after)
    # the sunk epilogue lines sit after their loop: rename their uses of the old loop result too
    loops_text = "".join(re.sub(pattern, rename, chunk) if chunk in sum(sunk.values(), []) else chunk
                         for chunk in new_text)
    text = "".join(lines[:first]) + loops_text + after
    what = (f"split the loop carrying {len(groups)} accumulators ({res_name}) into {len(groups)} loops run "
            f"one after another, one accumulator each")
    return text, what


def _siblings_after(op: irt.Op) -> list[irt.Op]:
    """Ops after `op` in its block (single-region parents only, which covers function bodies)."""
    parent = op.parent
    if parent is None:
        return []
    for region in parent.regions:
        for k, other in enumerate(region):
            if other is op:
                return region[k + 1:]
    return []


def _fresh(base: str, taken: set[str]) -> str:
    """An SSA name not in `taken`, from `base`. MLIR names are numbers or start with a letter (`%25_x` does not
    parse), so a base from a numbered value (modules without name locations) gets a letter in front."""
    if base[1:2].isdigit():
        base = "%v" + base[1:]
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def _backward_slice(roots: list[str], producer: dict[str, irt.Op]) -> set[int]:
    """ids of the body ops the `roots` values need."""
    needed: set[int] = set()
    work = list(roots)
    while work:
        v = work.pop()
        op = producer.get(v)
        if op is None or id(op) in needed:
            continue
        needed.add(id(op))
        for inner in op.walk():
            work.extend(inner.operands)
    return needed


# ----------------------------------------------------------------------------------------------------------
# Re-running Triton's TTGIR lowering
# ----------------------------------------------------------------------------------------------------------

def lower_ttir_to_ttgir(ttir: str, context: Any, metadata: dict, capability: int) -> Any:
    """Parse `ttir` into `context` and run Triton's own `make_ttgir` on it with the compile's options."""
    from triton.backends.nvidia.compiler import CUDABackend, CUDAOptions
    mod = mu.reparse(ttir, context)
    # Triton's own options class: make_ttgir reads more fields on later releases (3.9: clc), each with a default.
    opt = CUDAOptions(num_warps=metadata.get("num_warps", 4), num_ctas=metadata.get("num_ctas", 1),
                      num_stages=metadata.get("num_stages", 3), maxnreg=metadata.get("maxnreg"))
    scratch: dict = {}
    out = CUDABackend.make_ttgir(mod, scratch, opt, capability)
    if "tensordesc_meta" in scratch:
        metadata["tensordesc_meta"] = scratch["tensordesc_meta"]
    out.context = context
    return out
