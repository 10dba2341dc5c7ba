"""MoE layers and whole models, bwtriton NVFP4/MXFP4 against what a user runs instead, on one GPU, one process.

    PYTHONPATH=python python benchmarks/models.py --out DIR        # writes DIR/models.md and DIR/models.json

1. MoE layer (router output given): bwtriton `MoEExperts` (NVFP4 and MXFP4 weights; extra column: NVFP4 through
   the 'grouped_mm' path) against bf16 experts run
   (a) as a per-expert loop (transformers' eager expert loop: gather, two F.linear, index_add; it syncs with the
   host, so it is timed eagerly) and (b) as torch's grouped GEMM `torch._grouped_mm` on the same expert-sorted
   rows (graph-captured). Decode (T <= 64 tokens) and prefill (T = 4096) rows; relative error vs bf16.
2. Whole model: a Llama-architecture and a Mixtral-architecture decoder stack (plain torch blocks of the real
   shapes, a few layers, random weights), bf16 (experts through `torch._grouped_mm`) against the same model after
   `bwtriton.models.quantize_`: prefill tokens/s (batch 1, 2048 tokens), decode tokens/s (batch 1, one token
   against a 1024-token static KV cache, CUDA graph replay), weight memory, peak memory, output relative error.
   Two quantized variants: "bwtriton nvfp4" (W4A4: Linear activations quantized to NVFP4 per call) and
   "bwtriton nvfp4 w4a16" (`quantize_(..., activations="bf16")`: weight-only Linear layers, bf16 activations;
   the experts are the same NVFP4 `MoEExperts` in both).

Kernel times are CUDA-graph replays (`_timing.graph_ms`); the per-expert loop syncs with the host (torch.where),
so it is timed eagerly without a capture attempt ("eager"). A capture that fails inside torch leaves the default
CUDA generator in capture mode (torch's CUDAGraph::capture_end throws at cudaStreamEndCapture before the
generator's capture epilogue), and every later CUDA RNG call then raises "Offset increment outside graph capture
encountered unexpectedly"; `_reset_generator_capture_state` runs one trivial capture after any failed one.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import graph_ms  # noqa: E402

from bwtriton.kernels.moe_routing import plan_routing, route_topk  # noqa: E402
from bwtriton.models import MoEExperts, quantize_  # noqa: E402

BUDGET_S = 170.0


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def _bytes(module: torch.nn.Module) -> int:
    tensors = list(module.parameters()) + list(module.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)


# ------------------------------------------------------------------------------------------- bf16 experts

class BF16Experts(torch.nn.Module):
    """bf16 experts stored as transformers >= 5 does ([E, 2I, H] gate rows then up rows, [E, H, I], SiLU), run
    through torch._grouped_mm (`grouped=True`) or the per-expert loop."""

    def __init__(self, e: int, h: int, i: int, grouped: bool = True):
        super().__init__()
        # drawn in bf16: an fp32 draw of a Mixtral layer's experts would be 3.7 GB
        self.gate_up_proj = torch.nn.Parameter(torch.randn(e, 2 * i, h, dtype=torch.bfloat16) * h ** -0.5,
                                               requires_grad=False)
        self.down_proj = torch.nn.Parameter(torch.randn(e, h, i, dtype=torch.bfloat16) * i ** -0.5,
                                            requires_grad=False)
        self.act_fn = torch.nn.SiLU()
        self.grouped = grouped

    def forward(self, x, top_k_index, top_k_weights):
        if self.grouped and hasattr(torch, "_grouped_mm"):
            return self._grouped(x, top_k_index, top_k_weights)
        return self._loop(x, top_k_index, top_k_weights)

    def _grouped(self, x, idx, wts):
        plan = plan_routing(idx, wts, self.gate_up_proj.shape[0], 1)
        xs = x[plan.sorted_token.long()]
        gu = torch._grouped_mm(xs, self.gate_up_proj.transpose(1, 2), offs=plan.expert_end)
        g, u = gu.chunk(2, dim=-1)
        y = torch._grouped_mm(self.act_fn(g) * u, self.down_proj.transpose(1, 2), offs=plan.expert_end)
        y = y.float() * plan.sorted_weight[:, None]
        return y[plan.inverse].view(x.shape[0], idx.shape[1], -1).sum(1).to(x.dtype)

    def _loop(self, x, idx, wts):
        out = torch.zeros_like(x)
        for e in range(self.gate_up_proj.shape[0]):
            tok, slot = torch.where(idx == e)
            if tok.numel() == 0:
                continue
            g, u = F.linear(x[tok], self.gate_up_proj[e]).chunk(2, dim=-1)
            y = F.linear(self.act_fn(g) * u, self.down_proj[e]) * wts[tok, slot, None]
            out.index_add_(0, tok, y.to(x.dtype))
        return out


# --------------------------------------------------------------------------------------------- MoE layer

def moe_rows(cfg: dict, tokens: list[int]) -> list[dict]:
    """Per token count: ms of bwtriton NVFP4 / MXFP4 and of the two bf16 peers, and the relative errors."""
    e, k, h, i = cfg["experts"], cfg["top_k"], cfg["hidden"], cfg["inter"]
    torch.manual_seed(0)
    with torch.device("cuda"):  # random weights made on the GPU: GBs of torch.randn on the host take minutes
        ref = BF16Experts(e, h, i).to(torch.bfloat16)
    ours = {fmt: MoEExperts.from_dense(ref.gate_up_proj, ref.down_proj, fmt) for fmt in ("nvfp4", "mxfp4")}
    # extra column: the same NVFP4 weights through the 'grouped_mm' path (dequantize all, torch's bf16 grouped GEMM)
    ours["nvfp4_gmm"] = MoEExperts(ours["nvfp4"].weights, path="grouped_mm")
    router = torch.randn(e, h, device="cuda", dtype=torch.bfloat16) * h ** -0.5
    rows = []
    for t in tokens:
        x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16)
        wts, idx = route_topk(x @ router.T, k)
        row: dict[str, Any] = {"shape": cfg["name"], "tokens": t, "experts": e, "top_k": k, "hidden": h, "inter": i}
        with torch.no_grad():
            base = ref._loop(x, idx, wts)
            _timed(row, "bf16_loop", lambda: ref._loop(x, idx, wts), syncs=True)
            _timed(row, "bf16_grouped_mm", lambda: ref._grouped(x, idx, wts))
            for fmt, mod in ours.items():
                if _timed(row, fmt, lambda m=mod: m(x, idx, wts)):
                    row[f"{fmt}_rel_err"] = _rel(mod(x, idx, wts), base)
        for fmt in ours:
            for peer in ("bf16_grouped_mm", "bf16_loop"):
                if f"{fmt}_ms" in row and f"{peer}_ms" in row:
                    row[f"{fmt}_vs_{peer[5:]}"] = row[f"{peer}_ms"] / row[f"{fmt}_ms"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    weights = {"bf16_MB": _bytes(ref) / 1e6, **{f"{f}_MB": _bytes(m) / 1e6 for f, m in ours.items()
                                                if f != "nvfp4_gmm"}}
    rows[-1]["weights"] = weights
    return rows


def _reset_generator_capture_state() -> None:
    """One successful capture (a one-element add): its capture epilogue takes the default CUDA generator out of
    the capture mode a failed capture left it in (see the module docstring)."""
    torch.cuda.synchronize()
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    cell = torch.zeros(1, device="cuda")
    with torch.cuda.graph(graph, stream=stream):
        cell.add_(1)
    torch.cuda.synchronize()


def _replay_ms(fn: Callable[[], Any], target_ms: float) -> tuple[float, str]:
    """`graph_ms` of fn, and the generator reset when its capture failed (timer "eager")."""
    ms, timer = graph_ms([fn], target_ms=target_ms, replays=3)
    if timer != "graph":
        _reset_generator_capture_state()
    return ms, timer


def _timed(row: dict, name: str, fn: Callable[[], Any], *, syncs: bool = False) -> bool:
    """row[name_ms], row[name_timer] = graph-replay time of fn (`syncs`: an operation that syncs with the host,
    timed eagerly); on failure row[name_error] and False, so one failing variant leaves the others' numbers."""
    try:
        if syncs:
            row[f"{name}_ms"], row[f"{name}_timer"] = float(triton.testing.do_bench(fn, warmup=5, rep=40)), "eager"
        else:
            row[f"{name}_ms"], row[f"{name}_timer"] = _replay_ms(fn, 20.0)
        return True
    except Exception as exc:  # noqa: BLE001 - recorded in the table instead
        row[f"{name}_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        torch.cuda.synchronize()
        _reset_generator_capture_state()
        return False


# ----------------------------------------------------------------------------------------------- models

class RMSNorm(torch.nn.Module):
    def __init__(self, h: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(h), requires_grad=False)

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight).to(x.dtype)


