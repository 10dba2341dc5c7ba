"""NVFP4 benchmark rows (targets are for the H200), timed under CUDA-graph replay by `_harness`.

Rows (each against what a user would run instead, `peers.py`, timed in the same process):
* linear: the W4A4 `nvfp4_linear` (x quantized to NVFP4 on the fly; auto form, tuned per shape) against bf16
  `F.linear` (cuBLAS) on the original weight, M = 1 .. 8192 at N = K = 4096 / 8192 and the four LLM shapes.
  Extra peers at N = K = 4096: gemlite int4 g128 (bf16 x), gemlite's W4A4 NVFP4 path at M = 1, and (M <= 64) our
  own two-launch 'dequant_decode' form as a self-comparison. Goal: >= 1.0x at every M. The note names the form the
  tuner kept.
* decode: weight-only `nvfp4_decode_matmul` (bf16 x) against bf16 `F.linear` at M = 1, 16 on every shape and
  M = 4 .. 8192 on the square ones, with gemlite int4 g128 (and its NVFP4 weight-only path at M = 1, 8192^2) as
  extra peers. Unit: GB/s of *our* bytes (4.5 bits/weight) up to M = 128, TFLOP/s above; the ratio column is the
  speedup either way; "of copy BW" compares ours with the card's copy bandwidth. Goals: 3.0x and 85% of
  copy bandwidth at M <= 16, 1.5x at M = 64 - 128, 1.0x above.
* GEMM: `nvfp4_matmul` vs torch dequantize + cuBLAS (the dequantization is part of the peer's time: that is what
  a torch user pays), `method='dot_scaled'` at 4096^3 as a self-comparison, and upstream Triton's own
  `tl.dot_scaled` kernel (fails to compile on sm_90: an error row, which is the point of
  lower-dot-scaled-portable).

Run alone: ``python benchmarks/blockscaled.py [--out DIR] [--only decode,linear]``; `run_all.py` includes these
rows via `register()`.
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
from _timing import l2_copies  # noqa: E402

#: (N, K) of the decode and linear rows: square 4096 / 8192 projections and the four DeepSeek/Llama-style shapes.
SQUARE_SHAPES = ((8192, 8192), (4096, 4096))
LLM_SHAPES = ((7168, 16384), (4096, 7168), (7168, 2048), (28672, 4096))
DECODE_SHAPES = SQUARE_SHAPES + LLM_SHAPES

#: Batch sizes of the weight-only rows: decode sizes on every shape, more on the square ones (any M runs: the
#: mixed-input wgmma GEMM covers M > 64).
DECODE_MS_ALL = (1, 16)
DECODE_MS_SQUARE = (4, 64, 128, 1024)
DECODE_MS_LARGEST = ((8192, 8192, 8192),)
DECODE_QUICK = ((8192, 8192, 1), (8192, 8192, 16), (8192, 8192, 128), (4096, 4096, 1024))

#: Batch sizes of the W4A4 linear rows per shape.
LINEAR_MS = {(4096, 4096): (1, 16, 64, 256, 1024, 4096, 8192), (8192, 8192): (1, 64, 8192)}
LINEAR_MS_LLM = (1, 16, 1024)
LINEAR_QUICK = ((4096, 4096, 1), (4096, 4096, 64), (4096, 4096, 1024), (8192, 8192, 8192))


def _mods():
    return (importlib.import_module("bwtriton.kernels.blockscaled"), importlib.import_module("bwtriton.kernels.decode"),
            importlib.import_module("bwtriton.kernels.nvfp4_linear"))


def _rel_err(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def _lazy(state: dict, key: str, build):
    """state[key], built on first use (gemlite layers: built per input copy, outside the timed graph)."""
    if key not in state:
        state[key] = build()
    return state[key]


def _weights(n: int, k: int, extra: int) -> list[dict]:
    """Copies of (original weight as bf16, its NVFP4 quantization, fp32 weight for peers that quantize it
    themselves) so the round-robin working set exceeds L2 on every side; `extra` bytes per copy beside them."""
    from bwtriton.formats import quantize_nvfp4
    torch.manual_seed(0)
    states = []
    for _ in range(l2_copies(n * k * 9 // 16 + extra)):
        w = torch.randn(n, k, device="cuda") * 0.02
        states.append({"w_q": quantize_nvfp4(w), "w_bf16": w.to(torch.bfloat16), "w": w})
    return states


def _decode_states(m: int, n: int, k: int) -> list[dict]:
    states = _weights(n, k, m * k * 2)
    for s in states:
        s["x"] = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    return states


def _decode_note(m: int, n: int, k: int):
    def note(_state) -> str:
        dec = _mods()[1]
        cfg = dec.tuned_decode_config(m, n, k, device_index=torch.cuda.current_device())
        return f"auto picked {dec.config_label(cfg)}" if cfg else ""
    return note


def _gemlite_int4(s: dict):
    import peers
    return _lazy(s, "gl_int4", lambda: peers.gemlite_int4(s["w"]))(s["x"])


def _gemlite_nvfp4(s: dict):
    import peers
    return _lazy(s, "gl_nvfp4", lambda: peers.gemlite_nvfp4(s["w_q"]))(s["x"])


def _gemlite_w4a4(s: dict):
    import peers
    return _lazy(s, "gl_w4a4", lambda: peers.gemlite_nvfp4_w4a4(s["w_q"]))(s["x"])


def _decode_target(m: int) -> float:
    """Issue 26's weight-only goals against cuBLAS bf16."""
    return 3.0 if m <= 16 else 1.5 if m <= 128 else 1.0


