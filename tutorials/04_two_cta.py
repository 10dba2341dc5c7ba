"""Tutorial 04: 2-CTA (cta_group::2) tcgen05 MMAs for a plain `tl.dot` kernel, compiled on the CPU.

A CTA pair computes one 256-row tile: each CTA holds 128 rows of A and of the accumulator (in its own TMEM) and half
of B's columns; one thread of the leader CTA issues a 256 x N MMA that reads both CTAs' shared memory.

    python tutorials/04_two_cta.py

What it shows:
1. The kernel (TMA loads, B stored [N, K] and read as b.T) compiled with num_ctas=2 and no pass: Triton 3.6 fails
   in its LLVM lowering (run in a subprocess, as an LLVM fatal error may abort the process).
2. The same kernel with `pair-ctas`: what the pass changed in the TTGIR, and the resulting PTX/SASS (cta_group::2,
   cluster of 2, multicast commit, idesc M = 256, cluster barriers).
3. An ineligible tile (BLOCK_M = 128) refused with the reason, and the `auto` heuristic for choosing 2-CTA.
"""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path


import bwtriton
from bwtriton.examples.tma_matmul import matmul_tma_bt_kernel, tma_bt_spec
from bwtriton.pairing import should_pair
from bwtriton.ptx.descriptors import decode_idesc
from bwtriton.report import wrap


def compile_kernel(block_m: int = 256, block_n: int = 128, block_k: int = 64, **kw):
    # The kernel (bwtriton/examples/tma_matmul.py): with num_ctas=2, tl.program_id is the cluster's id, so each
    # CTA pair computes one 256-row tile.
    spec = tma_bt_spec("fp16", block_m, block_n, block_k)
    spec.pop("num_stages"), spec.pop("num_warps")
    return bwtriton.compile(matmul_tma_bt_kernel, **spec, **kw)


def without_pass() -> None:
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})
        import importlib; t = importlib.import_module("04_two_cta")
        t.compile_kernel(num_ctas=2, passes="none")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    err = next((ln for ln in (proc.stderr + proc.stdout).splitlines() if "LLVM ERROR" in ln), "(no LLVM error)")
    print(f"1. num_ctas=2, no pass: exit status {proc.returncode}: {err.strip()}")


def with_pass() -> None:
    res = compile_kernel(two_cta=True)   # = num_ctas=2 + pass pair-ctas
    rep = res.reports["pair-ctas"]
    print("\n2. two_cta=True (num_ctas=2 + pair-ctas)")
    print(f"   paired: {rep['paired']}; what the pass changed in Triton's TTGIR:")
    for change in rep["changes"]:
        print(f"     - {change}")
    ptx = res.asm["ptx"]
    ops = sorted(set(re.findall(r"tcgen05\.(?:alloc|dealloc|relinquish_alloc_permit|mma|commit)[\w:.]*", ptx)))
    print("   tcgen05 ops in the PTX:")
    for op in ops:
        print(f"     {op}")
    directives = re.findall(r"^(\.explicitcluster|\.reqnctapercluster \d+)", ptx, re.M)
    print(f"   cluster directives: {', '.join(directives)}")
    print(f"   cluster barriers (before each MMA issue, and before the dealloc): "
          f"{ptx.count('barrier.cluster.wait')}")
    consts = dict(re.findall(r"mov\.b32\s+(%r\d+),\s*(-?\d+);", ptx))
    reg = re.search(r"tcgen05\.mma\.cta_group::2\.kind::f16\s+\[[^\]]*\],\s*%rd\d+,\s*%rd\d+,\s*(%r\d+)", ptx).group(1)
    d = decode_idesc(int(consts[reg]) & 0xFFFFFFFF, "f16")
    print(f"   idesc 0x{d.value:08X}: M={d.m} N={d.n} a={d.a_type} b={d.b_type} d={d.d_type} (M is the pair's)")
    sass = sorted(set(re.findall(r"UTC\w+\.2CTA[\w.]*", res.asm["sass"])))
    print(f"   SASS: {', '.join(sass)}")


def ineligible_and_auto() -> None:
    print("\n3. a 128-row tile with two_cta=True:")
    try:
        compile_kernel(block_m=128, two_cta=True)
    except bwtriton.CompileError as exc:
        print(wrap(f"refused: {str(exc).splitlines()[0]}", indent="     ", first="   "))
    print("   auto heuristic (bwtriton.pairing.should_pair, block 256x128):")
    for shape in [(8192, 8192, 8192), (256, 8192, 8192), (8192, 8192, 512), (1300, 4096, 4096), (1280, 1920, 4096)]:
        print(f"     M,N,K={shape}: {'pair' if should_pair(*shape) else '1-CTA'}")


if __name__ == "__main__":
    without_pass()
    with_pass()
    ineligible_and_auto()
