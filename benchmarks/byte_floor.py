"""The byte floor of the weight-only decode: per shape, the time of a kernel that only reads the NVFP4 weight's
bytes (N * K * 9 / 16; `_timing.read_floor_us`, graph replay, copies rotated past L2) against cuBLAS bf16
`F.linear` at M = 1 in the same run. Their ratio is the most any NVFP4 decode can be faster than cuBLAS at that
shape; the replay time of a launch with nothing to read is printed beside, the per-launch part of every row.

    PYTHONPATH=python python benchmarks/byte_floor.py --out DIR      # writes DIR/byte_floor.{md,json}
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

#: (N, K) of the decode table (`run_all.py`): the square ones and the four LLM shapes.
SHAPES = ((4096, 4096), (8192, 8192), (7168, 16384), (4096, 7168), (7168, 2048), (28672, 4096))


def measure(n: int, k: int) -> dict:
    """One shape's read floor and cuBLAS M = 1 time."""
    import torch
    import torch.nn.functional as F

    from _timing import graph_ms, l2_copies, read_floor_us
    nbytes = n * k * 9 // 16
    read_us, cfg = read_floor_us(nbytes)
    weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(l2_copies(n * k * 2))]
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    cublas_ms, _ = graph_ms([lambda w=w: F.linear(x, w) for w in weights], target_ms=5.0)
    return {"n": n, "k": k, "bytes": nbytes, "read_us": read_us, "read_config": cfg,
            "read_GBs": nbytes / read_us / 1e3, "cublas_us": 1e3 * cublas_ms, "floor_ratio": 1e3 * cublas_ms / read_us}


def markdown(rows: list[dict], empty_us: float) -> str:
    out = [f"A launch with nothing to read (132 CTAs, graph replay): {empty_us:.2f} us.", "",
           "| N x K | NVFP4 weight MB | read floor us | GB/s | cuBLAS bf16 M=1 us | most a decode can gain |",
           "|---|---|---|---|---|---|"]
    out += [f"| {r['n']}x{r['k']} | {r['bytes'] / 1e6:.1f} | {r['read_us']:.2f} | {r['read_GBs']:.0f} | "
            f"{r['cublas_us']:.2f} | {r['floor_ratio']:.2f}x |" for r in rows]
    return "\n".join(out) + "\n"


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    args = p.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("byte_floor.py: no CUDA GPU here; run it on the device (see the module docstring)", file=sys.stderr)
        return 2
    from _timing import graph_ms, streaming_read_kernel
    dst = torch.empty(132, dtype=torch.int32, device="cuda")
    empty_ms, _ = graph_ms([lambda: streaming_read_kernel[(132,)](dst, dst, 0, BLOCK=32, ITERS=1)], target_ms=5.0)
    rows = []
    for n, k in SHAPES:
        rows.append(measure(n, k))
        print(f"{n}x{k}: read {rows[-1]['read_us']:.2f} us, cuBLAS {rows[-1]['cublas_us']:.2f} us", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "byte_floor.json").write_text(json.dumps({"empty_us": 1e3 * empty_ms, "rows": rows}, indent=1))
    (out / "byte_floor.md").write_text(markdown(rows, 1e3 * empty_ms))
    print(markdown(rows, 1e3 * empty_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
