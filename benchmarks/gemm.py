"""GEMM benchmark: bwtriton kernels vs the vendor peer on the same inputs, one table + CSV + PNG.

    python benchmarks/gemm.py [--out DIR] [--only bf16,fp8] [--quick]

Peers: cuBLAS through `torch.matmul` (bf16/fp16) and `torch._scaled_mm` (fp8 e4m3, with use_fast_accum=True,
the accumulation mode Triton uses for fp8 on sm_90; one row also shows the precise-accumulation peer).
Block-scaled rows (NVFP4) come from `blockscaled.py` in this folder; `--only bf16,fp8` or `--only decode` picks
rows. Kernel times are CUDA-graph replays; host overhead per call is printed separately (`host.py`).
`run_all.py` runs everything at once.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import register_case, run_all  # noqa: E402


def _rel_err(ours, peer) -> float:
    """max |ours - peer| / max |peer|: a scale-free agreement check shown next to the timings."""
    o, p = ours.float(), peer.float()
    return float((o - p).abs().max() / p.abs().max().clamp_min(1e-30))


def _note_config(a_key: str, b_key: str, **kw_keys):
    def note(state) -> str:
        from bwtriton.kernels import tuned_config
        kwargs = {k: state[v] for k, v in kw_keys.items()}
        cfg = tuned_config(state[a_key], state[b_key], **kwargs)
        return cfg.short() if cfg else ""
    return note


def register_dense_cases(quick: bool = False) -> None:
    """Register the bf16/fp16/fp8 `matmul` rows against torch (cuBLAS); `quick` keeps fewer shapes."""
    import torch
    from bwtriton.kernels import matmul

    def half_setup(m, n, k, dtype, b_colmajor):
        def setup():
            g = torch.Generator(device="cuda").manual_seed(0)
            a = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
            b = torch.randn(n, k, device="cuda", dtype=dtype, generator=g).t() if b_colmajor else \
                torch.randn(k, n, device="cuda", dtype=dtype, generator=g)
            return {"a": a, "b": b}
        return setup

    half_shapes = [(8192, 8192, 8192, torch.bfloat16, False, 0.95)]
    if not quick:
        half_shapes += [(4096, 4096, 4096, torch.bfloat16, False, None), (8192, 8192, 8192, torch.bfloat16, True, None),
                        (4096, 4096, 4096, torch.float16, False, None),
                        (16384, 8192, 1024, torch.bfloat16, False, None),
                        (2048, 8192, 8192, torch.bfloat16, True, None)]
    for m, n, k, dtype, colmajor, target in half_shapes:
        tag = "bf16" if dtype == torch.bfloat16 else "fp16"
        layout = " B^T" if colmajor else ""
        register_case(f"{tag} {m}x{n}x{k}{layout}", lambda s: matmul(s["a"], s["b"]),
                      lambda s: torch.matmul(s["a"], s["b"]), 2.0 * m * n * k, peer_name="cuBLAS (torch.matmul)",
                      group=tag, setup=half_setup(m, n, k, dtype, colmajor), check=_rel_err,
                      note=_note_config("a", "b"), target_ratio=target)

    fp8 = torch.float8_e4m3fn

    def fp8_setup(m, n, k, rowwise):
        def setup():
            g = torch.Generator(device="cuda").manual_seed(0)
            a = torch.randn(m, k, device="cuda", generator=g).to(fp8)
            b = torch.randn(n, k, device="cuda", generator=g).to(fp8).t()  # column-major, as _scaled_mm wants
            if rowwise:
                sa = torch.rand(m, 1, device="cuda", generator=g) + 0.5
                sb = torch.rand(1, n, device="cuda", generator=g) + 0.5
            else:
                sa = torch.tensor(0.75, device="cuda")
                sb = torch.tensor(1.25, device="cuda")
            return {"a": a, "b": b, "sa": sa, "sb": sb}
        return setup

    def ours_fp8(s):
        return matmul(s["a"], s["b"], a_scale=s["sa"], b_scale=s["sb"])

    def peer_fp8(fast: bool):
        return lambda s: torch._scaled_mm(s["a"], s["b"], scale_a=s["sa"], scale_b=s["sb"], out_dtype=torch.bfloat16,
                                          use_fast_accum=fast)

    fp8_shapes = [(8192, 8192, 8192, False, True, 0.9), (4096, 4096, 4096, False, True, 0.95)]
    if not quick:
        fp8_shapes += [(8192, 8192, 8192, True, True, 0.9), (8192, 8192, 8192, False, False, None)]
    if not quick:
        fp8_shapes += [(16384, 8192, 1024, True, True, None)]
    for m, n, k, rowwise, fast, target in fp8_shapes:
        scales = "row/col scales" if rowwise else "tensor scales"
        peer = "_scaled_mm" + (" fast-accum" if fast else " precise-accum")
        register_case(f"fp8 {m}x{n}x{k} {scales}", ours_fp8, peer_fp8(fast), 2.0 * m * n * k, peer_name=peer,
                      group="fp8", setup=fp8_setup(m, n, k, rowwise), check=_rel_err,
                      note=_note_config("a", "b", a_scale="sa", b_scale="sb"), target_ratio=target)


def register_blockscaled_cases(quick: bool = False) -> None:
    """The NVFP4 rows of `blockscaled.py` in this folder."""
    import blockscaled
    blockscaled.register(quick)


def main(argv: list[str] | None = None) -> int:
    """Command line: register every row, run the selected ones, write the table/CSV/PNG; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(Path(__file__).parent / "out"), help="output folder (CSV, PNG, table)")
    p.add_argument("--only", default="", help="comma-separated substrings of case groups/names to run")
    p.add_argument("--quick", action="store_true", help="fewer shapes and rounds")
    p.add_argument("--rounds", type=int, default=None, help="alternating ours/peer timing rounds (default 3)")
    p.add_argument("--rep-ms", type=int, default=20, help="length of each timed CUDA graph (ms)")
    args = p.parse_args(argv)

    import torch
    if not torch.cuda.is_available():
        print("benchmarks/gemm.py needs a CUDA GPU", file=sys.stderr)
        return 2
    register_dense_cases(args.quick)
    register_blockscaled_cases(args.quick)
    rounds = args.rounds or (2 if args.quick else 3)
    name = torch.cuda.get_device_name()
    only = [s for s in args.only.split(",") if s]
    results = run_all(args.out, name="gemm", only=only, rounds=rounds, rep_ms=args.rep_ms,
                      title=f"bwtriton GEMM vs peer on {name}")
    _print_tuning_log(Path(args.out))
    from host import host_rows
    host_rows()
    return 1 if results and all(r.error for r in results) else 0


def _print_tuning_log(out: Path) -> None:
    """Every autotuning candidate's time per tuning key (set BWTRITON_GEMM_SWEEP=1 to widen the candidates)."""
    from bwtriton.kernels.matmul import TUNING_LOG
    lines = []
    for key, timings in TUNING_LOG.items():
        _cap, dtype, out_dtype, kmajor, sa, sb, bucket = key
        lines.append(f"{str(dtype).replace('torch.', '')}->{str(out_dtype).replace('torch.', '')} "
                     f"B{'col' if kmajor else 'row'} scales={sa},{sb} bucket={'x'.join(map(str, bucket))}:")
        best = min(timings.values())
        for cfg, ms in sorted(timings.items(), key=lambda kv: kv[1]):
            lines.append(f"    {cfg:<32} {ms:8.3f} ms  {best / ms:6.3f}")
    text = "\n".join(lines)
    print("\nautotuning candidates (time, speed relative to the best):\n" + text)
    (out / "gemm_tuning.txt").write_text(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
