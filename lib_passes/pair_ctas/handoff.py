"""pair-ctas-handoff (PTX): the 2-CTA mainloop hands the peer's operand tiles to the leader through the leader's
mbarrier instead of a cluster barrier per K step.

Why: with the 2-CTA marks, Triton 3.6's lowering emits `barrier.cluster.arrive.aligned; barrier.cluster.wait.aligned`
before every `tcgen05.mma.cta_group::2` issue: each CTA waits for its own TMA tiles, then the cluster barrier tells
the leader that the peer's tiles have landed. Both CTAs stall on each other every K step. CUTLASS's 2-SM mainloop
(and Gluon's 2-CTA kernels) hand off through mbarriers instead; this pass rewrites Triton's PTX to that protocol:

1. **One cluster barrier after setup**: `fence.mbarrier_init.release.cluster` and a cluster barrier before the
   first TMA load, so the peer's TMA never completes on a leader mbarrier that is not initialised yet, and the
   leader's multicast commit never arrives on an uninitialised peer barrier (CUTLASS: `cluster_sync()` after
   barrier init and TMEM alloc). The `tcgen05.fence` pair orders the accumulator's zero-fill (`tcgen05.st` in
   both CTAs) before the leader's first MMA writes both CTAs' TMEM.
2. **TMA completes on the leader's mbarrier**: every mainloop TMA load becomes
   `cp.async.bulk.tensor.<d>.cta_group::2...` with its mbarrier operand mapped by
   `mapa.shared::cluster.u32` to the same offset in the even CTA of the pair (`%cluster_ctarank & ~1`).
3. **The leader expects both CTAs' bytes**: `mbarrier.arrive.expect_tx` arrives with 2 x the bytes on the leader
   and with 0 on the peer (a plain arrive: the peer issues no MMA, its own wait then passes at once and keeps its
   phase parity in step with the leader's).
4. **No cluster barrier before an MMA**: the `barrier.cluster.arrive/wait` pairs before the last
   `tcgen05.mma` go. The stage is freed in both CTAs by Triton's own
   `tcgen05.commit.cta_group::2...multicast::cluster` (CTA mask 0b11), on which both CTAs wait before refilling.
5. The exit handshake (`pair-ctas`'s cluster barrier before the TMEM dealloc) stays.

Applies only to kernels whose MMA operands all come through TMA and only the MMA reads them (no generic or
`cp.async` shared-memory writes or `ld.shared` reads in the mainloop, no TMA load in the epilogue); other paired kernels (pointer loads) keep the cluster barrier and
the report says why. The PTX is edited by line: untouched lines stay byte-identical.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from bwtriton.passes.base import Pass, PassContext, PassOption, Stage, register_pass

#: Registers this pass declares (one prefix, never produced by LLVM's NVPTX printer).
REG_PREFIX = "%bwho"
_ARRIVE = re.compile(r"^(?P<head>.*\bmbarrier\.arrive\.expect_tx\.[\w:.]*\s+\S+,\s*\[[^\]]+\],\s*)"
                     r"(?P<bytes>\d+)(?P<tail>\s*;.*)$")
# Triton 3.6 spells the load `...shared::cluster.global...`, 3.7+ `...cta_group::N.shared::cta.global...` (the
# destination is the CTA's own shared memory either way); the rewrite spells it the 3.6 way with `.cta_group::2`.
_TMA_LOAD = re.compile(r"^(?P<indent>\s*)(?P<guard>@!?%\w+\s+)?cp\.async\.bulk\.tensor\.(?P<dim>\dd)\."
                       r"(?:cta_group::[12]\.)?shared::(?:cluster|cta)\."
                       r"(?P<mods>global[\w:.]*mbarrier::complete_tx::bytes[\w:.]*)\s+"
                       r"(?P<ops>.*)\[(?P<bar>[^\]]+)\](?P<tail>[^\[\]]*;.*)$")
_CLUSTER_ARRIVE = re.compile(r"^\s*barrier\.cluster\.arrive[\w.]*\s*;")
_CLUSTER_WAIT = re.compile(r"^\s*barrier\.cluster\.wait[\w.]*\s*;")
_GENERIC_SMEM_WRITE = re.compile(r"\b(st\.shared|st\.async|stmatrix|cp\.async\.(ca|cg)|red\.shared|atom\.shared|"
                                 r"cp\.async\.bulk\.shared)\b")
_ENTRY = re.compile(r"^(\.visible\s+|\.weak\s+)?\.entry\s")
_SMEM_READ = re.compile(r"\b(ld\.shared|ldmatrix|ld\.async)\b")
_REG_DECL = re.compile(r"^\s*\.reg\s")
_BRANCH = re.compile(r"\b(bra|brx|ret|exit)\b")


@dataclass
class HandoffPlan:
    """Where the rewrite edits one kernel's PTX (0-based line numbers of the original text)."""

    body_start: int                                   # first line after the `.reg` declarations
    setup_barrier_at: int                             # the setup cluster barrier goes in front of this line
    issue_barriers: list[tuple[int, int]] = field(default_factory=list)  # (arrive, wait) pairs to drop
    arrives: list[int] = field(default_factory=list)  # mbarrier.arrive.expect_tx lines
    tma_loads: list[int] = field(default_factory=list)


