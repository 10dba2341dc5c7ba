"""`python -m bwtriton.optcompat.translate [-O0..3] [FILE|-]`: MLIR's LLVM dialect -> LLVM IR text, optionally
optimized, through Triton 3.6's own bindings (`llvm.to_module`, `llvm.optimize_module`).

Upstream lit files pipe triton-opt's output through `mlir-translate -mlir-to-llvmir | opt -S -O1`; neither tool
ships with the wheel. `llvm.to_module` is the translation mlir-translate runs. `llvm.optimize_module` runs LLVM's
default pipeline at that level, but with Triton's tuning (loop/SLP vectorization on at every level, no target
library functions), so it is close to `opt -S -O<N>`, not identical: a CHECK that depends on the difference fails,
it is not hidden. `--llc -mtriple T -mcpu=C -mattr=F` stands in for `llc`: LLVM IR text -> assembly through
`llvm.translate_to_asm` (the call Triton's NVIDIA backend makes to produce PTX). Lit substitutions: see
docs/regression_testing.md.
"""
from __future__ import annotations

import os
import sys
import tempfile
from typing import Sequence

from ..compat.opt import translate_to_asm_extra_args
from ..errors import BwTritonError, InputError
from ..mlir.module import new_context


def translate(mlir_text: str, opt_level: int | None) -> str:
    """LLVM-dialect MLIR text -> LLVM IR text (optimized at `opt_level` when given)."""
    from triton._C.libtriton import ir, llvm
    ctx = new_context()
    fd, path = tempfile.mkstemp(suffix=".mlir")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(mlir_text)
        try:
            mod = ir.parse_mlir_module(path, ctx)
        except RuntimeError as exc:
            raise InputError(f"cannot parse the MLIR input: {exc}") from None
    finally:
        os.remove(path)
    try:
        llvm_mod = llvm.to_module(mod, llvm.context())
    except RuntimeError:
        llvm_mod = None  # MLIR printed the op that has no LLVM translation
    if llvm_mod is None:
        raise InputError("the module does not translate to LLVM IR (it must be in the LLVM dialect)")
    if opt_level is not None:
        level = getattr(llvm, f"OPTIMIZE_O{opt_level}")
        llvm.optimize_module(llvm_mod, level)
    return str(llvm_mod)


def llc(llvm_ir: str, triple: str, cpu: str, features: str) -> str:
    """LLVM IR text -> target assembly (PTX for nvptx64-nvidia-cuda), like `llc -mtriple -mcpu -mattr`."""
    from triton._C.libtriton import llvm

    llvm.init_targets()
    extra = translate_to_asm_extra_args()
    try:
        return llvm.translate_to_asm(llvm_ir, triple, cpu, features, [], False, False, *extra)
    except RuntimeError as exc:
        raise InputError(f"llc: {exc}") from None


def _llc_main(args: list[str]) -> int:
    opts = {"mtriple": "nvptx64-nvidia-cuda", "mcpu": "", "mattr": ""}
    src = "-"
    while args:
        arg = args.pop(0)
        name, eq, value = arg.lstrip("-").partition("=")
        if name in opts and arg.startswith("-"):
            opts[name] = value if eq else args.pop(0)
        elif arg.startswith("-") and arg != "-":
            raise InputError(f"{arg}: not supported by --llc (it takes -mtriple, -mcpu, -mattr)")
        else:
            src = arg
    text = sys.stdin.read() if src == "-" else open(src).read()
    sys.stdout.write(llc(text, opts["mtriple"], opts["mcpu"], opts["mattr"]))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: flags -mlir-to-llvmir (implied), -S (implied), -O0..-O3; input file or stdin."""
    args, level, src = list(sys.argv[1:] if argv is None else argv), None, "-"
    try:
        if args[:1] == ["--llc"]:
            return _llc_main(args[1:])
        for arg in args:
            if arg in ("-mlir-to-llvmir", "--mlir-to-llvmir", "-S"):
                continue
            if arg in ("-O0", "-O1", "-O2", "-O3"):
                level = int(arg[2])
            elif arg.startswith("-") and arg != "-":
                raise InputError(f"{arg}: not supported (this reads LLVM-dialect MLIR, prints LLVM IR, -O0..-O3)")
            else:
                src = arg
        text = sys.stdin.read() if src == "-" else open(src).read()
        sys.stdout.write(translate(text, level))
        return 0
    except BwTritonError as exc:
        print(f"bwtriton.optcompat.translate: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
