"""Static tcgen05/TMEM protocol verifier for sm_100a PTX.

    from bwtriton.verify import verify_ptx
    report = verify_ptx(ptx_text, target="sm_100a")
    report.errors, report.warnings, report.notes      # lists of Finding(check, rule, severity, message, line, ...)

CLI: `bwtriton check FILE.ptx [--json] [--explain]` (exit 1 on an error finding, 2 for unreadable input).
Compile pass: `verify-tcgen05` (PTX stage, on by default for targets with tcgen05).

The rules (P1-P20 from the PTX ISA, T1-T5 ours) are tabled in docs/verifier.md with check id, severity,
PTX ISA source and lit test, together with the soundness policy; the facts behind them are in
docs/tcgen05_facts.md. In short: path checks run
a forward dataflow over the CFG whose branch facts prune infeasible paths (value-keyed comparisons related
through z3, `bwtriton.ptx.smt`); an error needs a path known to be feasible, an undecided one gives a warning.
Register reads of tcgen05.ld results before tcgen05.wait::ld are notes (P9); TMEM overwrites of a pending
ld's columns are errors.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

from bwtriton.ptx import Module, parse_ptx
from bwtriton.ptx.guards import constant_guards, without_constant_guards
from bwtriton.ptx.shared import parse_shared_decl
from bwtriton.ptx.smt import Facts
from bwtriton.ptx.stages import StageResolver

from bwtriton.errors import InputError

from .checks import ALL_CHECKS, UNGATED_CHECKS, Ctx, LdHazard, check_trap_only, discover_tmem, ld_wait_hazards
from .checks.clc import check_clc
from .checks.context import threads_per_cta
from .checks.induction import refine_loop_barriers
from .checks.resources import check_resources, check_target_isa
from .findings import Finding, finding_order
from .solver import SolverMissingError, require_solver


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
    decls = (parse_shared_decl(g.args) for g in mod.globals if ".shared" in g.args)
    return frozenset({d.name for d in decls if d is not None} | {"global_smem"})


def function_contexts(mod: Module, target: str = "sm_100a", *, drop_dead: bool = False) -> Iterator[Ctx]:
    """One check context per function of `mod` (TMEM allocations already linked for tcgen05 functions). With
    `drop_dead`, each context works on a copy of its function without the instructions under constant-false
    guards (`bwtriton.ptx.guards`); instruction indices then differ from `mod`'s."""
    shared = _shared_symbols(mod)
    tgt = target or mod.target or "sm_100a"
    for func in mod.functions:
        if drop_dead and any(i.guard is not None for i in func.instructions):
            func = without_constant_guards(func, constant_guards(func, Facts(ntid=threads_per_cta(func))))
        ctx = Ctx(mod, func, tgt, StageResolver(func, shared))   # loop-carried stage/phase registers bounded
        if any(i.is_tcgen05 for i in func.instructions):
            discover_tmem(ctx)
        refine_loop_barriers(ctx)   # induction-variable barrier addresses, bounded by z3
        yield ctx


def verify_module(mod: Module, target: str = "sm_100a", *, shared_bytes: Optional[int] = None,
                  tmem_columns: Optional[int] = None) -> VerifyReport:
    """Run every check on every function of a parsed module. `shared_bytes` (dynamic shared memory) and
    `tmem_columns` come from the compile metadata (Triton's `shared` / `tmem_size`) when known."""
    require_solver()
    report = VerifyReport()
    report.findings.extend(check_target_isa(mod, target))
    report.findings.extend(check_resources(mod, target, shared_bytes, tmem_columns))
    for ctx in function_contexts(mod, target, drop_dead=True):   # a never-running instruction obliges nothing
        report.functions.append(ctx.func.name)
        check_trap_only(ctx)
        check_clc(ctx)  # CLC (rules C1-C5) needs no tcgen05 in the function
        for check in UNGATED_CHECKS:  # P21, T6, T7: TMA stores and mbarriers exist without tcgen05 too
            check(ctx)
        if any(i.is_tcgen05 for i in ctx.func.instructions):
            for check in ALL_CHECKS:
                check(ctx)
        report.findings.extend(ctx.findings)
    report.findings.sort(key=finding_order)
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
           "VerifyReport", "Finding", "SolverMissingError", "require_solver"]
