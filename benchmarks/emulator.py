"""Speed of the CPU-side tools, as a table (no GPU needed): the emulator on the reference GEMM shapes, the PTX
parser on 10k+ lines, the verifier on a masked GEMM whose K is not known divisible by 16.

    PYTHONPATH=python python benchmarks/emulator.py [--out DIR]

Each row prints wall and CPU seconds of the timed step (compiles and warm-ups are excluded and reported apart)
and the goal it is read against. Time is measured here, never asserted in tests: a shared 2-core CI machine
makes wall time a measure of the neighbours. Output: the table on stdout and, with --out, DIR/emulator.md.
"""
from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from typing import Callable

import triton
import triton.language as tl


@dataclass
class Row:
    name: str
    wall_s: float
    cpu_s: float
    goal: str
    detail: str = ""


def _timed(fn: Callable[[], object]) -> tuple[float, float, object]:
    """(wall s, this process's CPU s, fn's result)."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w0, time.process_time() - c0, out


@triton.jit
def _masked_matmul(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Tutorial-03-shaped GEMM with masks on every edge: nothing about M, N, K or the strides is known."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def emulated_gemm_rows() -> list[Row]:
    """1024x512x256 bf16 tl.dot under the emulated driver, 128x128 and 128x256 tiles (goal <= 5 s each)."""
    import torch

    from bwtriton.emu import emulated_gpu
    from bwtriton.examples.matmul import matmul_kernel
    M, N, K = 1024, 512, 256
    g = torch.Generator().manual_seed(0)
    a = torch.randn(M, K, generator=g).to(torch.bfloat16)
    b = torch.randn(K, N, generator=g).to(torch.bfloat16)
    ref = a.double() @ b.double()
    rows = []
    with emulated_gpu("sm_100a"):
        for bn in (128, 256):
            c = torch.empty(M, N, dtype=torch.bfloat16)

            def launch():
                return matmul_kernel[(M // 128, N // bn)](a, b, c, M, N, K, a.stride(0), 1, b.stride(0), 1,
                                                          c.stride(0), 1, BLOCK_M=128, BLOCK_N=bn, BLOCK_K=64)
            first_wall, _, compiled = _timed(launch)  # compile + first run
            wall, cpu, compiled = _timed(launch)
            stats = compiled.run.last_stats
            err = float((c.double() - ref).abs().max())
            rows.append(Row(f"emulated bf16 GEMM {M}x{N}x{K}, 128x{bn} tiles", wall, cpu, "<= 5 s",
                            f"{stats.instructions / max(cpu, 1e-9) / 1e3:.0f}k warp-instr/CPU-s, first launch "
                            f"(with compile) {first_wall:.1f} s, max |err| {err:.3g}"))
    return rows


def parse_and_verify_rows() -> list[Row]:
    """The PTX parser on 10k+ lines and the verifier on a masked GEMM (K not known divisible by 16)."""
    import bwtriton
    from bwtriton.ptx import parse_ptx
    from bwtriton.verify import verify_ptx
    sig = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", **{n: "i32" for n in
           ("M", "N", "K", "sam", "sak", "sbk", "sbn", "scm", "scn")}}
    compiled = bwtriton.compile(_masked_matmul, signature=sig, constexprs={"BM": 128, "BN": 128, "BK": 64},
                                target="sm_100a", num_warps=4, num_stages=1)
    text = compiled.asm["ptx"]
    body, copies = text, 1
    while len(body.splitlines()) < 10000:
        body += "\n" + text.replace(f".entry {compiled.name}", f".entry {compiled.name}_{copies}")
        copies += 1
    wall, cpu, mod = _timed(lambda: parse_ptx(body))
    rows = [Row(f"parse {len(body.splitlines())} lines of PTX", wall, cpu, "< 1 s", f"{len(mod.entries)} entries")]
    verify_ptx(text)  # warm-up: z3's first query loads the solver
    wall, cpu, report = _timed(lambda: verify_ptx(text))
    rows.append(Row(f"verify masked bf16 GEMM ({len(text.splitlines())} lines)", wall, cpu, "< 2 s",
                    f"{len(report.errors)} errors, {len(report.warnings)} warnings"))
    rows.append(verify_warp_specialized_row())
    return rows


def verify_warp_specialized_row() -> Row:
    """The verifier (cross-warp hand-offs included) on a persistent warp-specialized GEMM: loader, MMA and
    8-warp epilogue partitions under Triton 3.6's brx dispatch, double-buffered accumulator."""
    import bwtriton
    from bwtriton.verify import verify_ptx
    sig = {"a_desc": "tensordesc<fp16[128,64]>", "b_desc": "tensordesc<fp16[256,64]>",
           "c_desc": "tensordesc<fp16[128,256]>", "M": "i32", "N": "i32", "K": "i32"}
    compiled = bwtriton.compile(_persistent_ws_matmul, signature=sig, constexprs={"BM": 128, "BN": 256, "BK": 64},
                                target="sm_100a", num_warps=8, num_stages=3)
    text = compiled.asm["ptx"]
    verify_ptx(text)  # warm-up
    wall, cpu, report = _timed(lambda: verify_ptx(text))
    return Row(f"verify persistent warp-specialized GEMM ({len(text.splitlines())} lines)", wall, cpu, "<= 2 s",
               f"{len(report.errors)} errors, {len(report.warnings)} warnings")


@triton.jit
def _persistent_ws_matmul(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Tutorial-09-shaped persistent GEMM over host tensor descriptors, the tile loop warp-specialized."""
    tiles_n = tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), tl.cdiv(M, BM) * tiles_n, 148, flatten=True, warp_specialize=True):
        row = (tile // tiles_n) * BM
        col = (tile % tiles_n) * BN
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kt in range(tl.cdiv(K, BK)):
            acc = tl.dot(a_desc.load([row, kt * BK]), b_desc.load([col, kt * BK]).T, acc)
        c_desc.store([row, col], acc.to(tl.float16))


def markdown(rows: list[Row]) -> str:
    lines = ["| row | wall s | CPU s | goal | detail |", "|---|---|---|---|---|"]
    lines += [f"| {r.name} | {r.wall_s:.2f} | {r.cpu_s:.2f} | {r.goal} | {r.detail} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--out", default="", help="folder for emulator.md (default: stdout only)")
    args = p.parse_args(argv)
    rows: list[Row] = []
    for group in (parse_and_verify_rows, emulated_gemm_rows):
        print(f"running {group.__name__} ...", flush=True)
        rows += group()
    text = markdown(rows)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "emulator.md"), "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
