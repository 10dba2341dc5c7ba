"""`bwtriton emulate`: run a kernel's sm_100a PTX on the CPU emulator with generated or loaded inputs.

    bwtriton emulate kernel.ptx --grid 1 --arg randn:fp16:128x64 --arg randn:fp16:64x128 \\
        --arg zeros:fp32:128x128 --check 2=0@1
    bwtriton emulate python/bwtriton/examples/matmul.py:matmul_kernel --grid 2,2 \\
        --arg randn:fp16:256x128 --arg randn:fp16:128x256 --arg zeros:fp16:256x256 \\
        --arg 256 --arg 256 --arg 128 --arg 128 --arg 256 --arg 256 --check 2=0@1

Argument specs, in the order of the kernel's non-constexpr arguments (Triton's 2 scratch pointers
are added):
  INT / FLOAT        a scalar
  null               a null pointer
  KIND:DTYPE:SHAPE   a generated tensor: KIND in randn, rand, zeros, ones, arange, randint
                     (small ints), DTYPE a torch dtype name or a Triton type (fp16, bf16, fp32,
                     fp8e4nv, u8, i8, i32, ...), SHAPE like 128x64
  FILE.npy / FILE.pt a tensor loaded from disk
  desc:I:B0xB1       a TMA TensorDescriptor over argument #I with block shape B0xB1
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..errors import InputError
from ..targets import MAX_SHARED_BYTES
from ..userfiles import check_output_file, read_text

_DTYPES = {"fp16": "float16", "f16": "float16", "bf16": "bfloat16", "fp32": "float32", "f32": "float32",
           "fp64": "float64", "fp8e4nv": "float8_e4m3fn", "e4m3": "float8_e4m3fn", "fp8e5": "float8_e5m2",
           "e5m2": "float8_e5m2", "u8": "uint8", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64"}


def _dtype(name: str):
    import torch  # heavy: torch, loaded only when a command makes tensors
    dt = getattr(torch, _DTYPES.get(name, name), None)
    if not isinstance(dt, torch.dtype):
        raise InputError(f"unknown dtype {name!r}; use e.g. fp16, bf16, fp32, fp8e4nv, u8, i8, i32")
    return dt


def _shape(text: str, where: str) -> list[int]:
    """'128x64' -> [128, 64]; anything else names the expected form."""
    try:
        dims = [int(x) for x in text.lower().split("x")]
    except ValueError:
        dims = []
    if not dims or any(d < 0 for d in dims):
        raise InputError(f"{where}: shape {text!r} should be sizes joined by 'x', e.g. 128x64")
    return dims


def _load_tensor(path: str):
    """A tensor from a .npy or .pt file, with a clear error when it is missing or unreadable."""
    import torch  # heavy: torch, loaded only when a command makes tensors
    if not os.path.isfile(path):
        raise InputError(f"--arg {path}: no such file (pass an existing .npy/.pt file, or a KIND:DTYPE:SHAPE spec "
                         f"such as randn:fp16:128x64)")
    try:
        if path.endswith(".npy"):
            import numpy as np  # heavy: numpy, loaded only when a command reads or writes arrays
            return torch.from_numpy(np.load(path))
        return torch.load(path)
    except Exception as exc:  # a corrupt or foreign file
        raise InputError(f"--arg {path}: cannot load it: {type(exc).__name__}: {exc}") from None


def _tensor_at(index: str, kernel_args: list[Any], where: str):
    """Kernel argument #`index` (an integer naming a tensor argument given so far)."""
    import torch  # heavy: torch, loaded only when a command makes tensors
    tensors = [i for i, a in enumerate(kernel_args) if isinstance(a, torch.Tensor)]
    try:
        i = int(index)
    except ValueError:
        i = None
    if i is None or not 0 <= i < len(kernel_args) or not isinstance(kernel_args[i], torch.Tensor):
        raise InputError(f"{where}: {index!r} is not the index of a tensor argument; tensor arguments are "
                         f"#{', #'.join(map(str, tensors)) or ' (none)'} (0-based, in --arg order)")
    return kernel_args[i]


