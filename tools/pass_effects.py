#!/usr/bin/env python3
"""What each bwtriton pass changes on the installed Triton's output, over the example kernels (sm_100a): the
measured half of docs/triton_versions.md's table "what upstream now does itself, what bwtriton still adds".

    python tools/pass_effects.py                       # the installed Triton, a markdown row per kernel
    python tools/pass_effects.py --versions=all --json results.json   # every supported release (environments)

Per kernel: `tcgen05.wait::ld` inserted by insert-tcgen05-wait-ld, fences by insert-proxy-fence, whether the final PTX differs from Triton's,
verifier errors/warnings on Triton's own PTX and on ours, and the PTX's barriers and fences.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNEL_FILES = ("python/bwtriton/examples/matmul.py", "python/bwtriton/examples/tma_matmul.py",
                "python/bwtriton/examples/scaled.py")
#: Test-corpus kernels where a pass is known to matter (tests/fixtures): file, kernel, compile keywords.
EXTRA_KERNELS = (("tests/fixtures/tmem_kernels.py", "multi_acc_kernel",
                  dict(constexprs=dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, NUM_ACC=2), num_warps=4, num_stages=2,
                       signature="MULTI_ACC_SIGNATURE")),
                 ("corpus/blackwell_bugs/triton_10590_fwd_h_recurrence.py", None, None))
_COUNTED = {"fence.proxy.async": r"fence\.proxy\.async", "bar.sync/barrier.sync": r"\b(?:bar|barrier)\.sync\b",
            "mbarrier.try_wait": r"mbarrier\.try_wait", "tcgen05.wait::ld": r"tcgen05\.wait::ld",
            "barrier.cluster": r"barrier\.cluster\.(?:arrive|wait)"}


def _findings(ptx: str) -> str:
    from bwtriton.ptx import parse_ptx  # the package under test (tools/ is not a package)
    from bwtriton.verify import verify_module  # the package under test
    counts = verify_module(parse_ptx(ptx), "sm_100a").counts
    return f"{counts.get('error', 0)}E/{counts.get('warning', 0)}W"


def _record(kernel: str, res) -> dict:
    from bwtriton.compat.versions import installed_text  # the package under test (tools/ is not a package)
    ptx, ours = res.asm.get("ptx_triton", res.asm["ptx"]), res.asm["ptx"]
    return {"triton": installed_text(), "kernel": kernel,
            "wait_ld_inserted": res.reports.get("insert-tcgen05-wait-ld", {}).get("count", 0),
            "proxy_fence_inserted": res.reports.get("insert-proxy-fence", {}).get("count", 0),
            "ptx_changed": ptx != ours, "findings_triton": _findings(ptx), "findings_ours": _findings(ours),
            **{k: len(re.findall(p, ours)) for k, p in _COUNTED.items()}}


def measure() -> list[dict]:
    """One record per example kernel (each BWTRITON_SPECS config) and extra kernel on the installed Triton."""
    import bwtriton
    from bwtriton.loading import load_kernel  # the package under test
    from bwtriton.loading import import_kernel_file as import_file  # the package under test
    from bwtriton.regress.snapshot import kernel_configs  # the package under test
    rows = []
    for rel in KERNEL_FILES:
        module = import_file(str(ROOT / rel))
        for name in module.BWTRITON_SPECS:
            fn, _ = load_kernel(f"{ROOT / rel}:{name}")
            for spec in kernel_configs(module, name):
                spec = {k: v for k, v in spec.items() if k != "name"}
                res = bwtriton.compile(fn, target="sm_100a", **spec)
                rows.append(_record(f"{Path(rel).stem}:{name}", res))
    for rel, name, spec in EXTRA_KERNELS:
        module = import_file(str(ROOT / rel))
        if name is None:  # a corpus file: its BWTRITON_SPECS
            name = next(iter(module.BWTRITON_SPECS))
            fn, _ = load_kernel(f"{ROOT / rel}:{name}")
            for one in kernel_configs(module, name):
                res = bwtriton.compile(fn, target="sm_100a", **{k: v for k, v in one.items() if k != "name"})
                rows.append(_record(f"{Path(rel).stem}:{name}", res))
            continue
        spec = {**spec, "signature": getattr(module, spec["signature"])}
        res = bwtriton.compile(getattr(module, name), target="sm_100a", **spec)
        rows.append(_record(f"{Path(rel).stem}:{name}", res))
    return rows


def main(argv: list[str]) -> int:
    versions = next((a.split("=", 1)[1] for a in argv if a.startswith("--versions=")), None)
    out = next((a.split("=", 1)[1] for a in argv if a.startswith("--json=")), None)
    if versions:
        from bwtriton.compat.environments import ensure_env  # the package under test
        from bwtriton.compat.versions import SUPPORTED  # the package under test
        rows = []
        for version in (SUPPORTED if versions == "all" else versions.split(",")):
            python = ensure_env(version, ROOT, progress=lambda m: print(m, file=sys.stderr))
            proc = subprocess.run([str(python), __file__, "--raw"], capture_output=True, text=True, cwd=ROOT)
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                return 1
            rows += json.loads(proc.stdout.strip().splitlines()[-1])
    else:
        rows = measure()
    if "--raw" in argv:
        print(json.dumps(rows))
        return 0
    if out:
        Path(out).write_text(json.dumps(rows, indent=1) + "\n")
    keys = list(rows[0]) if rows else []
    print("| " + " | ".join(keys) + " |\n|" + " --- |" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
