"""What a snapshot records about one compiled kernel, from its PTX, cubin/SASS and ptxas: an instruction census
by family, decoded tcgen05 descriptors, registers/spills, a SASS opcode histogram, verifier findings and
normalised stage hashes. Readers are version-tolerant (PTX `.version 9.x` from newer Triton parses the same)."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from bwtriton.compat.ptxas import triton_ptxas_flags
from bwtriton.ptx.descriptors import decode_smem_desc

from . import canonical

#: Instruction families the census groups by (first matching prefix wins).
FAMILIES = (
    ("tcgen05", ("tcgen05.",)),
    ("wgmma", ("wgmma.",)),
    ("mma_sync", ("mma.sync", "mma.sp")),
    ("mbarrier", ("mbarrier.",)),
    ("fences", ("fence.",)),
    ("barriers", ("bar.", "barrier.")),
    ("tma", ("cp.async.bulk.tensor", "cp.reduce.async.bulk.tensor")),
)
_TYPE_SUFFIX = re.compile(r"\.(b|s|u|f|e\dm\d|bf|tf)\d+(x\d+)?$")


def family_of(opcode: str) -> str | None:
    for family, prefixes in FAMILIES:
        if opcode.startswith(prefixes):
            return family
    return None


def _census_key(full_opcode: str) -> str:
    """Opcode with its modifiers (kind, cta_group, shape, semantics, scope) but without trailing type suffixes,
    so 'mbarrier.arrive.release.cluster.shared::cluster.b64' -> 'mbarrier.arrive.release.cluster.shared::cluster'."""
    key = full_opcode
    while _TYPE_SUFFIX.search(key):
        key = _TYPE_SUFFIX.sub("", key)
    return key


def ptx_census(module: Any) -> dict[str, dict[str, int]]:
    """family -> {opcode with modifiers: static count} over every function of a parsed PTX module."""
    out: dict[str, Counter] = {}
    for func in module.functions:
        for ins in func.instructions:
            family = family_of(ins.full_opcode)
            if family:
                out.setdefault(family, Counter())[_census_key(ins.full_opcode)] += 1
    return {fam: dict(sorted(c.items())) for fam, c in sorted(out.items())}


def decoded_descriptors(module: Any, target: str) -> dict[str, list[dict]]:
    """The distinct decoded instruction descriptors (idesc) and A/B shared-memory descriptors of the module's
    tcgen05.mma instructions, as the verifier's value resolver sees them (known bits only)."""
    from bwtriton.verify import function_contexts  # heavy: the verifier imports z3
    from bwtriton.verify.checks.context import decode_mma  # heavy: the verifier imports z3
    idescs, sdescs = {}, {}
    for ctx in function_contexts(module, target):
        for ins in ctx.func.find("tcgen05.mma"):
            d = decode_mma(ctx, ins)
            if d is not None:
                summary = {**d.summary(), "cta_group": ins.modifier_value("cta_group")}
                idescs[repr(sorted(summary.items()))] = summary
            for idx, name in ((1, "A"), (2, "B")):
                if idx >= len(ins.operands) or ins.operands[idx].kind != "reg":
                    continue
                v = ctx.resolver.operand(ins.operands[idx], 64)
                if v is None or v.known_bits(64)[1] == 0:
                    continue
                s = {"operand": name, **decode_smem_desc(*v.known_bits(64)).summary()}
                s.pop("start_address", None)  # the address moves with unrelated smem changes
                s.pop("value", None)
                sdescs[repr(sorted(s.items()))] = s
    return {"idesc": [idescs[k] for k in sorted(idescs)], "smem_desc": [sdescs[k] for k in sorted(sdescs)]}


def verifier_findings(module: Any, target: str) -> dict[str, Any]:
    """Counts by severity and by 'severity/check' of bwtriton's tcgen05 verifier (messages kept for reading)."""
    from bwtriton.verify import verify_module  # heavy: the verifier imports z3
    report = verify_module(module, target)
    by_check = Counter(f"{f.severity}/{f.check}" for f in report.findings)
    return {"counts": report.counts, "by_check": dict(sorted(by_check.items())),
            "messages": sorted({f"{f.severity} {f.check}: {f.message}" for f in report.findings})}


# --------------------------------------------------------------------------------------------------------------
# ptxas and SASS
# --------------------------------------------------------------------------------------------------------------

