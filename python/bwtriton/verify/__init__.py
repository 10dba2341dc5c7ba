"""Static tcgen05/TMEM protocol verifier for sm_100a PTX.

    from bwtriton.verify import verify_ptx
    report = verify_ptx(ptx_text, target="sm_100a")
    report.errors, report.warnings, report.notes      # lists of Finding(check, rule, severity, message, line, ...)

CLI: `bwtriton check FILE.ptx [--json] [--explain]` (exit 1 on an error finding, 2 for unreadable input).
Compile pass: `verify-tcgen05` (PTX stage, on by default for targets with tcgen05).

Checks (rule numbers are those of tcgen05_reference.md §7; T1 is ours). "Path" checks run a forward dataflow
over the CFG, so "on every path" / "before use" follow control flow, not text order. Values come from
def-chain resolution; a value that is not statically known skips the check (never a false error). Path
sensitivity: facts learned on branch edges prune contradicting paths; comparisons of kernel-invariant values are
keyed by value (`bwtriton.ptx.values.ValueNumbering`), so `K > 0` and a separately computed `K < 1` are one fact.

| check id                  | rule | severity      | what it reports |
|---------------------------|------|---------------|-----------------|
| trap-only-body            | T1   | error         | entry whose every path ends in `trap` (Triton's resource-overflow kernel) |
| cta-group-mixed           | P1   | error         | tcgen05 instructions of one kernel with different .cta_group |
| alloc-columns             | P2   | error         | alloc/dealloc nCols not a power of two in [32, 512] |
| alloc-increasing          | P3   | error/warning | an allocation larger than the previous one (all paths / some path) |
| dealloc-missing           | P4   | error         | an allocation that can reach exit without dealloc (path-based) |
| dealloc-columns           | P4   | error         | dealloc nCols different from the live allocation's |
| tmem-out-of-bounds        | P4   | error         | tcgen05.ld/st columns beyond the allocation (alloc base + constant) |
| mma-d-outside-alloc       | P4   | error         | MMA D tile (idesc M/N, cta_group layout) beyond the allocated columns |
| alloc-after-relinquish    | P5   | error         | tcgen05.alloc reachable after relinquish_alloc_permit |
| not-sync-aligned          | P6   | error         | warp-collective tcgen05 op without .sync.aligned |
| unguarded-issue           | P7   | warning       | mma/cp/commit/shift without a predicate guard (one op per thread) |
| lane-quarter              | P8   | error         | ld/st lane window crossing a 32-lane quarter (when the lane is known) |
| ld-without-wait           | P9   | error/warning | tcgen05.ld registers read before tcgen05.wait::ld (error); MMA after an un-waited ld (warning) |
| st-without-wait           | P10  | error/warning | MMA/ld/cp after tcgen05.st without wait::st (error); barrier/arrive after it (warning) |
| acc-read-unsynced         | P11  | error/warning | tcgen05.ld of an MMA's accumulator before commit -> mbarrier wait (error when the regions overlap) |
| missing-after-thread-sync | P11  | note          | no tcgen05.fence::after_thread_sync at all (Triton 3.6 never emits it) |
| mma-uncommitted           | P12  | warning       | an MMA that can reach exit without a tcgen05.commit |
| missing-proxy-fence       | P15  | error/warning/note | st.shared/stmatrix/red/atom.shared -> tcgen05.mma/cp without fence.proxy.async: error when the write provably lands in an operand tile on a forward path, warning when the addresses cannot be told apart, note when it only arrives over a loop back edge (persistent kernels reuse epilogue scratch as pipeline buffers, refilled by cp.async/TMA) |
| alloc-result-unsynced     | P17  | warning       | the alloc's smem slot read without a barrier after the alloc |
| cta-group2-cluster        | P18  | error/warning | cta_group::2 with an odd/1-CTA cluster (error) or no cluster directive (warning) |
| idesc-field               | P19  | error         | idesc: reserved bits, types/dtype per kind, E2M1 code per kind, negate (i8), transpose (mxf4*), SF ids, scale type, scale_vec vs kind, sparsity vs .sp, legal M/N for kind+cta_group (§4), K=96 only sm_103a |
| idesc-kind                | P19  | error         | .block_scale on a non-scaled kind; mxf4nvf4 without .scale_vec |
| smem-desc-field           | P19  | error         | smem descriptor: bits 46-48 != 0b001, bits 53-60 != 0, reserved bits, swizzle 3/5/7, lbo_mode off sm_103a |
| smem-desc-swizzle         | P19  | error         | majorness vs swizzle (K-major with 128B/32B-atom; MN-major tf32 without it) |
| mma-d-lane                | P19  | error         | D address not at lane 0 (16 allowed for M=64) |
| ld-red-shape / ld-st-shape| P20  | error         | .red shape/.num rules; illegal shape x num; vector length != registers of the shape |

Not checked (documented limits): P13/P16 (cross-thread ordering, smem reuse after MMA) need thread-level
reasoning; P14 is permissive. `cp.async` (non-bulk) writes are treated as not needing a proxy fence, matching
what Triton 3.6 emits; TMA writes are async-proxy already.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

from bwtriton.ptx import Module, parse_ptx
from bwtriton.ptx.values import ValueResolver

from bwtriton.errors import InputError

from .checks import ALL_CHECKS, Ctx, LdHazard, check_trap_only, discover_tmem, ld_wait_hazards
from .checks.resources import check_resources, check_target_isa
from .findings import Finding


@dataclass
class VerifyReport:
    findings: list[Finding] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)

    def of_severity(self, severity: str) -> list[Finding]:
        """Findings of one severity ("error", "warning" or "note")."""
        return [f for f in self.findings if f.severity == severity]

    @property
    def errors(self) -> list[Finding]:
        return self.of_severity("error")

    @property
    def warnings(self) -> list[Finding]:
        return self.of_severity("warning")

    @property
    def notes(self) -> list[Finding]:
        return self.of_severity("note")

    @property
    def counts(self) -> dict[str, int]:
        return {s: len(self.of_severity(s)) for s in ("error", "warning", "note")}

    @property
    def ok(self) -> bool:
        return not self.errors

    def by_check(self, check: str) -> list[Finding]:
        return [f for f in self.findings if f.check == check]

    def to_dict(self) -> dict:
        return {"ok": self.ok, "functions": self.functions,
                "counts": self.counts,
                "findings": [f.to_dict() for f in self.findings]}


def _shared_symbols(mod: Module) -> frozenset[str]:
    names = set()
    for g in mod.globals:
        if ".shared" in g.args:
            toks = g.args.replace("[", " ").split()
            for t in reversed(toks):
                if not t.startswith(".") and not t.isdigit() and t not in ("]",):
                    names.add(t.rstrip("];"))
                    break
    return frozenset(names | {"global_smem"})


def function_contexts(mod: Module, target: str = "sm_100a") -> Iterator[Ctx]:
    """One check context per function of `mod` (TMEM allocations already linked for tcgen05 functions)."""
    shared = _shared_symbols(mod)
    tgt = target or mod.target or "sm_100a"
    for func in mod.functions:
        ctx = Ctx(mod, func, tgt, ValueResolver(func, shared))
        if any(i.is_tcgen05 for i in func.instructions):
            discover_tmem(ctx)
        yield ctx


def verify_module(mod: Module, target: str = "sm_100a", *, shared_bytes: Optional[int] = None,
                  tmem_columns: Optional[int] = None) -> VerifyReport:
    """Run every check on every function of a parsed module. `shared_bytes` (dynamic shared memory) and
    `tmem_columns` come from the compile metadata (Triton's `shared` / `tmem_size`) when known."""
    report = VerifyReport()
    report.findings.extend(check_target_isa(mod, target))
    report.findings.extend(check_resources(mod, target, shared_bytes, tmem_columns))
    for ctx in function_contexts(mod, target):
        report.functions.append(ctx.func.name)
        check_trap_only(ctx)
        if any(i.is_tcgen05 for i in ctx.func.instructions):
            for check in ALL_CHECKS:
                check(ctx)
        report.findings.extend(sorted(ctx.findings, key=lambda f: (f.line, f.check)))
    return report


def find_ld_wait_hazards(mod: Module, target: Optional[str] = None) -> dict[str, list[LdHazard]]:
    """Function name -> tcgen05.ld destination registers read before tcgen05.wait::ld (rule P9), per read."""
    return {ctx.func.name: ld_wait_hazards(ctx)[0] for ctx in function_contexts(mod, target or mod.target or "")}


def verify_ptx(ptx: Union[str, Module], target: Optional[str] = None, *, shared_bytes: Optional[int] = None,
               tmem_columns: Optional[int] = None) -> VerifyReport:
    """Parse (if needed) and verify PTX text. `target` defaults to the module's `.target`; `shared_bytes`
    (dynamic shared memory) and `tmem_columns` are the compile metadata's figures, checked against the target."""
    if isinstance(ptx, (bytes, bytearray)):
        raise InputError("verify_ptx takes PTX text (str) or a parsed bwtriton.ptx.Module, not bytes: decode it "
                         "first, e.g. verify_ptx(data.decode('utf-8'))")
    if not isinstance(ptx, (str, Module)):
        raise InputError(f"verify_ptx takes PTX text (str) or a parsed bwtriton.ptx.Module, not "
                         f"{type(ptx).__name__}: pass compiled.asm['ptx'] or the text of a .ptx file")
    mod = parse_ptx(ptx) if isinstance(ptx, str) else ptx
    return verify_module(mod, target or mod.target or "sm_100a", shared_bytes=shared_bytes,
                         tmem_columns=tmem_columns)


__all__ = ["verify_ptx", "verify_module", "find_ld_wait_hazards", "function_contexts", "LdHazard",
           "VerifyReport", "Finding"]
