"""pair-ctas: make a 256-row `tl.dot` tile compiled with num_ctas=2 a 2-CTA (``cta_group::2``) tcgen05 MMA.

What Triton 3.6 does with such a kernel (measured, see docs/two_cta.md): `make_ttgir` splits A and the accumulator
along M and B along N over the 2 CTAs; for B stored [K, N] (N-major) it also marks the MMA 2-CTA (``two_ctas`` on
`ttng.tc_gen5_mma`, ``twoCTAs = true`` on the accumulator's `#ttng.tensor_memory_encoding`), but for B stored [N, K]
and read through ``.T`` (the usual TMA form) it does not, and `make_llir` then aborts the process ('LLVM ERROR:
Failed to find a valid layout'). With the marks in place Triton's lowering emits the whole 2-CTA protocol itself:
``cta_group::2`` alloc/relinquish/dealloc in both CTAs, idesc M = 256, a cluster barrier before each MMA issue (the
peer's operands have landed) and a multicast commit to both CTAs' mbarriers.

From Triton 3.7 on `make_ttgir` broadcasts B to both CTAs instead, never marks a `tl.dot` 2-CTA, and the 2-CTA
lowering no longer syncs the pair before every MMA (python/bwtriton/compat/cga.py says what differs where).

This pass, on the TTGIR `make_ttgir` produced:
1. checks eligibility (`eligibility`) *before* the lowering can abort, failing with a clear error (mode=on);
2. splits a broadcast B along N (`b_split`: its layout aliases and the TMA byte counts);
3. adds the missing 2-CTA marks (text round trip), and the module attribute ``"ttng.two-ctas" = true``;
4. where the lowering does not (3.7+), a cluster barrier before each MMA issue: the peer's tiles have landed;
5. where the lowering does not (3.6), an exit handshake: a cluster barrier before the kernel's return, so neither
   CTA deallocates its TMEM or exits while its peer may still issue pair instructions.
"""
from __future__ import annotations

from typing import Any

from bwtriton.compat.cga import exit_cluster_barrier, lowering_syncs_pair_exit, lowering_syncs_pair_operands
from bwtriton.mlir import module_attr_int, parse_aliases, reparse, resolve_alias
from bwtriton.mlir.encodings import cga_split, tmem_fields
from bwtriton.mlir.mma import MmaLine, find_mma_lines
from bwtriton.mlir.ops import all_ops, parse_ops

from ..base import Pass, PassContext, PassOption, Stage, register_pass
from .b_split import BSplitError, split_b
from .layouts import TWO_CTAS_MODULE_ATTR, add_unit_attr, replace_alias, with_module_bool, with_two_ctas
from .eligibility import MmaSummary, crashes_unpaired, eligibility_problems

MODES = ("on", "auto")


def summarize(text: str) -> tuple[list[MmaLine], list[MmaSummary]]:
    """Every tcgen05 MMA of the printed module and what pairing needs to know about it."""
    aliases = parse_aliases(text)
    lines = find_mma_lines(text)
    out = []
    for line in lines:
        a, b, acc = line.a, line.b, line.acc
        if acc is None or a is None or b is None:
            continue
        acc_enc = resolve_alias(acc.encoding, aliases)
        fields = tmem_fields(acc_enc)
        out.append(MmaSummary(
            m=acc.shape[-2], n=acc.shape[-1],
            acc_split=(fields.get("CTASplitM", 1), fields.get("CTASplitN", 1)) if fields else None,
            a_split=cga_split(resolve_alias(a.encoding, aliases)) or (1, 1),
            b_split=cga_split(resolve_alias(b.encoding, aliases)) or (1, 1),
            scaled=line.scaled,
            two_ctas=line.two_ctas and bool(fields.get("twoCTAs"))))
    return lines, out


def _top_level_returns(lines: list[str]) -> tuple[list[int], int]:
    """Line indices of the `tt.return`s directly in a function body, and the count of nested (divergent) ones."""
    returns = [op for op in all_ops(parse_ops("\n".join(lines))) if op.name == "tt.return"]
    top = sorted(op.line for op in returns if op.parent is not None and op.parent.name == "tt.func")
    return top, len(returns) - len(top)


