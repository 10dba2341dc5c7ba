"""Basic blocks, control-flow graph and a small forward dataflow solver over them.

Blocks start at a label or after a terminator (bra, brx, ret, exit, trap). A guarded branch or exit also
falls through. Trap blocks are tagged `terminal="trap"`: a path that traps has no obligations at "exit".
"""
from __future__ import annotations

from typing import Callable, Hashable, Iterable, TypeVar

from .ir import BasicBlock, Function, Instruction, Label

_TERMINATORS = frozenset(("bra", "brx", "ret", "exit", "trap"))

S = TypeVar("S", bound=Hashable)


def build_cfg(func: Function) -> None:
    """Fill `func.blocks` and `func.label_block`; set `Instruction.block`."""
    blocks: list[BasicBlock] = []
    cur = BasicBlock(0)
    blocks.append(cur)

    def new_block() -> BasicBlock:
        nonlocal cur
        cur = BasicBlock(len(blocks))
        blocks.append(cur)
        return cur

    for st in func.statements:
        if isinstance(st, Label):
            if cur.instructions:
                new_block()
            cur.labels.append(st.key)
            func.label_block[st.key] = cur.id
        elif isinstance(st, Instruction):
            st.block = cur.id
            cur.instructions.append(st)
            if st.opcode in _TERMINATORS:
                new_block()
    # successors
    for b in blocks:
        last = b.instructions[-1] if b.instructions else None
        fall = b.id + 1 if b.id + 1 < len(blocks) else None
        succs: list[int] = []
        if last is None or last.opcode not in _TERMINATORS:
            if fall is not None:
                succs.append(fall)
            else:
                b.terminal = "exit"
        else:
            guarded = last.guard is not None
            if last.opcode in ("bra", "brx"):
                succs.extend(func.label_block[t] for t in last.targets if t in func.label_block)
                if guarded and fall is not None:
                    succs.append(fall)
                if not last.targets and fall is not None:  # unresolved target: assume fall-through
                    succs.append(fall)
            else:
                if guarded and fall is not None:
                    succs.append(fall)
                elif guarded:
                    b.terminal = "exit"
                if not guarded:
                    b.terminal = "trap" if last.opcode == "trap" else "exit"
        seen = []
        for s in succs:
            if s not in seen:
                seen.append(s)
        b.succs = seen
    for b in blocks:
        for s in b.succs:
            blocks[s].preds.append(b.id)
    func.blocks = blocks


def reachable_blocks(func: Function, start: int = 0) -> set[int]:
    seen = {start}
    stack = [start]
    while stack:
        b = stack.pop()
        for s in func.blocks[b].succs:
            if s not in seen:
                seen.add(s)
                stack.append(s)
    return seen


def cyclic_blocks(func: Function) -> set[int]:
    """Blocks on some CFG cycle (in a strongly connected component with a cycle): code that can run twice."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: set[int] = set()
    counter = 0
    for root in range(len(func.blocks)):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            succs = func.blocks[node].succs
            if i < len(succs):
                work.append((node, i + 1))
                nxt = succs[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1 or node in func.blocks[node].succs:
                    out.update(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return out


def back_edges(func: Function) -> set[tuple[int, int]]:
    """Edges (u, v) where v is on the DFS stack when u -> v is explored: the loop back edges."""
    result: set[tuple[int, int]] = set()
    if not func.blocks:
        return result
    state = {0: 1}
    stack = [(0, iter(func.blocks[0].succs))]
    while stack:
        node, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            state[node] = 2
            stack.pop()
            continue
        st = state.get(nxt, 0)
        if st == 1:
            result.add((node, nxt))
        elif st == 0:
            state[nxt] = 1
            stack.append((nxt, iter(func.blocks[nxt].succs)))
    return result


def forward_dataflow(func: Function, entry_state: S, transfer: Callable[[BasicBlock, S], S],
                     join: Callable[[Iterable[S]], S],
                     edge: Callable[[int, int, S], S] | None = None) -> dict[int, S]:
    """Solve a forward dataflow problem; returns the IN state of every reachable block.

    `transfer(block, in_state) -> out_state`, `join(states) -> state` must be monotone over a finite lattice
    (callers use frozensets). `edge(u, v, out_state)` may rewrite the state along an edge (e.g. back edges).
    """
    if not func.blocks:
        return {}
    ins: dict[int, S] = {0: entry_state}
    outs: dict[int, S] = {}
    work = [0]
    in_work = {0}
    order = {b.id: b.id for b in func.blocks}
    iterations = 0
    while work:
        iterations += 1
        if iterations > 200000:  # defensive: never hang on a pathological CFG
            break
        work.sort(key=order.get, reverse=True)
        b = work.pop()
        in_work.discard(b)
        out = transfer(func.blocks[b], ins[b])
        if outs.get(b) == out and b in outs:
            continue
        outs[b] = out
        for s in func.blocks[b].succs:
            contrib = edge(b, s, out) if edge else out
            new = join([ins[s], contrib]) if s in ins else contrib
            if s not in ins or new != ins[s]:
                ins[s] = new
                if s not in in_work:
                    work.append(s)
                    in_work.add(s)
    return ins
