"""NVFP4 benchmarks on the GPU at hand (targets are for the H200): one table, CSV and PNG.

Rows:
* decode: weight-only NVFP4 (M = 1..16, N = K = 8192) vs cuBLAS bf16 (torch.matmul) on the same shapes. The unit
  is GB/s of *our* bytes (4.5 bits/weight); the ratio column is the speedup (same work on both sides). Goal 2.5x.
* GEMM: nvfp4_matmul vs torch dequantize + cuBLAS (the dequantization is part of the peer's time: that is what a
  torch user pays), and vs upstream Triton's own tl.dot_scaled kernel (fails to compile on sm_90: reported as an
  error row, which is the point of lower-nvfp4-portable).
* linear: fused quant+GEMM vs quantize kernel + GEMM (PDL), and PDL vs plain launches. Goal: fused faster.

Run: ``python benchmarks/blockscaled.py [--out DIR] [--only decode,linear]``. Importing this module only registers
the rows (so `benchmarks/gemm.py` can include them).
"""
from __future__ import annotations

import argparse
import functools
import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from _harness import register_case, run_all  # noqa: E402


def _mods():
    return (importlib.import_module("bwtriton.kernels.blockscaled"), importlib.import_module("bwtriton.kernels.decode"),
            importlib.import_module("bwtriton.kernels.nvfp4_linear"))


def _rel_err(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def _register_decode() -> None:
    from bwtriton.formats import quantize_nvfp4
    n = k = 8192
    for m in (1, 4, 16):
        for tag, cfg in (("auto", None), ("mma split1", {"path": "mma", "SPLIT_K": 1}),
                         ("mma split4", {"path": "mma", "SPLIT_K": 4}),
                         ("mma BN32 split2", {"path": "mma", "BLOCK_N": 32, "SPLIT_K": 2}),
                         ("mma BN128 8w split4", {"path": "mma", "BLOCK_N": 128, "num_warps": 8, "SPLIT_K": 4}),
                         ("gemv R2", {"path": "gemv", "ROWS_PER_THREAD": 2}),
                         ("gemv R4", {"path": "gemv", "ROWS_PER_THREAD": 4})):
            if m > 4 and tag.startswith("gemv"):
                continue  # BLOCK_M 16 spills on the CUDA-core path (~500 us): not a candidate
            def setup(m=m):
                torch.manual_seed(0)
                w = torch.randn(n, k, device="cuda") * 0.02
                return {"x": torch.randn(m, k, device="cuda").to(torch.bfloat16), "w_q": quantize_nvfp4(w),
                        "w_bf16": w.to(torch.bfloat16)}
            register_case(f"nvfp4 decode M={m} N=K={n} ({tag})",
                          lambda s, cfg=cfg: _mods()[1].nvfp4_decode_matmul(s["x"], s["w_q"], config=cfg),
                          lambda s: torch.matmul(s["x"], s["w_bf16"].T),
                          work=n * k * 4.5 / 8 + m * k * 2 + m * n * 2, unit="GB/s", peer_name="cuBLAS bf16",
                          group="decode", setup=setup, check=_rel_err, target_ratio=2.5 if cfg is None else None)


def _gemm_operands(m: int, n: int, k: int) -> dict:
    """Setup of the GEMM rows: NVFP4 a_q [m, k] and b_q [n, k] from seeded normal data."""
    from bwtriton.formats import quantize_nvfp4
    torch.manual_seed(0)
    return {"a_q": quantize_nvfp4(torch.randn(m, k, device="cuda")),
            "b_q": quantize_nvfp4(torch.randn(n, k, device="cuda"))}


def _register_gemm() -> None:
    for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192)):
        def peer(s):
            return torch.matmul(s["a_q"].dequantize(torch.bfloat16), s["b_q"].dequantize(torch.bfloat16).T)
        register_case(f"nvfp4 gemm {m}x{n}x{k}", lambda s: _mods()[0].nvfp4_matmul(s["a_q"], s["b_q"]), peer,
                      work=2.0 * m * n * k, peer_name="torch dequant + cuBLAS", group="gemm",
                      setup=functools.partial(_gemm_operands, m, n, k), check=_rel_err)
    m = n = k = 4096

    def upstream(s):
        """Upstream Triton: the same tl.dot_scaled kernel, launched without bwtriton's pipeline."""
        bs = _mods()[0]
        import triton
        # A fresh JITFunction: Triton's in-memory cache ignores stage hooks, so reusing bwtriton's kernel object
        # could hand back the version compiled through lower-nvfp4-portable.
        kernel = s.setdefault("kernel", triton.jit(bs.block_scaled_matmul_kernel.fn))
        c = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        alpha = bs.alpha_tensor(s["a_q"], s["b_q"], c.device)
        kernel[((m // 128) * (n // 128),)](
            s["a_q"].data, s["a_q"].scales, s["b_q"].data, s["b_q"].scales, c, alpha, m, n, k, FMT="e2m1", VEC=16,
            SCALE_BLOCKED=False, BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=3)
        return c

    register_case(f"nvfp4 gemm {m}^3 vs upstream Triton", lambda s: _mods()[0].nvfp4_matmul(s["a_q"], s["b_q"]),
                  upstream, work=2.0 * m * n * k, peer_name="upstream Triton dot_scaled", group="gemm",
                  setup=functools.partial(_gemm_operands, m, n, k))


def _register_linear() -> None:
    from bwtriton.formats import quantize_nvfp4
    n = k = 4096
    for m in (16, 256, 4096):
        def setup(m=m):
            torch.manual_seed(0)
            x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
            return {"x": x, "w_q": quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.02),
                    "gs": float(x.float().abs().max()) / 2688.0}
        lin = lambda: _mods()[2]  # noqa: E731
        register_case(f"nvfp4 linear M={m} N=K={n}: fused vs quant+GEMM (PDL)",
                      lambda s: lin().nvfp4_linear(s["x"], s["w_q"], x_global_scale=s["gs"]),
                      lambda s: lin().nvfp4_linear_two_kernel(s["x"], s["w_q"], x_global_scale=s["gs"]),
                      work=2.0 * m * n * k, peer_name="quantize kernel + GEMM, PDL", group="linear", setup=setup,
                      check=_rel_err, target_ratio=1.0)
        register_case(f"nvfp4 linear M={m} N=K={n}: PDL vs plain launches",
                      lambda s: lin().nvfp4_linear_two_kernel(s["x"], s["w_q"], x_global_scale=s["gs"]),
                      lambda s: lin().nvfp4_linear_two_kernel(s["x"], s["w_q"], x_global_scale=s["gs"],
                                                              use_pdl=False),
                      work=2.0 * m * n * k, peer_name="two kernels, no PDL", group="linear", setup=setup)


_register_decode()
_register_gemm()
_register_linear()


def main() -> None:
    """Command line: run the selected block-scaled rows on the current GPU and write the table/CSV/PNG."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    parser.add_argument("--only", default="", help="comma-separated groups/names: decode, gemm, linear")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rep-ms", type=int, default=50)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/blockscaled.py needs a CUDA GPU")
    run_all(args.out, name="blockscaled", only=[o for o in args.only.split(",") if o] or None, rounds=args.rounds,
            rep_ms=args.rep_ms, title=f"NVFP4 on {torch.cuda.get_device_name()}")


if __name__ == "__main__":
    main()
