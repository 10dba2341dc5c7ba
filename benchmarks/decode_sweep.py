"""Sweep of the weight-only decode paths' configs per shape against cuBLAS bf16 `F.linear`, all under CUDA-graph
replay with the weight rotated past L2 (`_timing.graph_ms`), one table (markdown + JSON):

    PYTHONPATH=python python benchmarks/decode_sweep.py --out DIR [--jobs "g8192x8192:64 t4096x7168:16 l4096x4096:1"]

A job is NxK:M,M.. with a prefix: g = a grid of the scaled-weight frag kernel ('fragw': tiles per thread x chunks
per step x warps x split), w = a grid of mixed-input wgmma configs, q = the Gluon mixed GEMM's configs
(`kernels.gluon_mixed`, its candidates and GLUON_EXTRA, in the register and the staged K loop (the staged ones
also with half the split, and with x^T by TMA), split ones with both slice sums), d = the shared-memory decode
GEMM's configs (`kernels.dq_wgmma`, its candidates and DQ_EXTRA) beside dequant_gemm, t = the auto path (the
tuner's configs, its log beside), l = the W4A4 `nvfp4_linear` (auto form) against F.linear. Each config's time
and its ratio against F.linear; for 't' jobs the tuner's own times (`decode.tuning_copies`: weight copies rotated
past L2) beside the sweep's.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

#: (TILES_PER_THREAD, CHUNKS_PER_STEP, num_warps) of the fragw grid; splits 1 .. 16 each.
FRAGW_GRID = ((1, 2, 4), (2, 2, 4), (1, 2, 8), (1, 4, 4))
FRAGW_SPLITS = (2, 4, 8, 16)


def _states(m: int, n: int, k: int) -> list[dict]:
    import torch

    from _timing import l2_copies
    from bwtriton.formats import quantize_nvfp4
    torch.manual_seed(0)
    out = []
    for _ in range(l2_copies(n * k * 9 // 16 * 2 + m * k * 2)):  # x2: the frag copy beside the weight
        w = torch.randn(n, k, device="cuda") * 0.02
        out.append({"w_q": quantize_nvfp4(w), "w_bf16": w.to(torch.bfloat16),
                    "x": torch.randn(m, k, device="cuda").to(torch.bfloat16)})
        del w
    return out


def _configs(m: int, n: int, k: int) -> list[dict]:
    """The fragw grid at this shape."""
    wide = __import__("bwtriton.kernels.decode", fromlist=["x"])._wide
    cands = []
    if m <= wide.WIDE_MAX_M:
        for t, c, w in FRAGW_GRID:
            for s in FRAGW_SPLITS:
                cfg = wide.wide_candidate(m, n, k, t, c, w, s)
                if cfg is not None and cfg["SPLIT_K"] == s and cfg not in cands:
                    cands.append(cfg)
    return cands


#: (BLOCK_N, BLOCK_K, num_warps, num_stages, BLOCK_M or None, split_div) of the wgmma grid ('w' jobs): smaller
#: tiles (more CTAs per SM, so that one CTA's decode overlaps another's MMAs), deeper rings, wider tiles.
WGMMA_GRID = ((64, 64, 4, 4, None, 1), (128, 64, 8, 5, None, 1), (128, 64, 8, 3, None, 2), (256, 64, 8, 3, None, 1),
              (128, 64, 8, 4, 64, 1), (64, 128, 4, 4, None, 1))


def _wgmma_configs(m: int, n: int, k: int, num_sms: int) -> list[dict]:
    mixed = __import__("bwtriton.kernels.mixed_gemm", fromlist=["x"])
    cands = []
    for bn, bk, w, st, bm, div in WGMMA_GRID:
        cfg = mixed.mixed_config(m, n, k, bn, bk, w, st, num_sms=num_sms, block_m=bm, split_div=div)
        if cfg is not None and cfg not in cands:
            cands.append(cfg)
    return cands


#: (BLOCK_N, BLOCK_K, num_warps, BLOCK_M or None) tried beside the tuner's shapes in 'q' jobs, and the stage counts.
GLUON_EXTRA = ((128, 128, 4, None), (128, 64, 8, None))
GLUON_STAGES = (0, 4, 6)


def _gluon_configs(m: int, n: int, k: int, num_sms: int) -> list[dict]:
    """The Gluon mixed GEMM's tuner candidates and GLUON_EXTRA shapes, each in every K loop of GLUON_STAGES (the
    staged ones also with half the split), split ones with either slice sum; configs the kernel refuses are left
    out."""
    gm = __import__("bwtriton.kernels.gluon_mixed", fromlist=["x"])
    errors = __import__("bwtriton.errors", fromlist=["x"])
    base = list(gm.gluon_candidates(m, n, k, num_sms))
    base += [c for bn, bk, w, bm in GLUON_EXTRA if (c := gm.gluon_config(m, n, k, bn, bk, w, bm, num_sms))]
    cands = []
    for cfg in base:
        for stages in GLUON_STAGES:
            for f in ((1,) if stages == 0 else (1, 0.5)):  # deeper rings may want fewer, longer slices
                for tma in ((False,) if stages == 0 else (False, True)):  # staged: x^T by cp.async or by TMA
                    c = dict(cfg, SPLIT_K=max(1, int(cfg["SPLIT_K"] * f)), STAGES=stages, X_TMA=tma)
                    try:
                        gm.check_config("sweep", c, m, n, k)
                    except errors.InputError:
                        continue
                    sums = gm.SLICE_SUMS if c["SPLIT_K"] > 1 else (c["SLICE_SUM"],)
                    cands += [d for d in (dict(c, SLICE_SUM=x) for x in sums) if d not in cands]
    return cands


#: (BLOCK_M, BLOCK_N, STAGES) tried beside the dq_wgmma tuner's shapes in 'd' jobs.
DQ_EXTRA = ((256, 128, 2), (128, 256, 3), (128, 128, 4), (128, 128, 6))


def _dq_configs(m: int, n: int, k: int) -> list[dict]:
    """The dq_wgmma tuner candidates and DQ_EXTRA at this shape, then dequant_gemm (the path it replaces)."""
    dq = __import__("bwtriton.kernels.dq_wgmma", fromlist=["x"])
    cands = list(dq.dq_candidates(m, n, k))
    cands += [{"path": "dq_wgmma", "BLOCK_M": bm, "BLOCK_N": bn, "STAGES": st, "SPLIT_K": 1}
              for bm, bn, st in DQ_EXTRA if n % bn == 0]
    return [c for i, c in enumerate(cands) if c not in cands[:i]] + [{"path": "dequant_gemm", "SPLIT_K": 1}]


def sweep_shape(m: int, n: int, k: int, rep_ms: float, grid: bool = True, kind: str = "g") -> dict:
    """Times of every config and of cuBLAS at one shape."""
    import torch
    import torch.nn.functional as F

    from _timing import graph_ms
    dec = __import__("bwtriton.kernels.decode", fromlist=["x"])
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    states = _states(m, n, k)
    peer_ms, _ = graph_ms([lambda s=s: F.linear(s["x"], s["w_bf16"]) for s in states], target_ms=rep_ms)
    rows = []
    ref = F.linear(states[0]["x"].double(), states[0]["w_q"].dequantize(torch.float64))
    configs = (_configs(m, n, k) if kind == "g" else _wgmma_configs(m, n, k, num_sms) if kind == "w"
               else _gluon_configs(m, n, k, num_sms) if kind == "q" else _dq_configs(m, n, k) if kind == "d" else [])
    for cfg in configs:
        label = dec.config_label(cfg)
        try:
            out = dec.nvfp4_decode_matmul(states[0]["x"], states[0]["w_q"], config=cfg)
            err = ((out.double() - ref).norm() / ref.norm()).item()
            ms, timer = graph_ms([lambda s=s, c=cfg: dec.nvfp4_decode_matmul(s["x"], s["w_q"], config=c)
                                  for s in states], target_ms=rep_ms)
            rows.append({"config": label, "cfg": cfg, "us": 1e3 * ms, "ratio": peer_ms / ms, "err": err,
                         "timer": timer})
        except Exception as exc:  # noqa: BLE001 - one failing config must not end the sweep
            rows.append({"config": label, "error": f"{type(exc).__name__}: {exc}"[:200]})
    if grid:  # the tuner's own candidates are the 't' jobs
        return {"m": m, "n": n, "k": k, "cublas_us": 1e3 * peer_ms, "rows": rows, "auto_us": float("nan"),
                "auto_ratio": float("nan"), "auto_config": None, "tuning": {}}
    auto_ms, _ = graph_ms([lambda s=s: dec.nvfp4_decode_matmul(s["x"], s["w_q"]) for s in states],
                          target_ms=rep_ms)
    tuned = dec.tuned_decode_config(m, n, k, device_index=torch.cuda.current_device())
    log = next((t for key, t in dec.TUNING_LOG.items() if key[1:4] == (m, n, k)), {})
    return {"m": m, "n": n, "k": k, "cublas_us": 1e3 * peer_ms, "rows": rows, "auto_us": 1e3 * auto_ms,
            "auto_ratio": peer_ms / auto_ms, "auto_config": dec.config_label(tuned) if tuned else None,
            "tuning": log}


def linear_shape(m: int, n: int, k: int, rep_ms: float) -> dict:
    """The W4A4 linear (auto form, calibrated x scale) against F.linear."""
    import torch.nn.functional as F

    from _timing import graph_ms
    lin = __import__("bwtriton.kernels.nvfp4_linear", fromlist=["x"])
    states = _states(m, n, k)
    for s in states:
        s["gs"] = float(s["x"].float().abs().max()) / 2688
    peer_ms, _ = graph_ms([lambda s=s: F.linear(s["x"], s["w_bf16"]) for s in states], target_ms=rep_ms)
    ours_ms, _ = graph_ms([lambda s=s: lin.nvfp4_linear(s["x"], s["w_q"], x_global_scale=s["gs"]) for s in states],
                          target_ms=rep_ms)
    log = next((t for key, t in lin.TUNING_LOG.items() if key[1:4] == (lin._m_bucket(m), n, k)), {})
    return {"m": m, "n": n, "k": k, "cublas_us": 1e3 * peer_ms, "us": 1e3 * ours_ms, "ratio": peer_ms / ours_ms,
            "tuning": log}


def markdown(decode_rows: list[dict], linear_rows: list[dict]) -> str:
    out = ["### decode configs (us, ratio = cuBLAS bf16 F.linear time / ours)", ""]
    for r in decode_rows:
        ok = sorted((x for x in r["rows"] if "us" in x), key=lambda x: x["us"])
        out.append(f"**M={r['m']} N={r['n']} K={r['k']}**: cuBLAS {r['cublas_us']:.1f} us; auto "
                   f"{r['auto_us']:.1f} us ({r['auto_ratio']:.2f}x, picked {r['auto_config']}); best "
                   + (f"{ok[0]['config']} {ok[0]['us']:.1f} us ({ok[0]['ratio']:.2f}x)" if ok else "none"))
        out.append("")
        out.append("| config | us | ratio | rel err |")
        out.append("|---|---|---|---|")
        for x in ok[:12]:
            out.append(f"| {x['config']} | {x['us']:.1f} | {x['ratio']:.2f} | {x['err']:.1e} |")
        for x in r["rows"]:
            if "error" in x:
                out.append(f"| {x['config']} | ERROR | | {x['error'][:90]} |")
        if r.get("tuning"):
            out.append("")
            out.append("tuner (its weight copies rotated past L2): " + ", ".join(
                f"{name} {us:.1f}" for name, us in sorted(r["tuning"].items(), key=lambda kv: kv[1])[:8]))
        out.append("")
    out += ["### W4A4 nvfp4_linear (auto form, calibrated x scale)", "", "| M | N | K | us ours | us cuBLAS | ratio |"
            " tuner's best form |", "|---|---|---|---|---|---|---|"]
    for r in linear_rows:
        best = min(r["tuning"], key=r["tuning"].get) if r["tuning"] else "-"
        out.append(f"| {r['m']} | {r['n']} | {r['k']} | {r['us']:.1f} | {r['cublas_us']:.1f} | {r['ratio']:.2f} | "
                   f"{best} |")
    return "\n".join(out) + "\n"


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    p.add_argument("--jobs", default="g8192x8192:64,128 g4096x4096:64 t8192x8192:64 t7168x2048:16 "
                                     "l4096x4096:16,64 t28672x4096:64 g4096x7168:64 t8192x8192:128")
    p.add_argument("--rep-ms", type=float, default=10.0)
    p.add_argument("--budget-s", type=float, default=240.0, help="stop starting new shapes after this long")
    args = p.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("decode_sweep.py needs a CUDA GPU", file=sys.stderr)
        return 2
    t0 = time.time()
    jobs = []
    for spec in args.jobs.split():
        shape, ms = spec[1:].split(":")
        n, k = (int(v) for v in shape.split("x"))
        jobs += [(spec[0], int(m), n, k) for m in ms.split(",")]
    decode_rows, linear_rows = [], []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for kind, m, n, k in jobs:
        if time.time() - t0 > args.budget_s:
            print(f"budget reached, skipping {kind} M={m} N={n} K={k}", flush=True)
            continue
        if kind == "l":
            linear_rows.append(linear_shape(m, n, k, args.rep_ms))
        else:
            decode_rows.append(sweep_shape(m, n, k, args.rep_ms, grid=kind in "gwqd", kind=kind))
        torch.cuda.empty_cache()
        print(f"[{time.time() - t0:6.1f}s] {kind} M={m} N={n} K={k} done", flush=True)
        (out / "sweep.md").write_text(markdown(decode_rows, linear_rows))
        (out / "sweep.json").write_text(json.dumps({"decode": decode_rows, "linear": linear_rows}, indent=1))
    print(markdown(decode_rows, linear_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