def grid_arg(text: str) -> tuple[int, ...]:
    """argparse `type=` for --grid: '2,1,1' -> (2, 1, 1), 1 to 3 positive integers."""
    try:
        grid = tuple(int(g) for g in text.split(","))
    except ValueError:
        grid = ()
    if not 1 <= len(grid) <= 3 or any(g < 1 for g in grid):
        raise argparse.ArgumentTypeError(f"{text!r} is not a grid: give 1 to 3 positive integers, e.g. 2 or 2,1,1")
    return grid


def parse_arg(spec: str, previous: list[Any], seed: int) -> Any:
    """One --arg spec -> a kernel argument (see the module docstring)."""
    import torch  # heavy: torch, loaded only when a command makes tensors
    s = spec.strip()
    if s.lower() in ("null", "none"):
        return None
    for conv in (int, float):
        try:
            return conv(s)
        except ValueError:
            pass
    if s.endswith((".npy", ".pt")):
        return _load_tensor(s)
    parts = s.split(":")
    if parts[0] == "desc" and len(parts) == 3:
        from triton.tools.tensor_descriptor import TensorDescriptor  # heavy: Triton, loaded only for TensorDescriptor arguments
        base = _tensor_at(parts[1], previous, f"--arg {spec}")
        return TensorDescriptor.from_tensor(base, _shape(parts[2], f"--arg {spec}"))
    if len(parts) != 3:
        raise InputError(f"cannot parse --arg {spec!r}: expected INT, FLOAT, null, KIND:DTYPE:SHAPE, FILE.npy or "
                         "desc:I:BLOCK")
    kind, dt, shape_s = parts
    dtype = _dtype(dt)
    shape = _shape(shape_s, f"--arg {spec}")
    g = torch.Generator().manual_seed(seed)
    if kind == "randn":
        t = torch.randn(shape, generator=g)
    elif kind == "rand":
        t = torch.rand(shape, generator=g)
    elif kind == "zeros":
        t = torch.zeros(shape)
    elif kind == "ones":
        t = torch.ones(shape)
    elif kind == "arange":
        t = torch.arange(int(torch.tensor(shape).prod())).reshape(shape).double()
    elif kind == "randint":
        lo, hi = (0, 256) if dtype == torch.uint8 else (-8, 8)
        return torch.randint(lo, hi, shape, generator=g, dtype=dtype)
    else:
        raise InputError(f"unknown tensor kind {kind!r}: use randn, rand, zeros, ones, arange, randint")
    return t.to(dtype)


def _example_from_args(fn: Any, keywords: dict[str, Any], kernel_args: list[Any]) -> dict[str, int]:
    """The integer --arg values by argument name: what `@triton.jit` would specialise this launch for."""
    from ..specialize import DIVISIBLE_INT_TYPES  # heavy: pulls in Triton's frontend; only `emulate` of a Python kernel needs it
    sig, consts = keywords["signature"], keywords["constexprs"]
    runtime = [n for n in fn.arg_names if n not in consts and sig.get(n) != "constexpr"]
    return {n: v for n, v in zip(runtime, kernel_args)
            if sig.get(n) in DIVISIBLE_INT_TYPES and isinstance(v, int) and not isinstance(v, bool)}


def _compiled_from_input(args: argparse.Namespace, kernel_args: list[Any]):
    """PTX text of a .ptx file, or the compile of FILE.py:KERNEL specialised for the given arguments."""
    if args.input.endswith(".ptx"):
        return read_text(args.input, "PTX")
    if ".py:" not in args.input:
        what = "a folder" if os.path.isdir(args.input) else "no .ptx file and no :KERNEL"
        raise InputError(f"emulate takes FILE.ptx or FILE.py:KERNEL, got {args.input!r} ({what}; for a .py file "
                         f"name the kernel: FILE.py:KERNEL)")
    from ..driver import compile as bw_compile  # heavy: Triton's compiler; only `emulate` of a Python kernel compiles
    from ..loading import compile_keywords, load_kernel  # heavy: imports kernel sources; only `emulate` of a Python kernel needs it
    fn, spec = load_kernel(args.input)
    keywords = compile_keywords(fn, spec, args, args.input)
    if "example" not in keywords and "divisible_by_16" not in keywords:
        keywords["example"] = _example_from_args(fn, keywords, kernel_args)
    return bw_compile(fn, target="sm_100a", **keywords)