def _decode_rows(quick: bool) -> list[tuple[int, int, int]]:
    if quick:
        return list(DECODE_QUICK)
    rows = [(n, k, m) for n, k in DECODE_SHAPES for m in DECODE_MS_ALL]
    rows += [(n, k, m) for n, k in SQUARE_SHAPES for m in DECODE_MS_SQUARE]
    return rows + list(DECODE_MS_LARGEST)


def _register_decode(quick: bool) -> None:
    for n, k, m in _decode_rows(quick):
        extra = [("gemlite int4 g128", _gemlite_int4)]
        if (n, k, m) == (8192, 8192, 1):
            extra.append(("gemlite nvfp4 weight-only", _gemlite_nvfp4))
        bytes_unit = m <= 128
        register_case(f"nvfp4 decode M={m} N={n} K={k}",
                      lambda s: _mods()[1].nvfp4_decode_matmul(s["x"], s["w_q"]),
                      lambda s: torch.nn.functional.linear(s["x"], s["w_bf16"]),
                      work=(n * k * 9 / 16 + m * k * 2 + m * n * 2) if bytes_unit else 2.0 * m * n * k,
                      unit="GB/s" if bytes_unit else "TFLOP/s", peer_name="bf16 F.linear (cuBLAS)",
                      group="decode (weight-only NVFP4, bf16 x)", setup=functools.partial(_decode_states, m, n, k),
                      check=_rel_err, target_ratio=_decode_target(m), bw_target=0.85 if m <= 16 else None,
                      note=_decode_note(m, n, k), extra_peers=extra)


def _gemm_operands(m: int, n: int, k: int) -> dict:
    """Setup of the GEMM rows: NVFP4 a_q [m, k] and b_q [n, k] from seeded normal data."""
    from bwtriton.formats import quantize_nvfp4
    torch.manual_seed(0)
    return {"a_q": quantize_nvfp4(torch.randn(m, k, device="cuda")),
            "b_q": quantize_nvfp4(torch.randn(n, k, device="cuda"))}


def _gemm_note(m: int, n: int, k: int):
    def note(_state) -> str:
        from bwtriton.kernels._common import tcgen05_block_scaled
        from bwtriton.kernels._device import device_capability
        dev = torch.device("cuda", torch.cuda.current_device())
        native = tcgen05_block_scaled(dev)
        if _mods()[0].use_dequant_gemm(m, n, k, native, device_capability(dev)):
            return "auto: exact dequant of both operands to bf16 + kernels.matmul"
        return "auto: native block-scaled MMA" if native else "auto: dot_scaled (lower-dot-scaled-portable)"
    return note