def code_of(line: str) -> str:
    """The PTX statement of a line, without its trailing comment."""
    return line.split("//", 1)[0].strip()


def _cluster_barrier_pairs(code: list[str]) -> list[tuple[int, int]]:
    """(arrive, wait) line pairs of cluster barriers: an arrive whose next instruction is the wait."""
    real = [i for i, c in enumerate(code) if c and not c.startswith(".loc")]
    return [(i, j) for i, j in zip(real, real[1:]) if _CLUSTER_ARRIVE.match(code[i]) and _CLUSTER_WAIT.match(code[j])]


def plan_handoff(lines: list[str], *, replaces_barrier: bool = True) -> tuple[HandoffPlan | None, str]:
    """The edit plan for a paired kernel's PTX, or (None, the reason the handoff does not apply).
    `replaces_barrier=False`: the kernel has no cluster barrier before its MMAs yet (pair-ctas-scaled pairs a
    1-CTA kernel); the handoff is its only cross-CTA handoff."""
    code = [code_of(ln) for ln in lines]
    if sum(bool(_ENTRY.match(c)) for c in code) != 1:
        return None, "the module has other than one kernel entry"
    if ".reqnctapercluster 2" not in code or not any("tcgen05.mma.cta_group::2" in c for c in code):
        return None, "not a 2-CTA (cta_group::2, cluster of 2) kernel"
    mmas = [i for i, c in enumerate(code) if "tcgen05.mma" in c]
    last_mma = mmas[-1]
    tma = [i for i, c in enumerate(code) if _TMA_LOAD.match(c)]
    arrives = [i for i, c in enumerate(code) if "mbarrier.arrive.expect_tx" in c]
    if not tma:
        return None, "no TMA load feeds the MMAs (pointer loads): the cluster barrier is the peer's only handoff"
    pairs = _cluster_barrier_pairs(code)
    issue = [p for p in pairs if p[1] < last_mma]
    exits = [p for p in pairs if p[0] > last_mma]
    if not issue and replaces_barrier:
        return None, "no cluster barrier before an MMA issue (nothing to replace)"
    if not exits:
        return None, "no exit cluster barrier after the last MMA (run pair-ctas, which adds it)"
    # The mainloop ends where the epilogue reads the accumulator (or at the exit handshake).
    end = min([i for i, c in enumerate(code) if i > last_mma and "tcgen05.ld" in c] + [exits[0][0]])
    if any(i > end for i in tma + arrives):
        return None, "a TMA load or expect_tx in the epilogue (its consumer is not the MMA): left as it is"
    writes = [i for i, c in enumerate(code[:end]) if _GENERIC_SMEM_WRITE.search(c)]
    if writes:
        return None, (f"shared memory written by other than TMA in the mainloop (PTX line {writes[0] + 1}: "
                      f"{code[writes[0]][:60]}): the peer must hand those over itself")
    first_async = min(tma + arrives)
    reads = [i for i in range(first_async, end) if _SMEM_READ.search(code[i])]
    if reads:
        return None, (f"shared memory read by the CTA's own threads in the mainloop (PTX line {reads[0] + 1}: "
                      f"{code[reads[0]][:60]}): the peer's own mbarrier no longer says its tiles have landed")
    if any(not _ARRIVE.match(code[i]) for i in arrives):
        return None, "an mbarrier.arrive.expect_tx with a byte count that is not a constant"
    decl = next((i for i, c in enumerate(code) if _REG_DECL.match(c)), None)
    if decl is None:
        return None, "no .reg declarations in the kernel"
    body_start = decl
    while _REG_DECL.match(code[body_start]):  # the kernel's leading declarations, not a `{ .reg ... }` scope's
        body_start += 1
    entry = code[body_start:first_async]
    if any(_BRANCH.search(c) or c.startswith("{") or c.endswith(":") and not c.startswith("$L__") for c in entry):
        return None, "the first TMA load is not in the kernel's entry block (the setup barrier needs all threads)"
    setup = [i for i, c in enumerate(code) if "mbarrier.init" in c or "tcgen05.alloc" in c]
    if any(i > first_async for i in setup):
        return None, "an mbarrier.init or tcgen05.alloc after the first TMA load (the setup barrier must follow them)"
    return HandoffPlan(body_start=body_start, setup_barrier_at=first_async, issue_barriers=issue, arrives=arrives,
                       tma_loads=tma), ""


def _prologue(indent: str, byte_counts: list[int]) -> list[str]:
    """Rank-dependent values, computed once at kernel entry: the leader's rank and the expect_tx byte counts."""
    r = REG_PREFIX
    out = [f"{indent}mov.u32 \t{r}_rank, %cluster_ctarank;",
           f"{indent}and.b32 \t{r}_leader, {r}_rank, -2;",
           f"{indent}and.b32 \t{r}_odd, {r}_rank, 1;",
           f"{indent}setp.eq.u32 \t{r}_isleader, {r}_odd, 0;"]
    out += [f"{indent}selp.b32 \t{r}_tx{n}, {2 * n}, 0, {r}_isleader;" for n in byte_counts]
    return out