def _summary(t) -> dict:
    import torch  # heavy: torch, loaded only when a command makes tensors
    if not isinstance(t, torch.Tensor):
        return {"value": t if isinstance(t, (int, float)) or t is None else type(t).__name__}
    v = t.double() if t.dtype != torch.bool else t.to(torch.float64)
    return {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "sum": float(v.sum()),
            "abs_max": float(v.abs().max()) if t.numel() else 0.0,
            "head": [round(float(x), 6) for x in v.flatten()[:4]]}


def _format_summary(s: dict) -> str:
    """One argument's summary for the text output (the JSON output keeps every digit)."""
    if "value" in s:
        return str(s["value"])
    head = ", ".join(f"{v:.4g}" for v in s["head"])
    return (f"{s['dtype']} {'x'.join(map(str, s['shape'])) or 'scalar'}  sum={s['sum']:.6g}  "
            f"abs_max={s['abs_max']:.4g}  head=[{head}]")


def _check(expr: str, kernel_args: list[Any]) -> dict:
    """`C=A@B` with argument indices, e.g. '2=0@1' or '2=0@1.T' (B given as [N, K])."""
    out_s, _, rhs = expr.partition("=")
    a_s, _, b_s = rhs.partition("@")
    if not out_s or not a_s or not b_s:
        raise InputError(f"--check takes OUT=A@B with argument indices (e.g. 2=0@1 or 2=0@1.T), got {expr!r}")
    trans = b_s.endswith(".T")
    where = f"--check {expr}"
    out = _tensor_at(out_s, kernel_args, where).double()
    a = _tensor_at(a_s, kernel_args, where).double()
    b = _tensor_at(b_s[:-2] if trans else b_s, kernel_args, where).double()
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != (b.shape[1] if trans else b.shape[0]):
        raise InputError(f"{where}: A is {list(a.shape)} and B{'.T' if trans else ''} is "
                         f"{list(b.T.shape if trans else b.shape)}; A@B needs 2-D operands with matching K")
    ref = a @ (b.T if trans else b)
    if out.shape != ref.shape:
        raise InputError(f"{where}: OUT is {list(out.shape)} but A@B is {list(ref.shape)}")
    err = float((out - ref).abs().max())
    return {"check": expr, "max_abs_err": err, "ref_abs_max": float(ref.abs().max()),
            "rel_err": err / max(float(ref.abs().max()), 1e-30)}


def _save_targets(items: list[str], kernel_args: list[Any]) -> list[tuple[Any, str]]:
    """--save I=FILE.npy entries checked before the run: (tensor, path)."""
    out = []
    for item in items:
        idx, sep, path = item.partition("=")
        if not sep or not path.endswith(".npy"):
            raise InputError(f"--save takes I=FILE.npy (argument index, .npy path), got {item!r}")
        check_output_file(path, "--save")
        out.append((_tensor_at(idx, kernel_args, f"--save {item}"), path))
    return out


