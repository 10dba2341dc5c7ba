"""`bwtriton opt`: run a list of passes (ours and Triton's, in the order given) over one IR file, like triton-opt.

MLIR files (.ttir/.ttgir/.mlir) accept our TTIR/TTGIR passes and Triton's MLIR passes; text files (.ptx, .ll)
accept our PTX/LLIR passes. Lit tests drive this.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError, UnknownPassError, suggest
from .pipeline import PASS_ENTRY_RE, PassSelection, parse_pass_options, run_stage_passes, split_pass_spec
from .targets import Target, get_target
from .triton_passes import CompileContext, add_triton_pass, triton_pass_table

_MLIR_SUFFIXES = {".ttir": "ttir", ".ttgir": "ttgir", ".mlir": "ttgir"}
_TEXT_SUFFIXES = {".ptx": "ptx", ".ll": "llir", ".llir": "llir"}


@dataclass
class OptResult:
    text: str
    reports: dict[str, dict] = field(default_factory=dict)


def _module_target(text: str) -> Target | None:
    import re
    m = re.search(r'"ttg\.target"\s*=\s*"cuda:(\d+)"', text) or re.search(r"\.target\s+sm_(\d+)", text)
    if not m:
        return None
    from .targets import target_for_capability
    return target_for_capability(int(m.group(1)))


def run_opt(path: "str | Path", passes: "str | list[str]", *, target: "str | Target | None" = None,
            num_stages: int = 3) -> OptResult:
    """Run `passes` in order over the IR in `path`; returns the printed IR and our passes' reports."""
    from bwtriton.pipeline import all_passes

    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    text = path.read_text()
    suffix = path.suffix
    if suffix not in _MLIR_SUFFIXES and suffix not in _TEXT_SUFFIXES:
        raise InputError(f"{path}: unknown IR kind {suffix!r}; expected one of "
                         f"{', '.join(sorted({**_MLIR_SUFFIXES, **_TEXT_SUFFIXES}))}")
    tgt = get_target(target) if target else (_module_target(text) or get_target("sm_100a"))
    ours = all_passes()
    steps: list[tuple[str, Any, dict]] = []
    for entry in split_pass_spec(passes):
        m = PASS_ENTRY_RE.match(entry)
        if not m or m["sign"]:
            raise UnknownPassError(f"opt takes an ordered list of pass names (name or name{{opt=value}}), "
                                   f"got {entry!r}")
        name = m["name"]
        if name in ours:
            steps.append(("ours", ours[name], parse_pass_options(ours[name], m["opts"] or "")))
        elif name in triton_pass_table():
            if suffix not in _MLIR_SUFFIXES:
                raise InputError(f"Triton pass {name!r} runs on MLIR (.ttir/.ttgir), not on {suffix} files")
            steps.append(("triton", name, {}))
        else:
            valid = list(ours) + list(triton_pass_table())
            raise UnknownPassError(f"unknown pass {name!r}.{suggest(name, valid)} `bwtriton passes --triton` "
                                   f"lists ours and Triton's.")

    reports: dict[str, dict] = {}
    metadata: dict[str, Any] = {}
    if suffix in _MLIR_SUFFIXES:
        from bwtriton.mlir import load_module, module_attr_int
        from triton._C.libtriton import ir
        ir_obj = load_module(path)
        cctx = CompileContext(capability=tgt.capability, num_warps=module_attr_int(ir_obj, "ttg.num-warps", 4),
                              num_stages=num_stages, num_ctas=module_attr_int(ir_obj, "ttg.num-ctas", 1))
        for kind, what, opts in steps:
            if kind == "triton":
                pm = ir.pass_manager(ir_obj.context)
                add_triton_pass(pm, what, cctx)
                pm.run(ir_obj, f"bwtriton-opt:{what}")
            else:
                ir_obj = _run_one(what, opts, ir_obj, tgt, metadata, reports)
        return OptResult(str(ir_obj), reports)
    stage = _TEXT_SUFFIXES[suffix]
    ir_text: Any = text
    for _, cls, opts in steps:
        if cls.stage.value != stage:
            raise InputError(f"pass {cls.name} runs on {cls.stage.value}, not on {suffix} files")
        ir_text = _run_one(cls, opts, ir_text, tgt, metadata, reports)
    return OptResult(ir_text, reports)


def _run_one(cls, opts: dict, ir_obj: Any, tgt: Target, metadata: dict, reports: dict) -> Any:
    selection = PassSelection(((cls.name, tuple(sorted({**cls.option_defaults(), **opts}.items()))),))
    if not cls().applies_to(tgt):
        reports[cls.name] = {"skipped": f"pass {cls.name} does not apply to {tgt.name}"}
        return ir_obj
    return run_stage_passes(cls.stage.value, ir_obj, selection, tgt, metadata, reports)
