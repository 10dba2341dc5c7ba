"""Where the Gluon mixed GEMM's time goes at M = 64 - 128: the kernel timed with parts taken out
(docs/nvfp4_hopper.md, "Where the M = 64 - 128 time goes").

A variant is parts joined by '+', each replacing a function of `kernels.gluon_mixed` before its first compile, in
a process of its own (the JIT hashes the replaced sources, so no cache entry of the real kernel is reused):

    nodecode   a zero A operand instead of the decode (the weight's copies and the wgmmas stay)
    nomma      no wgmma (with nodecode: the ring's copies, waits and barriers, the split-K sum and the store)
    nox        no x^T copies (cp.async configs only; x^T by TMA would wait forever)
    nosum      each K slice stores its tile straight to the output instead of the split-K sum

    PYTHONPATH=python python benchmarks/gluon_ablation.py --out DIR [--variants full,nosum,nodecode+nomma]

Every variant but 'full' computes a wrong result; only times are reported (graph replay, weights rotated past L2),
with cuBLAS bf16 `F.linear` at the same shape from the same run beside.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from bwtriton.kernels import gluon_mixed as gm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

DEFAULT_VARIANTS = "full,nosum,nodecode,nodecode+nomma,nodecode+nomma+nosum,nodecode+nomma+nosum+nox"
#: (M, N, K, BLOCK_N, BLOCK_K, num_warps, STAGES, SPLIT_K, SLICE_SUM): the configs of the docs' table.
CASES = ((64, 4096, 4096, 64, 128, 4, 4, 4, "last_slice"), (128, 4096, 4096, 64, 64, 4, 4, 4, "last_slice"),
         (128, 4096, 4096, 64, 64, 4, 4, 8, "last_slice"), (64, 8192, 8192, 64, 64, 4, 4, 4, "last_slice"),
         (128, 8192, 8192, 64, 64, 4, 4, 4, "last_slice"), (128, 4096, 4096, 64, 64, 4, 4, 4, "second_kernel"))


def parse_variant(variant: str) -> set[str]:
    """The parts of 'full' or 'a+b+..'; ValueError naming the unknown ones."""
    parts = set() if variant == "full" else set(variant.split("+"))
    unknown = parts - set(PARTS)
    if unknown:
        raise ValueError(f"unknown ablation parts {sorted(unknown)} in {variant!r}; the parts are {PARTS} "
                         "(joined by '+'), or 'full'")
    return parts


@gluon.jit
def _zero_operand(w, s, th, tl, A_LAYOUT: gl.constexpr):
    return gl.zeros([2 * w.shape[0], 4 * w.shape[1]], gl.bfloat16, A_LAYOUT)


@gluon.jit
def _no_mma(a, b, acc, is_async: gl.constexpr):
    return acc


@gluon.jit
def _weight_copies_only(w_smem, s_smem, x_smem, wp, sp, xp, step, steps, STAGES: gl.constexpr,
                        STEP_WORDS: gl.constexpr, STEP_PAIRS: gl.constexpr, STEP_X: gl.constexpr, x_desc, bars,
                        off_m, k_lo):
    slot = step % STAGES
    live = step < steps
    gm.async_copy.async_copy_global_to_shared(w_smem.index(slot), wp + step * STEP_WORDS,
                                              mask=gl.full(wp.shape, 1, gl.int1, wp.type.layout) & live)
    gm.async_copy.async_copy_global_to_shared(s_smem.index(slot), sp + step * STEP_PAIRS,
                                              mask=gl.full(sp.shape, 1, gl.int1, sp.type.layout) & live)
    gm.async_copy.commit_group()


@gluon.jit
def _store_slice(acc, out_ptr, bias_ptr, alpha, work_ptr, count_ptr, pid_n, pid_m, pid_k, M, stride_om,
                 BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, HAS_BIAS: gl.constexpr, LAYOUT: gl.constexpr):
    gm._store_out(acc, out_ptr, bias_ptr, alpha, pid_n, pid_m, M, stride_om, BLOCK_N, BLOCK_M, HAS_BIAS, LAYOUT)


#: part -> (the function of kernels.gluon_mixed it replaces, the replacement)
_REPLACE = {"nodecode": ("_decode_operand", _zero_operand), "nomma": ("warpgroup_mma", _no_mma),
            "nox": ("_stage_copies", _weight_copies_only), "nosum": ("_reduce_slices", _store_slice)}
PARTS = tuple(_REPLACE)


def apply(variant: str) -> None:
    """Replace `kernels.gluon_mixed`'s functions for `variant` (call before anything compiles it)."""
    for part in parse_variant(variant):
        name, fn = _REPLACE[part]
        setattr(gm, name, fn)


