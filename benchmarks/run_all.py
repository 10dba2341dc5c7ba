"""The whole benchmark table in one command, written as markdown + JSON (+ CSV, text, PNG):

    PYTHONPATH=python python benchmarks/run_all.py --out DIR [--quick] [--only decode,linear]

In order: the card's device-to-device copy bandwidth (the ceiling the decode rows are compared with), host
overhead per call (`host.py`), then every kernel row under CUDA-graph replay (`_harness`, `_timing`): decode,
NVFP4 GEMM, linear (`blockscaled.py`) and the dense bf16/fp8 GEMMs (`gemm.py`), each against what a user would
run instead (bf16 F.linear / cuBLAS, gemlite where installed (`peers.py`), torch._scaled_mm, torch dequant +
cuBLAS). Progress is printed
per row. Output: DIR/bench.md, DIR/bench.json (everything, with autotuning logs), DIR/bench.{csv,txt,png}.
Sized for ~5 minutes on an H200 with a cold Triton cache (most of it is first-use compiles and autotuning; the
table is rewritten after every row, so a run stopped by a time limit keeps what it measured); `--quick` keeps
fewer shapes.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _tuning_logs() -> dict:
    """Every autotuner's candidate timings, keyed by a readable tuning key."""
    import importlib
    logs = {}
    for name in ("matmul", "decode", "nvfp4_linear"):
        # import_module: `bwtriton.kernels.matmul` as an attribute is the function the package re-exports
        mod = importlib.import_module(f"bwtriton.kernels.{name}")
        logs[name] = {str(tuple(str(x).replace("torch.", "") for x in key)): times
                      for key, times in mod.TUNING_LOG.items()}
        if getattr(mod, "TUNING_FAILURES", None):  # candidates that raised while tuning (skipped)
            logs[f"{name} failures"] = {str(key): errs for key, errs in mod.TUNING_FAILURES.items()}
    return logs


def main(argv: list[str] | None = None) -> int:
    """Command line; returns the exit code (2 without a GPU, 1 if every row failed)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--out", default=os.environ.get("OUT", "bench_out"), help="output folder")
    p.add_argument("--only", default="", help="comma-separated substrings of row groups/names to run "
                                              "(decode, gemm, linear, bf16, fp8); host rows always run")
    p.add_argument("--quick", action="store_true", help="fewer shapes")
    p.add_argument("--rounds", type=int, default=2, help="alternating ours/peer timing rounds per row")
    p.add_argument("--rep-ms", type=int, default=15, help="length of each timed CUDA graph (ms)")
    args = p.parse_args(argv)

    import torch
    if not torch.cuda.is_available():
        print("benchmarks/run_all.py needs a CUDA GPU", file=sys.stderr)
        return 2
    import triton

    import gemm
    from _harness import run_all
    from _timing import copy_bandwidth_report
    from host import host_markdown, host_rows

    t0 = time.time()
    name = torch.cuda.get_device_name()
    copy_methods = copy_bandwidth_report()
    copy_gbs = max(copy_methods.values())
    copy_detail = ", ".join(f"{k} {v:.0f}" for k, v in copy_methods.items())
    print(f"[{time.time() - t0:6.1f}s] device-to-device copy bandwidth: {copy_gbs:.0f} GB/s (read + write)",
          flush=True)
    hosts = host_rows()
    print(f"[{time.time() - t0:6.1f}s] host overhead rows done", flush=True)

    gemm.register_blockscaled_cases(args.quick)
    gemm.register_dense_cases(quick=True)
    versions = f"torch {torch.__version__}, triton {triton.__version__}"
    preamble = (f"{name}, {versions}. Kernel rows: CUDA-graph replay, inputs rotated over copies that exceed L2, "
                f"median of {args.rounds} alternating rounds.\n\nDevice-to-device copy bandwidth: "
                f"**{copy_gbs:.0f} GB/s** (read + write, best of: {copy_detail} GB/s; the decode rows' 'of copy BW' "
                f"compares with it).\n\n"
                f"### host overhead per call (wall time of a loop, GPU-cheap problems)\n\n{host_markdown(hosts)}")
    results = run_all(args.out, name="bench", only=[s for s in args.only.split(",") if s], rounds=args.rounds,
                      rep_ms=args.rep_ms, title=f"bwtriton vs peers on {name}", copy_gbs=copy_gbs,
                      preamble=preamble, extra=lambda: {"versions": versions, "host_overhead": hosts,
                                                        "copy_methods": copy_methods,
                                                        "tuning": _tuning_logs()})
    print(f"[{time.time() - t0:6.1f}s] done; table in {Path(args.out) / 'bench.md'}", flush=True)
    return 1 if results and all(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
