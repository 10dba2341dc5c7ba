"""The kernels ncu profiles: one decode config at one shape, called `--calls` times to compile, tune and warm up,
then once more between cudaProfilerStart / Stop (profile with ncu's --profile-from-start off). `--best SWEEP_JSON`
takes the fastest config of that M, N, K from a `decode_sweep.py` run; `--linear` profiles the W4A4
`nvfp4_linear` (x quantized to NVFP4, its form tuned) instead of the weight-only decode:

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
    p.add_argument("--linear", action="store_true", help="the W4A4 nvfp4_linear (form='auto') at this shape")
    args = p.parse_args()
    import torch

    from bwtriton.formats import quantize_nvfp4
    from bwtriton.formats.nvfp4 import E2M1_MAX, E4M3_MAX
    from bwtriton.kernels import decode, nvfp4_linear  # the function (the package exports it)
    cfg = json.loads(args.config) if args.config else None
    if args.best:
        rows = next(r["rows"] for r in json.load(open(args.best))["decode"]
                    if (r["m"], r["n"], r["k"]) == (args.m, args.n, args.k))
        cfg = min((r for r in rows if "us" in r), key=lambda r: r["us"])["cfg"]
    print(f"config: {cfg}", flush=True)
    w_q = quantize_nvfp4(torch.randn(args.n, args.k, device="cuda") * 0.02)
    x = torch.randn(args.m, args.k, device="cuda").to(torch.bfloat16)
    if args.linear:
        scale = float(x.float().abs().max()) / (E2M1_MAX * E4M3_MAX)  # the per-tensor global scale

        def call():
            return nvfp4_linear(x, w_q, x_global_scale=scale)
    else:
        def call():
            return decode.nvfp4_decode_matmul(x, w_q, config=cfg)
    for _ in range(args.calls):
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