def worker(variant: str) -> list[dict]:
    """Time every case under `variant` (this process only)."""
    apply(variant)
    import torch
    import torch.nn.functional as F

    from _timing import graph_ms, l2_copies
    from bwtriton.formats import quantize_nvfp4
    from bwtriton.kernels import decode
    rows = []
    for m, n, k, bn, bk, w, stages, split, slice_sum in CASES:
        if "nosum" in parse_variant(variant) and slice_sum != "last_slice":
            continue  # a second kernel's partials are not summed in the launch: nothing to take out
        torch.manual_seed(0)
        states = []
        for _ in range(l2_copies(n * k * 9 // 16 + n * k * 2)):
            wt = torch.randn(n, k, device="cuda") * 0.02
            states.append({"w_q": quantize_nvfp4(wt), "w": wt.to(torch.bfloat16),
                           "x": torch.randn(m, k, device="cuda").to(torch.bfloat16)})
        cfg = dict(gm.gluon_config(m, n, k, bn, bk, w, stages=stages), SPLIT_K=split, SLICE_SUM=slice_sum)
        gm.check_config("gluon_ablation", cfg, m, n, k)
        ours, _ = graph_ms([lambda s=s: decode.nvfp4_decode_matmul(s["x"], s["w_q"], config=cfg) for s in states],
                           target_ms=10)
        cublas, _ = graph_ms([lambda s=s: F.linear(s["x"], s["w"]) for s in states], target_ms=10)
        rows.append({"variant": variant, "m": m, "n": n, "k": k, "config": gm.gluon_label(cfg),
                     "us": 1e3 * ours, "cublas_us": 1e3 * cublas})
        print(f"{variant}: M={m} N=K={n} {rows[-1]['config']}: {rows[-1]['us']:.2f} us", file=sys.stderr, flush=True)
    return rows


def markdown(rows: list[dict], variants: list[str]) -> str:
    """One row per case, one column per variant (us), cuBLAS beside."""
    cases = list(dict.fromkeys((r["m"], r["n"], r["config"]) for r in rows))
    times = {(r["m"], r["n"], r["config"], r["variant"]): r["us"] for r in rows}
    cublas = {(r["m"], r["n"], r["config"]): r["cublas_us"] for r in rows}
    out = ["| M, N = K | config | cuBLAS bf16 | " + " | ".join(variants) + " |",
           "|---|---|---|" + "---|" * len(variants)]
    for case in cases:
        cells = [f"{times[case + (v,)]:.2f}" if case + (v,) in times else "-" for v in variants]
        out.append(f"| {case[0]}, {case[1]} | {case[2]} | {cublas[case]:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    p.add_argument("--variants", default=DEFAULT_VARIANTS, help="comma-separated; parts: " + ", ".join(PARTS))
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker)))
        return 0
    variants = args.variants.split(",")
    try:
        for v in variants:
            parse_variant(v)
    except ValueError as e:
        print(f"gluon_ablation.py: {e}", file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available():
        print("gluon_ablation.py: no CUDA GPU here; run it on the device (see the module docstring)", file=sys.stderr)
        return 2
    rows = []
    for v in variants:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", v], stdout=subprocess.PIPE,
                              text=True, timeout=600)
        if proc.returncode:
            print(f"gluon_ablation.py: variant {v} failed (exit {proc.returncode}); its log is above", file=sys.stderr)
            return 1
        rows += json.loads(proc.stdout.strip().splitlines()[-1])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gluon_ablation.json").write_text(json.dumps(rows, indent=1))
    (out / "gluon_ablation.md").write_text(markdown(rows, variants))
    print(markdown(rows, variants))
    return 0


if __name__ == "__main__":
    sys.exit(main())
