"""Verify time of warp-specialized kernels (CPU seconds of `verify_ptx`, no GPU).

Goal (verifier issue, round 3): <= 2 s CPU for a ~5k-line warp-specialized kernel. The rows are our
tutorial-09-style persistent warp-specialized GEMM (Triton `warp_specialize`, tensor descriptors), the Gluon
persistent warp-specialized kernel (and its BN = 256 variant with scalar masked stores, ~4.2k lines: the large
row), the corpus's Gluon 2-CTA kernel, and the tutorial-08 grouped GEMM (~4.9k lines, not warp-specialized).
Last, for scale, the slowest kernels of the corpora (1.5-2.2k lines, not warp-specialized): the emulator corpus's
persistent TMA GEMMs (host and device tensor descriptors, loop-carried accumulator buffer in the epilogue's TMEM
address) and tutorial-09's descriptor kernel at 8 warps / 3 stages.
Each row is the median of 3 runs of `verify_ptx` on the compiled PTX (time.process_time, so
the number does not depend on the other processes of the machine). Beside it, what the user waits for anyway:
the CPU time of the same kernel's `bwtriton.compile` with the verify pass off (`-verify-tcgen05`; a cached
compile shows as near 0).

    PYTHONPATH=python:tests python benchmarks/verify_ws_time.py
"""
from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

VERIFY_TARGET_S = 2.0


def _triton_ws(bn: int, warps: int, stages: int):
    import bwtriton
    from fixtures import upstream_style as us
    kernel, sig, cx = us.CASES["t09_persistent_desc_ws"]
    sig = {**sig, **us._desc_sig(128, bn, 64)}
    opts = dict(signature=sig, constexprs={**cx, "BN": bn}, target="sm_100a", num_stages=stages,
                num_warps=warps, num_ctas=1, divisible_by_16=None,
                passes=["-verify-tcgen05"])
    return bwtriton.compile(kernel, **opts).asm["ptx"]


def _grouped():
    import bwtriton
    from fixtures import upstream_style as us
    return bwtriton.compile(us.CASES["t08_grouped_gemm"][0],
                            **{**us.options("t08_grouped_gemm", True, 3, 4, 1), "passes": ["-verify-tcgen05"]}
                            ).asm["ptx"]


def _persistent_desc_8warps():
    import bwtriton
    from fixtures import upstream_style as us
    return bwtriton.compile(us.CASES["t09_persistent_desc"][0],
                            **{**us.options("t09_persistent_desc", True, 3, 8, 1), "passes": ["-verify-tcgen05"]}
                            ).asm["ptx"]


def _rows():
    import emu_cases
    from fixtures import gluon_persistent_ws
    from fixtures import kernels as corpus
    return [
        ("t09 persistent ws BN=128 4 warps 3 stages", lambda: _triton_ws(128, 4, 3)),
        ("t09 persistent ws BN=256 8 warps 3 stages", lambda: _triton_ws(256, 8, 3)),
        ("t09 persistent ws BN=128 8 warps 4 stages", lambda: _triton_ws(128, 8, 4)),
        ("gluon persistent ws (3 stages, 2 acc buffers)", gluon_persistent_ws.compile_ptx),
        ("gluon persistent ws BN=256, masked C^T stores", lambda: gluon_persistent_ws.compile_ptx(bn=256, masked=True)),
        ("t08 grouped GEMM (not ws, for scale)", _grouped),
        ("gluon 2-CTA (corpus)", corpus._compile_gluon_two_ctas),
        ("emu t09 persistent TMA (not ws)", lambda: emu_cases.compile_persistent_tma().asm["ptx"]),
        ("emu t09 device-descriptor persistent (not ws)",
         lambda: emu_cases.compile_persistent_tma(device_desc=True).asm["ptx"]),
        ("t09 persistent desc 8 warps 3 stages (not ws)", _persistent_desc_8warps),
    ]


def main() -> None:
    from bwtriton.verify import verify_ptx
    print(f"{'kernel':48s} {'lines':>6s} {'compile s':>9s} {'verify CPU s':>12s} {'errors':>6s}  goal <= "
          f"{VERIFY_TARGET_S} s at ~5k lines")
    for name, build in _rows():
        t0 = time.process_time()
        try:
            ptx = build()
        except Exception as exc:  # a configuration Triton rejects is reported, not fatal
            print(f"{name:48s} not compiled: {type(exc).__name__}: {str(exc)[:80]}")
            continue
        compile_s = time.process_time() - t0
        times, report = [], None
        for _ in range(3):
            t0 = time.process_time()
            report = verify_ptx(ptx)
            times.append(time.process_time() - t0)
        print(f"{name:48s} {ptx.count(chr(10)):6d} {compile_s:9.2f} {statistics.median(times):12.2f} "
              f"{len(report.errors):6d}")


if __name__ == "__main__":
    main()