def cmd_emulate(args: argparse.Namespace) -> int:
    from .integration.arguments import dtype_mismatches  # heavy: the emulator (numpy), loaded when a command runs a kernel
    from .integration.run import run  # heavy: the emulator (numpy), loaded when a command runs a kernel
    if args.timing_plot and not args.timing:
        raise InputError("--timing-plot needs --timing (the plot is the timing model's per-warp timeline)")
    if args.timing_plot:
        check_output_file(args.timing_plot, "--timing-plot")  # before the emulation, not after it
    kernel_args: list[Any] = []
    for i, spec in enumerate(args.arg):
        kernel_args.append(parse_arg(spec, kernel_args, args.seed + i))
    saves = _save_targets(args.save, kernel_args)
    if args.check:
        _check(args.check, kernel_args)  # bad indices or shapes fail now, not after a long emulation
    compiled = _compiled_from_input(args, kernel_args)
    stats = run(compiled, args.grid, *kernel_args, num_warps=args.num_warps, num_ctas=args.num_ctas,
                shared=args.shared, name=args.kernel, timing=bool(args.timing))
    for mismatch in dtype_mismatches(compiled, kernel_args):  # it ran, but may have read the bytes wrongly
        print(f"bwtriton emulate: note: {mismatch}", file=sys.stderr)
    result: dict[str, Any] = {"stats": {"instructions": stats.instructions, "seconds": round(stats.seconds, 3),
                                        "instructions_per_second": round(stats.instructions_per_second),
                                        "ctas": stats.ctas},
                              "args": [_summary(a) for a in kernel_args]}
    if stats.timing is not None:
        result["timing"] = _timing_summary(stats.timing)
        if args.timing_plot:
            result["timing"]["plot"] = stats.timing.plot(args.timing_plot)
    rc = 0
    if args.check:
        result["check"] = _check(args.check, kernel_args)
        if result["check"]["rel_err"] > args.rtol:
            rc = 1
    for t, path in saves:
        import numpy as np  # heavy: numpy, loaded only when a command reads or writes arrays
        np.save(path, (t.float() if t.dtype in (_dtype("bf16"),) else t).numpy())
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"emulated: {stats}")
        for i, s in enumerate(result["args"]):
            print(f"  arg {i}: {_format_summary(s)}")
        if "check" in result:
            c = result["check"]
            print(f"check {c['check']}: max abs err {c['max_abs_err']:.4g} (rel {c['rel_err']:.3g}, "
                  f"{'OK' if rc == 0 else 'FAILED'} at rtol {args.rtol})")
        if stats.timing is not None:
            print(stats.timing.summary())
    return rc


def _timing_summary(pred) -> dict:
    """The timing model's prediction as JSON fields, labelled as a model."""
    return {"label": _model_label(), "seconds": pred.seconds, "cycles": pred.cycles, "flops_per_s": pred.flops_per_s,
            "l2_bytes_per_s": pred.bytes_per_s, "bound": pred.bound, "waves": pred.waves,
            "stalls": {name: {k: round(v) for k, v in st.items()} for name, st in pred.stall_table()}}


def _model_label() -> str:
    from .timing.model import LABEL  # the timing model is loaded only for timed runs
    return LABEL


def register(subparsers) -> None:
    """Add `bwtriton emulate` to the top CLI's subcommands."""
    from ..loading import add_kernel_arguments  # heavy: imports kernel sources; only `emulate` of a Python kernel needs it
    p = subparsers.add_parser("emulate", help="run a kernel's sm_100a PTX on the CPU emulator",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", help="FILE.ptx or FILE.py:KERNEL (compiled for sm_100a first, integer arguments "
                   "specialised for the --arg values as @triton.jit would, and the final PTX emulated)")
    p.add_argument("--grid", default=(1,), type=grid_arg, help="programs per grid dimension, e.g. 2,1,1 (clusters when num_ctas>1)")
    p.add_argument("--arg", action="append", default=[], help="kernel argument spec, in order (repeatable)")
    p.add_argument("--kernel", help="entry name when the PTX has several")
    add_kernel_arguments(p)  # --signature, --constexpr, --num-*, --example, --divisible-by-16 (FILE.py:KERNEL)
    p.add_argument("--shared", type=int, help="shared memory bytes per CTA (default: from metadata, else "
                   f"{MAX_SHARED_BYTES['sm_100'] // 1024} KiB)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check", help="compare OUT=A@B (argument indices; B may be '.T'), exit 1 beyond --rtol")
    p.add_argument("--rtol", type=float, default=1e-2, help="relative tolerance for --check (default 1e-2)")
    p.add_argument("--save", action="append", default=[], metavar="I=FILE.npy", help="save argument I after the run")
    p.add_argument("--json", action="store_true")
    p.add_argument("--timing", action="store_true", help="also print the B200 timing model's prediction (a model, "
                   "not a measurement: docs/timing_model.md)")
    p.add_argument("--timing-plot", metavar="FILE.png", help="with --timing: save the per-warp timeline plot "
                   "(needs matplotlib)")
    p.set_defaults(func=cmd_emulate)


if __name__ == "__main__":  # pragma: no cover
    from ..cli import main  # cycle: bwtriton.cli registers this module's subcommand
    sys.exit(main(["emulate", *sys.argv[1:]]))