def _setup_barrier(indent: str) -> list[str]:
    return [f"{indent}fence.mbarrier_init.release.cluster;",
            f"{indent}tcgen05.fence::before_thread_sync;",
            f"{indent}barrier.cluster.arrive.release.aligned;",
            f"{indent}barrier.cluster.wait.acquire.aligned;",
            f"{indent}tcgen05.fence::after_thread_sync;"]


def _tma_to_leader(line: str) -> list[str]:
    """The TMA load with `.cta_group::2` and its mbarrier mapped to the leader CTA (a `mapa` in front)."""
    m = _TMA_LOAD.match(line.split("//", 1)[0].rstrip())
    assert m is not None
    bar = m["bar"].strip()
    r = REG_PREFIX
    out = []
    if re.fullmatch(r"%\w+", bar):
        src = bar
    else:  # [%r + imm]: the address first
        base, _, off = bar.partition("+")
        out.append(f"{m['indent']}add.s32 \t{r}_addr, {base.strip()}, {off.strip()};")
        src = f"{r}_addr"
    out.append(f"{m['indent']}mapa.shared::cluster.u32 \t{r}_bar, {src}, {r}_leader;")
    out.append(f"{m['indent']}{m['guard'] or ''}cp.async.bulk.tensor.{m['dim']}.cta_group::2.shared::cluster."
               f"{m['mods']} {m['ops']}[{r}_bar]{m['tail']}")
    return out


def apply_handoff(lines: list[str], plan: HandoffPlan, extra_setup: list[str] = ()) -> list[str]:
    """The rewritten PTX lines; `extra_setup` goes after the rank-dependent values (it may read them)."""
    counts = sorted({int(_ARRIVE.match(code_of(lines[i]))["bytes"]) for i in plan.arrives})
    drop = {i for pair in plan.issue_barriers for i in pair}
    arrives, tmas = set(plan.arrives), set(plan.tma_loads)
    r = REG_PREFIX
    out: list[str] = []
    for i, line in enumerate(lines):
        indent = line[:len(line) - len(line.lstrip())] or "\t"
        if i == plan.body_start:
            out += [f"\t.reg .b32 \t{r}_rank, {r}_leader, {r}_odd, {r}_bar, {r}_addr"
                    + "".join(f", {r}_tx{n}" for n in counts) + ";", f"\t.reg .pred \t{r}_isleader;"]
        if i == plan.setup_barrier_at:  # after the TMEM alloc: nothing rank-dependent comes before it
            out += _prologue(indent, counts) + list(extra_setup) + _setup_barrier(indent)
        if i in drop:
            continue
        if i in arrives:
            m = _ARRIVE.match(line.rstrip())
            out.append(f"{m['head']}{r}_tx{m['bytes']}{m['tail']}")
        elif i in tmas:
            out += _tma_to_leader(line)
        else:
            out.append(line)
    return out


@register_pass
class PairCtasHandoff(Pass):
    name = "pair-ctas-handoff"
    stage = Stage.PTX
    purpose = ("2-CTA mainloop: the peer's TMA completes on the leader's mbarrier instead of a cluster barrier "
               "per K step")
    options = (PassOption("mode", str, "auto", "auto: rewrite TMA-fed 2-CTA kernels, leave others with a note; "
                          "on: fail when a 2-CTA kernel cannot be rewritten"),)
    default_enabled = True

    def applies_to(self, target) -> bool:
        return bool(target.has_tcgen05)

    def run(self, ir: str, ctx: PassContext):
        mode = ctx.options.get("mode", "auto")
        if mode not in ("auto", "on"):
            ctx.error(f"option mode={mode!r} is not one of auto, on; use pair-ctas-handoff{{mode=auto}}")
        if "cta_group::2" not in ir:
            return None  # not a paired kernel: nothing to report
        lines = ir.split("\n")
        if any(REG_PREFIX + "_leader" in code_of(ln) for ln in lines):
            ctx.report.update(applied=False, reason="the mainloop already hands off through mbarriers "
                                                    "(pair-ctas-scaled did it)")
            return None
        plan, why = plan_handoff(lines)
        if plan is None:
            ctx.report.update(applied=False, reason=why)
            if mode == "on":
                ctx.error(f"cannot hand off through mbarriers: {why}; drop pair-ctas-handoff{{mode=on}} to keep "
                          f"the cluster barrier")
            return None
        ctx.report.update(applied=True, removed_cluster_barriers=[a + 1 for a, _ in plan.issue_barriers],
                          tma_loads=len(plan.tma_loads), expect_tx=len(plan.arrives),
                          setup_barrier_before_line=plan.setup_barrier_at + 1)
        return "\n".join(apply_handoff(lines, plan))
