"""Module-level checks: the `.target` supports tcgen05 (T2), and the kernel's shared memory and TMEM fit the
target (T3). Facts and sources: docs/tcgen05_facts.md §"Targets and limits"."""
from __future__ import annotations

import re
from typing import Optional

from bwtriton.ptx.ir import Module
from bwtriton.ptx.shared import parse_shared_decl
from bwtriton.targets import MAX_SHARED_BYTES as SMEM_LIMIT, TMEM_COLUMNS

from ..findings import Finding

#: PTX targets that have the tcgen05 family (PTX ISA "tcgen05" target notes: sm_100a/101a(=110a)/103a, and the
#: family-specific sm_100f/sm_103f/sm_110f from PTX ISA 8.8)
TCGEN05_TARGETS = frozenset(("sm_100a", "sm_101a", "sm_103a", "sm_110a", "sm_100f", "sm_101f", "sm_103f",
                             "sm_110f"))


def _base(target: str) -> str:
    m = re.match(r"(sm_\d+)", target or "")
    return m.group(1) if m else ""


def static_shared_bytes(mod: Module) -> int:
    """Bytes of the module's sized `.shared` variables (the `.extern` dynamic window counts as 0)."""
    decls = (parse_shared_decl(g.args) for g in mod.globals if ".shared" in g.args and ".extern" not in g.args)
    return sum(d.nbytes for d in decls if d is not None)


def _tcgen05_line(mod: Module) -> Optional[tuple[int, str]]:
    for f in mod.functions:
        for ins in f.instructions:
            if ins.is_tcgen05:
                return ins.line, f.name
    return None


def check_target_isa(mod: Module, target: str) -> list[Finding]:
    """T2: tcgen05 instructions need a `.target` (and verification target) that has them."""
    first = _tcgen05_line(mod)
    if first is None:
        return []
    out = []
    for what, name in (("the module's .target", mod.target), ("the verification target", target)):
        if name and name not in TCGEN05_TARGETS:
            out.append(Finding("target-no-tcgen05", "T2", "error",
                               f"tcgen05 instructions under {what} {name}, which has no tcgen05/TMEM: ptxas rejects "
                               f"them; compile for one of {', '.join(sorted(TCGEN05_TARGETS))} (e.g. sm_100a)",
                               first[0], first[1]))
            break
    return out


def check_resources(mod: Module, target: str, dynamic_shared: Optional[int] = None,
                    tmem_columns: Optional[int] = None) -> list[Finding]:
    """T3: static + dynamic shared memory and TMEM columns (from the compile metadata) within the target's limits."""
    out = []
    fn = mod.entries[0].name if mod.entries else (mod.functions[0].name if mod.functions else "")
    line = mod.entries[0].line if mod.entries else 1
    limit = SMEM_LIMIT.get(_base(target))
    static = static_shared_bytes(mod)
    total = static + (dynamic_shared or 0)
    if limit is not None and total > limit:
        out.append(Finding("smem-over-limit", "T3", "error",
                           f"the kernel needs {total} bytes of shared memory ({static} static + "
                           f"{dynamic_shared or 0} dynamic) but {target} allows {limit} per CTA: lower num_stages "
                           "or the BLOCK sizes", line, fn))
    if tmem_columns is not None and tmem_columns > TMEM_COLUMNS and _base(target) + "a" in TCGEN05_TARGETS:
        out.append(Finding("tmem-over-limit", "T3", "error",
                           f"the kernel needs {tmem_columns} TMEM columns but a CTA has {TMEM_COLUMNS}: shrink the "
                           "accumulator tiles (BLOCK_M x BLOCK_N) or their number", line, fn))
    return out
