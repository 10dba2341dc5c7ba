"""The kernels ncu profiles: one decode config at one shape, called `--calls` times to compile, tune and warm up,
then once more between cudaProfilerStart / Stop (profile with ncu's --profile-from-start off). `--best SWEEP_JSON`
takes the fastest config of that M, N, K from a `decode_sweep.py` run:

    ncu --profile-from-start off --section SpeedOfLight ... \\
        python benchmarks/ncu_probe.py --m 64 --n 8192 --k 8192 --best OUT/sweep.json
"""
from __future__ import annotations

import argparse
import json
import sys


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--m", type=int, required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--k", type=int, required=True)
    p.add_argument("--best", help="sweep.json of decode_sweep.py: its fastest config at this shape")
    p.add_argument("--config", help="a config as JSON (default: the auto path)")
    p.add_argument("--calls", type=int, default=4)
    args = p.parse_args()
    import torch

    from bwtriton.formats import quantize_nvfp4
    from bwtriton.kernels import decode
    cfg = json.loads(args.config) if args.config else None
    if args.best:
        rows = next(r["rows"] for r in json.load(open(args.best))["decode"]
                    if (r["m"], r["n"], r["k"]) == (args.m, args.n, args.k))
        cfg = min((r for r in rows if "us" in r), key=lambda r: r["us"])["cfg"]
    print(f"config: {cfg}", flush=True)
    w_q = quantize_nvfp4(torch.randn(args.n, args.k, device="cuda") * 0.02)
    x = torch.randn(args.m, args.k, device="cuda").to(torch.bfloat16)
    for _ in range(args.calls):
        decode.nvfp4_decode_matmul(x, w_q, config=cfg)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    decode.nvfp4_decode_matmul(x, w_q, config=cfg)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