def _register_gemm() -> None:
    def peer(s):
        return torch.matmul(s["a_q"].dequantize(torch.bfloat16), s["b_q"].dequantize(torch.bfloat16).T)
    for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192)):
        target = 1.3 if m == 8192 else None
        for method in ("auto", "dot_scaled") if m == 4096 else ("auto",):
            register_case(f"nvfp4 gemm {m}x{n}x{k}" + ("" if method == "auto" else f" ({method})"),
                          lambda s, method=method: _mods()[0].nvfp4_matmul(s["a_q"], s["b_q"], method=method),
                          peer, work=2.0 * m * n * k, peer_name="torch dequant + cuBLAS", group="gemm",
                          setup=functools.partial(_gemm_operands, m, n, k), check=_rel_err,
                          target_ratio=target if method == "auto" else None,
                          note=_gemm_note(m, n, k) if method == "auto" else None)
    m = n = k = 4096

    def upstream(s):
        """Upstream Triton: the same tl.dot_scaled kernel, launched without bwtriton's pipeline."""
        bs = _mods()[0]
        import triton
        # A fresh JITFunction: Triton's in-memory cache ignores stage hooks, so reusing bwtriton's kernel object
        # could hand back the version compiled through lower-dot-scaled-portable.
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


def _linear_states(m: int, n: int, k: int) -> list[dict]:
    states = _weights(n, k, m * k * 2)
    for s in states:
        x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        s.update(x=x, gs=float(x.float().abs().max()) / 2688)  # a calibrated activation scale
    return states


def _linear_note(m: int, n: int, k: int):
    def note(_state) -> str:
        lin = _mods()[2]
        for key, times in lin.TUNING_LOG.items():
            if key[1:4] == (lin._m_bucket(m), n, k):
                best = min(times, key=times.get)
                return f"auto: {best} ({times[best]:.1f} us of {len(times)} tried)"
        return ""
    return note


def _linear_rows(quick: bool) -> list[tuple[int, int, int]]:
    if quick:
        return list(LINEAR_QUICK)
    rows = [(n, k, m) for (n, k), ms in LINEAR_MS.items() for m in ms]
    return rows + [(n, k, m) for n, k in LLM_SHAPES for m in LINEAR_MS_LLM]


def _register_linear(quick: bool) -> None:
    lin = lambda: _mods()[2]  # noqa: E731
    for n, k, m in _linear_rows(quick):
        extra = []
        if (n, k) == (4096, 4096):
            if m == 1:
                extra.append(("gemlite nvfp4 W4A4 dynamic", _gemlite_w4a4))
            extra.append(("gemlite int4 g128 (bf16 x)", _gemlite_int4))
            if m <= 64:  # self-comparison: the same GEMM with x's quantize-dequantize as its own launch
                extra.append(("ours, dequant_decode (2 launches)",
                              lambda s: lin().nvfp4_linear(s["x"], s["w_q"], x_global_scale=s["gs"],
                                                           form="dequant_decode")))
        register_case(f"nvfp4 linear W4A4 M={m} N={n} K={k}",
                      lambda s: lin().nvfp4_linear(s["x"], s["w_q"], x_global_scale=s["gs"]),
                      lambda s: torch.nn.functional.linear(s["x"], s["w_bf16"]),
                      work=2.0 * m * n * k, peer_name="bf16 F.linear (cuBLAS)", group="linear (W4A4 NVFP4)",
                      setup=functools.partial(_linear_states, m, n, k), check=_rel_err, target_ratio=1.0,
                      note=_linear_note(m, n, k), extra_peers=extra)


def register(quick: bool = False) -> None:
    """Register the decode, GEMM and linear rows (`quick`: fewer shapes)."""
    _register_linear(quick)  # first: the rows a run cut short by a time limit should keep
    _register_decode(quick)
    _register_gemm()


def main() -> None:
    """Command line: run the selected block-scaled rows on the current GPU and write the table/CSV/PNG."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    parser.add_argument("--only", default="", help="comma-separated groups/names: decode, gemm, linear")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rep-ms", type=int, default=20, help="length of each timed CUDA graph (ms)")
    parser.add_argument("--quick", action="store_true", help="fewer shapes")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/blockscaled.py needs a CUDA GPU")
    register(args.quick)
    run_all(args.out, name="blockscaled", only=[o for o in args.only.split(",") if o] or None, rounds=args.rounds,
            rep_ms=args.rep_ms, title=f"NVFP4 on {torch.cuda.get_device_name()}")


if __name__ == "__main__":
    main()