class Block(torch.nn.Module):
    """A Llama / Mixtral decoder block (no rotary embedding: it costs the same in both models compared)."""

    def __init__(self, h: int, heads: int, kv_heads: int, inter: int, moe: Optional[tuple[int, int]]):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, h // heads
        self.norm1, self.norm2 = RMSNorm(h), RMSNorm(h)
        self.q_proj = torch.nn.Linear(h, h, bias=False)
        self.k_proj = torch.nn.Linear(h, kv_heads * self.hd, bias=False)
        self.v_proj = torch.nn.Linear(h, kv_heads * self.hd, bias=False)
        self.o_proj = torch.nn.Linear(h, h, bias=False)
        self.moe = moe
        if moe is None:
            self.gate_proj = torch.nn.Linear(h, inter, bias=False)
            self.up_proj = torch.nn.Linear(h, inter, bias=False)
            self.down_proj = torch.nn.Linear(inter, h, bias=False)
        else:
            self.router = torch.nn.Linear(h, moe[0], bias=False)
            self.experts = BF16Experts(moe[0], h, inter)

    def _attn(self, x, cache):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        if cache is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:  # decode: the new token's k/v go to the last cache slot, attention over the whole cache
            k_cache, v_cache = cache
            k_cache[:, :, -1:] = k
            v_cache[:, :, -1:] = v
            o = F.scaled_dot_product_attention(q, k_cache, v_cache, enable_gqa=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))

    def _mlp(self, x):
        if self.moe is None:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        flat = x.reshape(-1, x.shape[-1])
        wts, idx = route_topk(self.router(flat), self.moe[1])
        return self.experts(flat, idx, wts).view_as(x)

    def forward(self, x, cache=None):
        x = x + self._attn(self.norm1(x), cache)
        return x + self._mlp(self.norm2(x))


