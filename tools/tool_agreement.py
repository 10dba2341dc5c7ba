#!/usr/bin/env python3
"""Do the static verifier and the emulator agree? Each kernel (ours, small shapes: the tutorial-09-style
warp-specialized tile, the tutorial-10-style nvfp4 kernel, the Gluon warp-specialized GEMM) and each fault planted into
it (`tests/fixtures/ws_mutants.py`) is verified and emulated; a disagreement is a kernel one tool rejects and
the other runs to the correct result (or passes).

    PYTHONPATH=python:tests python tools/tool_agreement.py [--kernels t09_ws_tile,t10_nvfp4,gluon_ws] [--faults F,...]

Prints one row per (kernel, fault): verifier verdict (error check ids or "clean"), emulator verdict ("ok",
"wrong" result, or the EmulationError class), and "AGREE" / "DISAGREE". Exit code 0; the table is the product.
"""
from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import dataclass
from typing import Callable, Optional

import torch

import bwtriton
import bwtriton.emu as emu
from bwtriton.verify import verify_ptx


@dataclass
class Case:
    """A compiled kernel, how to launch it on the emulator, and how to check its output."""

    name: str
    compiled: object
    launch: Callable[[object], Callable[[], bool]]   # compiled -> (run it; True when the output is right)


def _ws_tile() -> Case:
    from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: PLC0415 - host descriptors (heavy import)
    from fixtures import upstream_style as us  # noqa: PLC0415 - the test fixtures are on PYTHONPATH only here
    k = bwtriton.compile(us.CASES["t09_ws_tile"][0], **us.options("t09_ws_tile", True, 3, 4, 1))

    def launch(compiled):
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(128, 256, generator=g).half(), torch.randn(128, 256, generator=g).half()
        c = torch.zeros(128, 128).half()

        def go() -> bool:
            emu.run(compiled, (1, 1), TensorDescriptor.from_tensor(a, [128, 64]),
                    TensorDescriptor.from_tensor(b, [128, 64]), TensorDescriptor.from_tensor(c, [128, 128]), 256)
            # fp16 operands, fp32 accumulation of 256 terms, fp16 output: 1e-2 relative is the output rounding
            return torch.allclose(c.float(), a.float() @ b.float().T, atol=5e-2, rtol=1e-2)
        return go
    return Case("t09_ws_tile", k, launch)


def _nvfp4() -> Case:
    from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: PLC0415 - host descriptors (heavy import)
    from fixtures import blockscaled_tutorial as bt  # noqa: PLC0415 - the test fixtures are on PYTHONPATH only
    M, N, K = 128, 256, 512
    k = bwtriton.compile(bt.blockscaled_tma, **bt.compile_options("nvfp4", M=M, N=N, K=K))

    def launch(compiled):
        d = bt.make_inputs("nvfp4", M, N, K, seed=1)
        c = torch.zeros(M, N)
        sa, sb = d["sa"].view(torch.float8_e4m3fn), d["sb"].view(torch.float8_e4m3fn)

        def go() -> bool:
            emu.run(compiled, (1,), TensorDescriptor.from_tensor(d["a"], [128, 128]),
                    TensorDescriptor.from_tensor(sa, [1, 1, 4, 2, 256]),
                    TensorDescriptor.from_tensor(d["b"], [256, 128]),
                    TensorDescriptor.from_tensor(sb, [1, 2, 4, 2, 256]), TensorDescriptor.from_tensor(c, [128, 256]))
            return bool(((c.double() - d["ref"]).abs() <= K * 2.0 ** -24 * d["ref_abs"] + 1e-6).all())
        return go
    return Case("t10_nvfp4", k, launch)


def _gluon_ws() -> Case:
    from bwtriton.emu.driver import emulated_gpu  # noqa: PLC0415 - warmup needs the emulated B200 as target
    from fixtures import gluon_ws  # noqa: PLC0415 - the test fixtures are on PYTHONPATH only here
    args, _ = gluon_ws.host_args()
    with emulated_gpu("sm_100a"):
        k = gluon_ws.gluon_ws_matmul.warmup(*args, STAGES=3, num_warps=4, grid=(1, 1))

    def launch(compiled):
        args, (a, b, c) = gluon_ws.host_args(seed=2)

        def go() -> bool:
            emu.run(compiled, (1, 1), *args)
            bound = 256 * 2.0 ** -24 * (a.double().abs() @ b.double().abs().T) + 1e-6
            return bool(((c.double() - a.double() @ b.double().T).abs() <= bound).all())
        return go
    return Case("gluon_ws", k, launch)


CASES: dict[str, Callable[[], Case]] = {"t09_ws_tile": _ws_tile, "t10_nvfp4": _nvfp4, "gluon_ws": _gluon_ws}


def _with_ptx(compiled, ptx: str):
    out = copy.copy(compiled)
    out.asm = dict(compiled.asm, ptx=ptx)
    return out


def emulator_verdict(case: Case, ptx: str) -> str:
    """"ok", "wrong" (ran, wrong output) or the name of the emulation error."""
    try:
        return "ok" if case.launch(_with_ptx(case.compiled, ptx))() else "wrong"
    except emu.EmulationError as e:
        return type(e).__name__


def verifier_verdict(ptx: str) -> str:
    errors = verify_ptx(ptx).errors
    return ",".join(sorted({f.check for f in errors})) if errors else "clean"


def compare(case: Case, fault: Optional[str]) -> tuple[str, str, bool]:
    """(verifier verdict, emulator verdict, agree) for the kernel, or for `fault` planted into it."""
    from fixtures import ws_mutants as wm  # noqa: PLC0415 - the fixtures are on PYTHONPATH only here
    ptx = case.compiled.asm["ptx"] if fault is None else wm.FAULTS[fault](case.compiled.asm["ptx"])
    if ptx is None:
        return "n/a", "n/a", True
    v, e = verifier_verdict(ptx), emulator_verdict(case, ptx)
    return v, e, (v == "clean") == (e == "ok")


def main(argv: Optional[list[str]] = None) -> int:
    from fixtures import ws_mutants as wm  # noqa: PLC0415 - the fixtures are on PYTHONPATH only here
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernels", default=",".join(CASES))
    p.add_argument("--faults", default=",".join(wm.FAULTS))
    args = p.parse_args(argv)
    disagree = 0
    print("| kernel | fault | verifier | emulator | |\n|---|---|---|---|---|")
    for name in args.kernels.split(","):
        case = CASES[name]()
        for fault in [None, *args.faults.split(",")]:
            v, e, ok = compare(case, fault)
            if v == "n/a":
                continue
            disagree += not ok
            print(f"| {name} | {fault or '(none)'} | {v} | {e} | {'AGREE' if ok else 'DISAGREE'} |", flush=True)
    print(f"\n{disagree} disagreement(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
