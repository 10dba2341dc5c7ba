"""Tutorial 05: regression testing of emitted code, on the CPU: snapshot a kernel, change a pass option, diff;
then run an upstream-style lit file through `bwtriton-opt` (triton-opt's command line).

    python tutorials/05_regression_testing.py

What it shows:
1. `bwtriton snapshot` of the tutorial matmul for sm_100a: instruction census, registers, shared memory.
2. The same kernel with one pass option changed: the software pipeliner's depth, 2 -> 3 (`tritongpu-pipeline{num-stages}`,
   which Triton takes from `num_stages`), snapshotted again and compared with `bwtriton diff --fail-on`: the
   grouped report and exit code 1 because the change matches the rules.
3. A lit file written in upstream Triton's style (`// RUN: %triton-opt %s -split-input-file ...`), run with lit
   where `%triton-opt` is `python -m bwtriton.opt`.
See docs/regression_testing.md for everything else (cross-version diffs, the checked-in corpus snapshot).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

KERNEL_FILE = """\
from bwtriton.examples.matmul import matmul_kernel, matmul_signature, matmul_constexprs
BWTRITON_SPECS = {{"matmul_kernel": {{"signature": matmul_signature("fp16"), "constexprs": matmul_constexprs(),
                                    "num_warps": 4, "num_stages": {stages}}}}}
"""

LIT_FILE = """\
// RUN: %triton-opt %s -split-input-file -canonicalize | FileCheck %s
// RUN: %triton-opt %s -split-input-file '--tritongpu-hoist-tmem-alloc=hoist-out-of-if=true' | FileCheck %s --check-prefix=HOIST

// CHECK-LABEL: tt.func @fold
// CHECK-NOT:     arith.addi
// CHECK:       // -----
// CHECK-LABEL: tt.func @keep
// CHECK:         arith.muli
// HOIST: tt.func @fold
module attributes {"ttg.num-warps" = 4 : i32, "ttg.num-ctas" = 1 : i32} {
  tt.func @fold(%arg0: i32) -> i32 {
    %c0 = arith.constant 0 : i32
    %0 = arith.addi %arg0, %c0 : i32
    tt.return %0 : i32
  }
}

// -----

module attributes {"ttg.num-warps" = 4 : i32, "ttg.num-ctas" = 1 : i32} {
  tt.func @keep(%arg0: i32) -> i32 {
    %0 = arith.muli %arg0, %arg0 : i32
    tt.return %0 : i32
  }
}
"""

LIT_CFG = """\
import os, shutil, sys
import lit.formats
config.name = "tutorial-05"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.substitutions.append(("%triton-opt", f"{sys.executable} -m bwtriton.opt"))
config.substitutions.append(("FileCheck", shutil.which("filecheck") or shutil.which("FileCheck")))
config.environment["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
"""


def bwtriton(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run the bwtriton CLI the way a user would (a separate process, output captured)."""
    return subprocess.run([sys.executable, "-m", "bwtriton", *args], cwd=cwd, capture_output=True, text=True,
                          env=_env(), timeout=900)


def _env() -> dict:
    python_dir = str(Path(__file__).resolve().parent.parent / "python")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [python_dir, os.environ.get("PYTHONPATH")]))}


def snapshot(work: Path, stages: int, out: str) -> dict:
    (work / "kernels.py").write_text(KERNEL_FILE.format(stages=stages))
    proc = bwtriton("snapshot", "kernels.py", "--targets", "sm_100a", "-o", out, "-q",
                    "--cache", str(work / "cache"), cwd=work)
    if proc.returncode != 0:
        sys.exit(f"snapshot failed:\n{proc.stderr}")
    print(" ", proc.stdout.strip())
    return json.loads((work / out).read_text())


def show_record(doc: dict) -> None:
    (key, rec), = doc["records"].items()
    res = rec["resources"]
    print(f"  {key}:\n    registers={res['registers']} shared_bytes={res['shared_bytes']} "
          f"tmem_columns={res['tmem_columns']} spills={res['spill_stores'] + res['spill_loads']}")
    for family in ("tcgen05", "mbarrier"):
        for op, n in rec["census"].get(family, {}).items():
            print(f"    {n:3d} x {op}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        print("1. snapshot: matmul_kernel for sm_100a, num_stages=2 (tritongpu-pipeline{num-stages=2})")
        show_record(snapshot(work, 2, "before.json"))
        print("\n2. change the pipeliner's num-stages to 3, snapshot again, diff")
        show_record(snapshot(work, 3, "after.json"))
        proc = bwtriton("diff", "before.json", "after.json", "--fail-on", "shared>+0,mbarrier,registers>+8",
                        cwd=work)
        report = proc.stdout
        # the report is wrapped to 100 columns; re-wrap its long bullets so the "  | " indent keeps to 100
        lines = [textwrap.fill(l, 96, subsequent_indent="  ", break_long_words=False) if len(l) > 96 else l
                 for l in report.splitlines() if not l.startswith("| SASS")]
        print(textwrap.indent("\n".join(lines), "  | "))
        print(f"  bwtriton diff exit code {proc.returncode} (1: a change matched --fail-on)")

        print("\n3. an upstream-style lit file, %triton-opt = python -m bwtriton.opt")
        (work / "lit").mkdir()
        (work / "lit" / "split.mlir").write_text(LIT_FILE)
        (work / "lit" / "lit.cfg.py").write_text(LIT_CFG)
        lit = subprocess.run([sys.executable, "-c", "import lit.main; lit.main.main()", "-v", str(work / "lit")],
                             capture_output=True, text=True, env=_env(), timeout=600)
        print(textwrap.indent("\n".join(l for l in lit.stdout.splitlines() if l.startswith(("PASS", "FAIL",
                                                                                              "  Passed",
                                                                                              "  Failed"))), "  "))
        if lit.returncode != 0:
            sys.exit(lit.stdout[-3000:] + lit.stderr[-2000:])


if __name__ == "__main__":
    main()