def _has_exit_barrier(lines: list[str], ret: int, barrier: tuple[str, ...]) -> bool:
    prev = [ln.strip() for ln in lines[max(0, ret - len(barrier)):ret]]
    return len(prev) == len(barrier) and all(p.startswith(op.split(" ")[0]) for p, op in zip(prev, barrier))


def _has_full_barrier_before(lines: list[str], idx: int, barrier: tuple[str, ...]) -> bool:
    """Whether the lines just before `idx` are exactly `barrier` (ignoring locations; the printer drops a default
    `{relaxed = false}`; a relaxed barrier does not count: it does not order the peer's loads)."""
    prev = [ln.split(" loc(")[0].strip() for ln in lines[max(0, idx - len(barrier)):idx]]
    return len(prev) == len(barrier) and all(p in (op, op.split(" ")[0]) for p, op in zip(prev, barrier))


@register_pass
class PairCtas(Pass):
    name = "pair-ctas"
    stage = Stage.TTGIR
    purpose = "turn 256-row tl.dot tiles compiled with num_ctas=2 into 2-CTA cta_group::2 tcgen05 MMAs"
    options = (PassOption("mode", str, "on",
                          "on: pair or fail with the reason; auto: pair when eligible, else leave the kernel as "
                          "Triton made it (with a warning)"),)
    default_enabled = False

    def applies_to(self, target) -> bool:
        return target.has_tcgen05

    def run(self, ir: Any, ctx: PassContext):
        mode = ctx.options.get("mode", "on")
        if mode not in MODES:
            ctx.error(f"option mode={mode!r} is not one of {', '.join(MODES)}; use pair-ctas{{mode=on}} or "
                      f"pair-ctas{{mode=auto}}")
        text = str(ir)
        num_ctas = module_attr_int(ir, "ttg.num-ctas", 1)
        lines, mmas = summarize(text)
        ctx.report.update(mode=mode, num_ctas=num_ctas, paired=False, changes=[],
                          mmas=[{"op": ln.op, "M": s.m, "N": s.n, "acc_split": s.acc_split, "a_split": s.a_split,
                                 "b_split": s.b_split, "two_ctas_from_triton": s.two_ctas}
                                for ln, s in zip(lines, mmas)])
        problems = eligibility_problems(ctx.target.name, num_ctas, mmas)
        if problems:
            ctx.report["ineligible"] = problems
            if mode == "on" or crashes_unpaired(num_ctas, mmas):
                why = "" if mode == "on" else (" (left as it is, Triton's lowering fails on this CTA-split "
                                               "accumulator on some releases; 3.6 aborts the process)")
                ctx.error("cannot pair CTAs" + why + ": " + "; ".join(problems))
            ctx.warn("not paired: " + "; ".join(problems))
            return None
        return self._pair(ir, text, lines, ctx)

    def _pair(self, ir, text: str, lines: list[MmaLine], ctx: PassContext):
        changes: list[str] = ctx.report["changes"]
        new_text = text
        # 0. B split along N where Triton broadcast it (3.7+); the line indices of `lines` stay valid.
        if any(tuple(m["b_split"]) == (1, 1) for m in ctx.report["mmas"]):
            try:
                split = split_b(text, lines)
            except BSplitError as exc:
                ctx.error(f"cannot pair CTAs: operand B is broadcast to both CTAs and {exc}")
            new_text = split.text
            changes.extend(split.changes)
        aliases = parse_aliases(new_text)
        # 1. twoCTAs on every accumulator encoding (an alias is shared by all its users: all tcgen05 ops of a
        #    kernel must use one cta_group anyway, PTX rule P1).
        for alias in sorted({ln.acc.encoding for ln in lines}):
            enc = resolve_alias(alias, aliases)
            if "twoCTAs = true" in enc:
                continue
            if alias not in aliases:
                ctx.error(f"accumulator encoding {alias!r} is inline, not a module alias; cannot rewrite it")
            new_text = replace_alias(new_text, alias, with_two_ctas(enc))
            changes.append(f"{alias}: twoCTAs = true")
        # 2. two_ctas on every MMA op.
        body = new_text.splitlines(keepends=True)
        for ln in lines:
            if not ln.two_ctas:
                body[ln.index] = add_unit_attr(body[ln.index].rstrip("\n"), "two_ctas") + "\n"
                changes.append(f"line {ln.index + 1}: {ln.op} two_ctas")
        # 3. where Triton's lowering does not, a cluster barrier before each MMA issue (the peer's tiles landed).
        if not lowering_syncs_pair_operands():
            self._sync_before_mmas(body, lines, exit_cluster_barrier(), ctx)
        # 4. exit handshake before each top-level return, where Triton's lowering has none before the dealloc.
        if lowering_syncs_pair_exit():
            ctx.report["exit_barrier"] = "Triton's own, before tcgen05.dealloc.cta_group::2"
        else:
            self._exit_handshake(body, ctx)
        new_text = "".join(body)
        if not changes:
            ctx.report["paired"] = True
            self._mark_module(ir)
            return None
        try:
            new_mod = reparse(with_module_bool(new_text, TWO_CTAS_MODULE_ATTR), ir.context)
        except Exception as exc:  # noqa: BLE001 - a failed rewrite must not reach the lowering
            ctx.error(f"the 2-CTA rewrite did not verify ({exc}); please report the kernel")
        self._mark_module(new_mod)
        _, after = summarize(str(new_mod))
        if not after or not all(s.two_ctas for s in after):
            ctx.error("internal: after the rewrite some MMA is still not 2-CTA; please report the kernel")
        ctx.report["paired"] = True
        return new_mod

    @staticmethod
    def _exit_handshake(body: list[str], ctx: PassContext) -> None:
        """Insert a cluster barrier before each top-level `tt.return` of `body` (in place)."""
        barrier = exit_cluster_barrier()
        plain = [b.rstrip("\n") for b in body]
        returns, nested = _top_level_returns(plain)
        if nested:
            ctx.warn(f"{nested} tt.return inside control flow: no exit cluster barrier added there (a barrier on a "
                     f"divergent path would deadlock); the peer may exit early on that path")
        for idx in reversed(returns):
            if not _has_exit_barrier(plain, idx, barrier):
                indent = plain[idx][:len(plain[idx]) - len(plain[idx].lstrip())]
                body[idx:idx] = [indent + op + "\n" for op in barrier]
                ctx.report["changes"].append("exit cluster barrier before tt.return")

    @staticmethod
    def _sync_before_mmas(body: list[str], lines: list[MmaLine], barrier: tuple[str, ...], ctx: PassContext) -> None:
        """Insert `barrier` before each MMA line of `body` (in place); an MMA under divergent control flow is an
        error (a cluster barrier there could deadlock)."""
        ops = {op.line: op for op in all_ops(parse_ops("".join(body)))}
        for ln in sorted(lines, key=lambda m: m.index, reverse=True):
            op = ops.get(ln.index)
            parent = op.parent.name if op is not None and op.parent is not None else ""
            if parent not in ("tt.func", "scf.for"):
                ctx.error(f"line {ln.index + 1}: the MMA sits in {parent or 'an unknown region'}; this Triton needs "
                          f"a cluster barrier before each 2-CTA MMA issue and the pass only places it in a function "
                          f"body or loop body (uniform control flow)")
            if _has_full_barrier_before(body, ln.index, barrier):
                continue  # a re-run: the barrier this pass placed is already there
            text = body[ln.index]
            indent = text[:len(text) - len(text.lstrip())]
            body[ln.index:ln.index] = [indent + b + "\n" for b in barrier]
            ctx.report["changes"].append(f"line {ln.index + 1}: cluster barrier before {ln.op}")

    @staticmethod
    def _mark_module(mod) -> None:
        from triton._C.libtriton import ir as tir
        mod.set_attr(TWO_CTAS_MODULE_ATTR, tir.builder(mod.context).get_bool_attr(True))