class Decoder(torch.nn.Module):
    def __init__(self, layers: int, **block):
        super().__init__()
        self.layers = torch.nn.ModuleList(Block(**block) for _ in range(layers))
        self.norm = RMSNorm(block["h"])

    def forward(self, x, caches=None):
        for n, layer in enumerate(self.layers):
            x = layer(x, None if caches is None else caches[n])
        return self.norm(x)


def model_rows(cfg: dict, prefill_tokens: int = 2048, context: int = 1024) -> list[dict]:
    torch.manual_seed(0)
    block = dict(h=cfg["hidden"], heads=cfg["heads"], kv_heads=cfg["kv_heads"], inter=cfg["inter"], moe=cfg["moe"])
    with torch.device("cuda"):
        model = Decoder(cfg["layers"], **block).to(torch.bfloat16).eval()
    for name, p in model.named_parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=p.shape[1] ** -0.5)
    x_pre = torch.randn(1, prefill_tokens, cfg["hidden"], device="cuda", dtype=torch.bfloat16)
    x_dec = torch.randn(1, 1, cfg["hidden"], device="cuda", dtype=torch.bfloat16)
    hd = cfg["hidden"] // cfg["heads"]
    caches = [tuple(torch.randn(1, cfg["kv_heads"], context, hd, device="cuda", dtype=torch.bfloat16)
                    for _ in range(2)) for _ in range(cfg["layers"])]
    rows = []
    with torch.no_grad():
        ref_pre, ref_dec = model(x_pre), model(x_dec, caches)
        rows.append(_model_row(cfg, "bf16", model, x_pre, x_dec, caches, ref_pre, ref_dec))
        # the bf16 weights again for the second quantized variant, parked on the host so that the W4A4 row's
        # peak memory does not count them
        weight_only = copy.deepcopy(model).cpu()
        report = quantize_(model, experts_fmt="nvfp4")
        rows[-1]["kept_bf16"] = sorted(set(report.kept))[:8]
        rows.append(_model_row(cfg, "bwtriton nvfp4", model, x_pre, x_dec, caches, ref_pre, ref_dec))
        del model
        torch.cuda.empty_cache()
        try:  # a failing variant leaves the two rows above (and says why in the table's errors)
            weight_only = weight_only.cuda()  # quantized on the GPU (the host quantizer takes minutes)
            report = quantize_(weight_only, experts_fmt="nvfp4", activations="bf16")
            rows.append(_model_row(cfg, "bwtriton nvfp4 w4a16", weight_only, x_pre, x_dec, caches, ref_pre,
                                   ref_dec))
            rows[-1]["kept_bf16"] = sorted(set(report.kept))[:8]
        except Exception as exc:  # noqa: BLE001 - recorded in the table instead
            rows.append({"model": cfg["name"], "variant": "bwtriton nvfp4 w4a16",
                         "w4a16_error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            torch.cuda.synchronize()
            _reset_generator_capture_state()
    for r in rows:
        if "decode_tok_s" not in r:
            continue
        r["prefill_speedup"] = r["prefill_tok_s"] / rows[0]["prefill_tok_s"]
        r["decode_speedup"] = r["decode_tok_s"] / rows[0]["decode_tok_s"]
        r["weight_ratio"] = r["weights_MB"] / rows[0]["weights_MB"]
        print(json.dumps(r), flush=True)
    return rows


def _model_row(cfg, name, model, x_pre, x_dec, caches, ref_pre, ref_dec) -> dict:
    out_pre, out_dec = model(x_pre), model(x_dec, caches)  # also tunes the kernels outside capture
    _reset_generator_capture_state()  # in case a tuner's own timing capture failed
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    model(x_pre)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    pre_ms, pre_timer = _replay_ms(lambda: model(x_pre), 30.0)
    dec_ms, dec_timer = _replay_ms(lambda: model(x_dec, caches), 30.0)
    return {"model": cfg["name"], "variant": name, "layers": cfg["layers"], "weights_MB": _bytes(model) / 1e6,
            "peak_MB": peak / 1e6, "activation_peak_MB": (peak - base) / 1e6,
            "prefill_tokens": x_pre.shape[1], "prefill_ms": pre_ms, "prefill_tok_s": x_pre.shape[1] / pre_ms * 1e3,
            "prefill_timer": pre_timer, "decode_ms": dec_ms, "decode_tok_s": 1e3 / dec_ms, "decode_timer": dec_timer,
            "prefill_rel_err": _rel(out_pre, ref_pre), "decode_rel_err": _rel(out_dec, ref_dec)}


# ------------------------------------------------------------------------------------------------ report

def _md_table(rows: list[dict], cols: list[tuple[str, str, str]]) -> str:
    head = "| " + " | ".join(c[0] for c in cols) + " |\n|" + "---|" * len(cols) + "\n"
    body = ""
    for r in rows:
        cells = []
        for _, key, fmt in cols:
            v = r.get(key, "")
            cells.append(format(v, fmt) if isinstance(v, (int, float)) and fmt else str(v))
        body += "| " + " | ".join(cells) + " |\n"
    return head + body


def markdown(result: dict) -> str:
    moe_cols = [("shape", "shape", ""), ("T", "tokens", "d"), ("bf16 loop ms", "bf16_loop_ms", ".3f"),
                ("bf16 _grouped_mm ms", "bf16_grouped_mm_ms", ".3f"), ("nvfp4 ms", "nvfp4_ms", ".3f"),
                ("nvfp4 vs grouped_mm", "nvfp4_vs_grouped_mm", ".2f"), ("mxfp4 ms", "mxfp4_ms", ".3f"),
                ("mxfp4 vs grouped_mm", "mxfp4_vs_grouped_mm", ".2f"), ("nvfp4 rel err", "nvfp4_rel_err", ".3f"),
                ("mxfp4 rel err", "mxfp4_rel_err", ".3f"), ("nvfp4 vs loop", "nvfp4_vs_loop", ".1f"),
                ("nvfp4 dequant+grouped_mm ms", "nvfp4_gmm_ms", ".3f"),
                ("loop timer", "bf16_loop_timer", "")]
    model_cols = [("model", "model", ""), ("variant", "variant", ""), ("prefill tok/s", "prefill_tok_s", ".0f"),
                  ("x", "prefill_speedup", ".2f"), ("decode tok/s", "decode_tok_s", ".0f"),
                  ("x", "decode_speedup", ".2f"), ("weights MB", "weights_MB", ".0f"),
                  ("weights x", "weight_ratio", ".2f"), ("peak MB", "peak_MB", ".0f"),
                  ("prefill rel err", "prefill_rel_err", ".3f"), ("decode rel err", "decode_rel_err", ".3f"),
                  ("prefill timer", "prefill_timer", ""), ("decode timer", "decode_timer", "")]
    out = f"# bwtriton models benchmark\n\n{result['device']}, torch {result['torch']}, {result['elapsed_s']:.0f} s\n\n"
    out += "## MoE layer (experts only; ms per layer)\n\n" + _md_table(result["moe"], moe_cols)
    out += "\n## Whole model (batch 1)\n\n" + _md_table(result["models"], model_cols)
    errors = result["errors"] + [f"{r.get('shape', r.get('model'))} T={r.get('tokens', '')}: {k}: {v}"
                                 for r in result["moe"] + result["models"] for k, v in r.items()
                                 if k.endswith("_error")]
    if errors:
        out += "\n## Errors\n\n" + "\n".join(f"* {e}" for e in errors) + "\n"
    return out


MOE_SHAPES = [dict(name="mixtral-8x7b layer", experts=8, top_k=2, hidden=4096, inter=14336),
              dict(name="gpt-oss-20b layer", experts=32, top_k=4, hidden=2880, inter=2880),
              dict(name="qwen1.5-moe layer", experts=60, top_k=4, hidden=2048, inter=1408)]
MODELS = [dict(name="llama-8b-like", layers=4, hidden=4096, heads=32, kv_heads=8, inter=14336, moe=None),
          dict(name="mixtral-like", layers=2, hidden=4096, heads=32, kv_heads=8, inter=14336, moe=(8, 2))]


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench_models")
    ap.add_argument("--budget", type=float, default=BUDGET_S, help="seconds after which later jobs are skipped")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "moe": [],
                              "models": [], "errors": []}
    # the first MoE shape, then the models, then the other shapes: the time budget cuts from the end
    moe_jobs = [("moe", lambda c=c: moe_rows(c, [1, 16, 64, 4096])) for c in MOE_SHAPES]
    jobs = moe_jobs[:1] + [("models", lambda c=c: model_rows(c)) for c in MODELS] + moe_jobs[1:]
    for section, job in jobs:
        if time.time() - start > args.budget:
            result["errors"].append(f"skipped a {section} job: time budget {args.budget:.0f} s spent")
            continue
        try:
            result[section] += job()
        except Exception as exc:  # noqa: BLE001 - one failing row must not lose the others
            result["errors"].append(f"{section}: {type(exc).__name__}: {str(exc)[:300]}")
            print("ERROR", result["errors"][-1], flush=True)
        torch.cuda.empty_cache()
        _write(out, result, start)  # after every job: a run cut short by a timeout keeps what it measured
    print(markdown(result))
    return 0


def _write(out: Path, result: dict, start: float) -> None:
    result["elapsed_s"] = time.time() - start
    (out / "models.json").write_text(json.dumps(result, indent=1))
    (out / "models.md").write_text(markdown(result))


if __name__ == "__main__":
    sys.exit(main())