def ptxas_path(capability: int) -> str:
    """The ptxas this Triton itself uses for `capability` (its `get_ptxas`; Triton 3.6 picks the Blackwell build
    for sm_100+, newer ones for sm_90+ too, since their PTX .version is beyond the older bundled ptxas)."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas
        return get_ptxas(capability).path
    except (ImportError, AttributeError, RuntimeError):
        import triton
        bindir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
        for name in (("ptxas-blackwell", "ptxas") if capability >= 90 else ("ptxas",)):
            if (bindir / name).exists():
                return str(bindir / name)
        raise FileNotFoundError(f"no ptxas under {bindir}") from None


_PTXAS_USED = re.compile(r"Used (\d+) registers")
_PTXAS_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def ptxas_resources(ptx: str, target: str, capability: int) -> tuple[dict[str, int], bytes]:
    """Registers, spill stores/loads and stack frame bytes from `ptxas -v` (summed over entry functions), and the
    cubin ptxas wrote."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        Path(src).write_text(ptx)
        proc = subprocess.run([ptxas_path(capability), "-v", *triton_ptxas_flags(), f"--gpu-name={target}", src,
                               "-o", out],
                              capture_output=True, text=True, timeout=300)
        cubin = Path(out).read_bytes() if proc.returncode == 0 else b""
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"ptxas failed: {text.strip()[-400:]}")
    regs = [int(m) for m in _PTXAS_USED.findall(text)]
    spills = [tuple(map(int, m)) for m in _PTXAS_SPILL.findall(text)]
    return {"registers": max(regs, default=0), "stack_bytes": sum(s[0] for s in spills),
            "spill_stores": sum(s[1] for s in spills), "spill_loads": sum(s[2] for s in spills)}, cubin


_SASS_INS = re.compile(r"^(?:@!?U?P[T\d]+\s+)?(?P<op>[A-Z][A-Z0-9_]*)(?:\.[\w.]+)?(?:\s|;|$)")


def sass_histogram(sass: str) -> dict[str, int]:
    """Opcode (without modifiers) -> count over a disassembly: raw `cuobjdump -sass` lines
    (`/*0010*/  MOV R1, ... ;`) or Triton's `get_sass` form (`<control>\tMOV R1, ... ;`)."""
    counts: Counter = Counter()
    for line in sass.splitlines():
        body = re.sub(r"^\s*/\*[0-9a-f]+\*/\s*", "", line).split("\t")[-1].strip()
        m = _SASS_INS.match(body)
        if m and not body.endswith(":") and ";" in body:
            counts[m["op"]] += 1
    return dict(sorted(counts.items()))


# --------------------------------------------------------------------------------------------------------------
# Stage hashes
# --------------------------------------------------------------------------------------------------------------

_MLIR_LOC = re.compile(r"\s*loc\((?:[^()]|\([^()]*\))*\)")
_PTX_DEBUG = re.compile(r"^\s*(\.loc|\.file|//).*$|^\s*@\[.*$", re.M)


def normalise_stage(stage: str, text: str) -> str:
    """Stage text without what depends on where the source lives (locations, .file/.loc, comments), in the
    canonical form of `canonical.py` (value names and the order of side-effect-free operations, which Triton
    emits nondeterministically, removed). `stage` may carry a suffix naming whose text it is (`ptx_triton`:
    Triton's own, before bwtriton's passes)."""
    stage = stage.split("_", 1)[0]
    if stage.endswith(("ttir", "ttgir")):
        text = "\n".join(l for l in text.splitlines() if not l.startswith("#loc") and not l.startswith("!"))
        return canonical.canonical_mlir(_MLIR_LOC.sub("", text))
    if stage.endswith("llir"):
        text = "\n".join(l for l in text.splitlines() if not l.startswith("!"))
        return canonical.canonical_llvm(_MLIR_LOC.sub("", text))
    if stage.endswith("ptx"):
        text = text.split(".section\t.debug", 1)[0].split(".section .debug", 1)[0]
        return canonical.canonical_ptx(_PTX_DEBUG.sub("", text))
    if stage == "sass":
        # Register numbers are left out: the bundled ptxas-blackwell is not deterministic (the same PTX compiled
        # twice gives one of two SASS files differing only in which uniform registers hold what; measured).
        text = re.sub(r"^\s*(code for|Function|\.headerflags|//).*$", "", text, flags=re.M)
        return re.sub(r"\bU?(R|P)(\d+|Z|T)\b", r"\1", text)
    return text


def stage_hashes(asm: dict[str, Any]) -> dict[str, str]:
    """sha256[:16] of each text stage (normalised) and of the SASS; binary stages are represented by the SASS."""
    out = {}
    for stage, data in asm.items():
        if isinstance(data, bytes) or stage in ("json", "source"):
            continue
        out[stage] = hashlib.sha256(normalise_stage(stage, data).encode()).hexdigest()[:16]
    return dict(sorted(out.items()))
