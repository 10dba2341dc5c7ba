"""The B200 timing model's tables (CPU only, no GPU): calibration against published B200 GEMM numbers, the
sensitivity of the prediction to each cost figure, and 1-CTA vs 2-CTA (cluster barrier / mbarrier handoff).

    python benchmarks/timing_model.py [--quick]

Every time printed is predicted by bwtriton's B200 timing model (not measured). Each GEMM is the TMA kernel
(bwtriton.examples.tma_matmul, B stored [N, K]; the block-scaled one test_lit/pair_ctas/Inputs/scaled_tma.py)
emulated for ONE representative cluster at the real tile shape, at two short K loops; the per-K-step cost is
extrapolated to the full K and the tiles scaled to the grid in waves (bwtriton.emu.timing.scale_to_grid).
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

import bwtriton  # noqa: E402
import bwtriton.emu as emu  # noqa: E402
from bwtriton.emu.timing import B200, LABEL, scale_to_grid  # noqa: E402
from bwtriton.emu.timing.recorder import TimingRecorder  # noqa: E402
from bwtriton.examples.tma_matmul import matmul_tma_bt_kernel, tma_bt_spec  # noqa: E402

#: Published B200 measurements the calibration compares with (each row: where it comes from).
PUBLISHED = {
    "bf16": (8192, 1.42e15, "cuBLAS via torch.mm, B200, 8192^3: 7.74e-4 s = 1.42 PFLOP/s "
                            "(pytorch/ao PR #2427, benchmarks/float8/bench_matmul.py output)"),
    "fp8": (4096, 1.86e15, "torch._scaled_mm fp8 e4m3, B200, 4096^3: ~1860 TFLOP/s (pytorch/helion PR #2756); "
                           "no 8192^3 fp8 figure found"),
    "nvfp4": (8192, 5.37e15, "torchao nvfp4 recipe (torch._scaled_mm, cuBLAS NVFP4), B200, 8192^3: 2.05e-4 s = "
                             "5.37 PFLOP/s (pytorch/ao PR #2427)"),
}


@dataclass(frozen=True)
class Gemm:
    """One kernel variant: dtype, tile, 1 or 2 CTAs, extra passes."""

    name: str
    dtype: str          # bf16 / fp8e4nv / nvfp4
    block_m: int        # rows per cluster (256 for a pair)
    block_n: int
    block_k: int
    two_cta: bool = False
    passes: tuple = ()
    stages: int = 3
    #: the two K-loop lengths emulated (the block-scaled kernel: 3 and 4; at 2 K steps over its 3 stages
    #: verify-tcgen05 flags Triton 3.6's stage reuse, so that kernel is not timed there)
    steps: tuple = (2, 4)


def _compile_dense(g: Gemm, k: int):
    spec = tma_bt_spec(g.dtype, block_m=g.block_m, block_n=g.block_n, block_k=g.block_k)
    spec["num_stages"] = g.stages
    return bwtriton.compile(matmul_tma_bt_kernel, two_cta=g.two_cta, passes=list(g.passes), **spec)


def _dense_args(g: Gemm, k: int):
    dt = {"bf16": torch.bfloat16, "fp8e4nv": torch.float8_e4m3fn}[g.dtype]
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(g.block_m, k, generator=gen).to(dt)
    b = torch.randn(g.block_n, k, generator=gen).to(dt)
    c = torch.zeros(g.block_m, g.block_n, dtype=torch.float16)
    return (TensorDescriptor.from_tensor(a, [g.block_m, g.block_k]),
            TensorDescriptor.from_tensor(b, [g.block_n, g.block_k]),
            TensorDescriptor.from_tensor(c, [g.block_m, g.block_n]), k)


def _scaled_module():
    path = ROOT / "test_lit" / "pair_ctas" / "Inputs" / "scaled_tma.py"
    spec = importlib.util.spec_from_file_location("scaled_tma_input", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _compile_nvfp4(g: Gemm, k: int):
    mod = _scaled_module()
    spec = mod.spec(16)
    spec["constexprs"] = dict(spec["constexprs"], M=256 if g.two_cta else 128, K=k)
    return bwtriton.compile(mod.scaled_tma_kernel, passes=list(g.passes), **spec)


def _nvfp4_args(g: Gemm, k: int):
    """Random e2m1 bytes and unit scales (the timing does not depend on the values)."""
    m, n, bk, vec = 256 if g.two_cta else 128, 128, 256, 16
    gen = torch.Generator().manual_seed(0)
    a = torch.randint(0, 256, (m, k // 2), generator=gen, dtype=torch.uint8)
    b = torch.randint(0, 256, (n, k // 2), generator=gen, dtype=torch.uint8)
    one = torch.tensor(1.0).to(torch.float8_e4m3fn)
    sa = one.repeat(1, m // 128, k // vec // 4, 2, 256)
    sb = one.repeat(1, n // 128, k // vec // 4, 2, 256)
    c = torch.zeros(m, n, dtype=torch.float16)
    rep_k = bk // vec // 4
    return (TensorDescriptor.from_tensor(a, [128, bk // 2]), TensorDescriptor.from_tensor(sa, [1, 1, rep_k, 2, 256]),
            TensorDescriptor.from_tensor(b, [128, bk // 2]), TensorDescriptor.from_tensor(sb, [1, 1, rep_k, 2, 256]),
            TensorDescriptor.from_tensor(c, [128, 128]))


_COMPILED: dict = {}


def time_cluster(g: Gemm, steps: int, costs=B200):
    """Emulate one representative cluster of `g` for `steps` K steps with every SM of the wave busy."""
    k = steps * g.block_k
    nvfp4 = g.dtype == "nvfp4"
    key = (g, k if nvfp4 else 0)
    if key not in _COMPILED:
        _COMPILED[key] = (_compile_nvfp4 if nvfp4 else _compile_dense)(g, k)
    res = _COMPILED[key]
    md = res.metadata
    args = _nvfp4_args(g, k) if nvfp4 else _dense_args(g, k)
    nctas = 2 if g.two_cta else 1
    rec = TimingRecorder(costs, active_sms=int(costs.v("sm_count")))
    grid = (1,) if nvfp4 else (1, 1)
    stats = emu.run(res.asm["ptx"], grid, *args, num_warps=md["num_warps"], num_ctas=nctas, shared=md["shared"],
                    tensordesc_meta=md["tensordesc_meta"], timing=rec)
    return stats.timing


def predict_gemm(g: Gemm, m: int, n: int, k: int, costs=B200, persistent: bool = False):
    """The whole m x n x k problem from one cluster timed at two K-loop lengths."""
    steps = g.steps
    short, long = (time_cluster(g, s, costs) for s in steps)
    in_bytes = {"bf16": 2, "fp8e4nv": 1, "nvfp4": 0.5 + 1 / 16}[g.dtype]
    hbm = (m * k + n * k) * in_bytes + m * n * 2
    clusters = math.ceil(m / g.block_m) * math.ceil(n / g.block_n)
    return scale_to_grid(short, long, steps[0], steps[1], k // g.block_k, clusters, 2 if g.two_cta else 1, hbm,
                         costs, persistent=persistent)


CALIBRATION = {
    "bf16": Gemm("bf16 2-CTA 256x256x64 handoff", "bf16", 256, 256, 64, two_cta=True, stages=4),
    "fp8": Gemm("fp8 2-CTA 256x256x128 handoff", "fp8e4nv", 256, 256, 128, two_cta=True, stages=4),
    "nvfp4": Gemm("nvfp4 2-CTA 256x128x256 (pair-ctas-scaled)", "nvfp4", 256, 128, 256, two_cta=True,
                  passes=("+pair-ctas-scaled",), steps=(3, 4)),
}


def fitted_clock() -> float:
    """The one figure fitted: the SM clock that makes the bf16 row match its published number (the datasheet
    peaks assume the boost clock; a GEMM holds a lower one under power limits). fp8 and nvfp4 are then
    out-of-sample checks of the fit."""
    size, pub, _ = PUBLISHED["bf16"]
    clock = B200.v("sm_clock_hz")
    for _ in range(3):  # the prediction is nearly proportional to 1 / clock; 3 fixed-point steps converge
        costs = B200.scaled("sm_clock_hz", clock / B200.v("sm_clock_hz"))
        p = predict_gemm(CALIBRATION["bf16"], size, size, size, costs)
        clock *= pub / p.flops_per_s
    return clock


def calibration_table() -> list[str]:
    clock = fitted_clock()
    fitted = B200.scaled("sm_clock_hz", clock / B200.v("sm_clock_hz"))
    rows = ["| GEMM | kernel modelled | predicted (table as sourced) | published | ratio | "
            f"predicted, clock fitted on bf16 ({clock / 1e9:.2f} GHz) | ratio | source of the published figure |",
            "|---|---|---|---|---|---|---|---|"]
    for fmt, g in CALIBRATION.items():
        size, pub, src = PUBLISHED[fmt]
        p = predict_gemm(g, size, size, size)
        q = predict_gemm(g, size, size, size, fitted)
        rows.append(f"| {fmt} {size}^3 | {g.name} | {p.flops_per_s / 1e12:.0f} TFLOP/s ({p.seconds * 1e6:.0f} us, "
                    f"{p.bound}) | {pub / 1e12:.0f} TFLOP/s | {p.flops_per_s / pub:.2f} | "
                    f"{q.flops_per_s / 1e12:.0f} TFLOP/s{' (fitted)' if fmt == 'bf16' else ''} | "
                    f"{q.flops_per_s / pub:.2f} | {src} |")
    return rows


SENSITIVE = ("sm_clock_hz", "mma_f16_flop_per_cycle", "mma_f4_flop_per_cycle", "tcgen05_cp_bytes_per_cycle",
             "tma_latency_cycles", "tma_bytes_per_cycle_per_sm",
             "l2_bytes_per_s", "mma_latency_cycles", "mbarrier_latency_cycles", "cluster_barrier_latency_cycles",
             "tcgen05_ld_bytes_per_cycle", "alu_cycles", "cta_launch_cycles")


def sensitivity_table(g: Gemm, size: int = 8192) -> list[str]:
    base = predict_gemm(g, size, size, size).seconds
    rows = ["| figure (x0.8 / x1.2) | time x0.8 | time x1.2 | largest change |", "|---|---|---|---|"]
    out = []
    for name in SENSITIVE:
        lo = predict_gemm(g, size, size, size, B200.scaled(name, 0.8)).seconds / base - 1
        hi = predict_gemm(g, size, size, size, B200.scaled(name, 1.2)).seconds / base - 1
        out.append((max(abs(lo), abs(hi)), name, lo, hi))
    for big, name, lo, hi in sorted(out, reverse=True):
        src = getattr(B200, name).source.split(":")[0] if ":" in getattr(B200, name).source else "published"
        rows.append(f"| `{name}` ({src}) | {lo:+.1%} | {hi:+.1%} | {big:.1%} |")
    return rows


COMPARISON = [
    Gemm("1-CTA 128x256x64", "bf16", 128, 256, 64),
    Gemm("2-CTA 256x256x64, cluster barrier per K step", "bf16", 256, 256, 64, two_cta=True,
         passes=("-pair-ctas-handoff",), stages=4),
    Gemm("2-CTA 256x256x64, mbarrier handoff", "bf16", 256, 256, 64, two_cta=True, stages=4),
]
#: the bf16 shapes of benchmarks/gemm.py's table
SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (16384, 8192, 1024), (2048, 8192, 8192)]


def comparison_table(shapes=SHAPES) -> list[str]:
    rows = ["| bf16 GEMM | variant | static grid | CLC persistent (analytic) |", "|---|---|---|---|"]
    for m, n, k in shapes:
        for g in COMPARISON:
            st = predict_gemm(g, m, n, k)
            pe = predict_gemm(g, m, n, k, persistent=True)
            rows.append(f"| {m}x{n}x{k} | {g.name} | {st.seconds * 1e6:.0f} us, {st.flops_per_s / 1e12:.0f} "
                        f"TFLOP/s | {pe.seconds * 1e6:.0f} us, {pe.flops_per_s / 1e12:.0f} TFLOP/s |")
    return rows


def _tmem_kernels():
    path = ROOT / "tests" / "fixtures" / "tmem_kernels.py"
    spec = importlib.util.spec_from_file_location("tmem_kernels_fixture", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _multi_acc(block_n: int, steps: int):
    """One 128-row program of the 3-accumulator kernel (pointer loads) timed at `steps` K steps."""
    ex = _tmem_kernels()
    res = bwtriton.compile(ex.multi_acc_kernel, signature=ex.MULTI_ACC_SIGNATURE,
                           constexprs=dict(BLOCK_M=128, BLOCK_N=block_n, BLOCK_K=64, NUM_ACC=3), num_warps=8,
                           num_stages=2)
    k, n = 64 * steps, 3 * block_n
    a, b, c = torch.randn(128, k).half(), torch.randn(k, n).half(), torch.zeros(128, n).half()
    rec = TimingRecorder(B200, active_sms=int(B200.v("sm_count")))
    stats = emu.run(res, (1,), a, b, c, k, k, n, n, timing=rec)
    return stats.timing, res.reports["plan-tmem"].get("fallbacks") or []


def tmem_table(m: int = 8192, n: int = 4608, k: int = 4096) -> list[str]:
    """3 accumulators per program: 128x256 tiles need 768 TMEM columns (plan-tmem serialises the loop) vs
    128x128 tiles that fit (384 columns) with twice the programs."""
    rows = [f"| {m}x{n}x{k}, fp16, 3 accumulators per program | TMEM columns | plan-tmem | predicted |",
            "|---|---|---|---|"]
    for bn in (256, 128):
        (short, fb), (long, _) = _multi_acc(bn, 2), _multi_acc(bn, 4)
        programs = (m // 128) * (n // (3 * bn))
        p = scale_to_grid(short, long, 2, 4, k // 64, programs, 1, (m * k + k * n + m * n) * 2, B200)
        what = ", ".join(f["rewrite"] for f in fb) or "fits, no fallback"
        rows.append(f"| 128x{bn} tiles, {programs} programs | {3 * bn} | {what} | {p.seconds * 1e6:.0f} us, "
                    f"{p.flops_per_s / 1e12:.0f} TFLOP/s |")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="only the 8192^3 comparison rows and no sensitivity")
    ap.add_argument("--plot", metavar="DIR", help="also save the per-warp timelines of the comparison kernels "
                    "(one cluster, 4 K steps) as DIR/timeline_*.png (needs matplotlib)")
    args = ap.parse_args(argv)
    if args.plot:
        if not Path(args.plot).is_dir():
            ap.error(f"--plot {args.plot}: not a folder; create it first")
        for i, g in enumerate(COMPARISON):
            path = Path(args.plot) / f"timeline_{i}_{g.name.split(',')[0].replace(' ', '_')}.png"
            print(f"{g.name}: {time_cluster(g, 4).plot(str(path))}")
    print(f"All times below are {LABEL}.\n")
    print("## Calibration\n")
    print("\n".join(calibration_table()))
    print("\n## 1-CTA vs 2-CTA; static grid vs CLC persistent (analytic: no CTA launch per wave, one try_cancel "
          "round trip per tile)\n")
    print("\n".join(comparison_table(SHAPES[:1] if args.quick else SHAPES)))
    if not args.quick:
        print("\n## TMEM fallback (pointer-load kernel, cp.async)\n")
        print("\n".join(tmem_table()))
        for fmt in ("bf16", "nvfp4"):
            print(f"\n## Sensitivity ({fmt} 8192^3, " + CALIBRATION[fmt].name + ")\n")
            print("\n".join(sensitivity_table(CALIBRATION[fmt])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
