"""PTX-stage pass `verify-tcgen05`: run the static tcgen05/TMEM protocol verifier on the emitted PTX.

Error findings fail the compile (`ctx.error` with the findings attached); warnings are recorded in the
report (`compiled.reports["verify-tcgen05"]`). The PTX is never changed.
"""
from __future__ import annotations

from bwtriton.passes.base import Pass, PassContext, PassOption, Stage, register_pass


@register_pass
class VerifyTcgen05(Pass):
    name = "verify-tcgen05"
    stage = Stage.PTX
    purpose = "statically check tcgen05/TMEM protocol rules (alloc/dealloc, waits, fences, descriptors) in the PTX"
    options = (PassOption("fail_on_error", bool, True, "turn error findings into a compile failure"),
               PassOption("notes", bool, False, "also record note-severity findings in the report"),
               PassOption("limits", bool, True, "check shared memory / TMEM columns against the target's limits "
                          "(bwtriton.compile turns this off: it checks them itself, naming the knobs)"))
    default_enabled = True

    def applies_to(self, target) -> bool:
        return bool(target.has_tcgen05)

    def run(self, ir, ctx: PassContext):
        from bwtriton.verify import verify_ptx  # heavy: the verifier imports z3
        meta = ctx.metadata or {}
        limits = ctx.options.get("limits", True)
        report = verify_ptx(ir, target=ctx.target.name, shared_bytes=meta.get("shared") if limits else None,
                            tmem_columns=meta.get("tmem_size") if limits else None)
        keep_notes = ctx.options.get("notes", False)
        findings = [f for f in report.findings if keep_notes or f.severity != "note"]
        ctx.report["findings"] = [f.to_dict() for f in findings]
        ctx.report["counts"] = report.counts  # every finding, the hidden notes included
        hidden = len(report.findings) - len(findings)
        if hidden:  # say why counts has notes that findings does not list
            ctx.report["hidden_notes"] = {"count": hidden, "show_with": "--passes '+verify-tcgen05{notes=true}'"}
        for f in report.warnings:
            ctx.warn(f"line {f.line}: [{f.check}/{f.rule}] {f.message}")
        if report.errors and ctx.options.get("fail_on_error", True):
            first = report.errors[0]
            more = f" (+{len(report.errors) - 1} more)" if len(report.errors) > 1 else ""
            ctx.error(f"PTX line {first.line}: [{first.check}/{first.rule}] {first.message}{more}",
                      findings=[f.to_dict() for f in report.errors])
        return None
