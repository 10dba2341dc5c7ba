"""`bwtriton emulate`: run a kernel's sm_100a PTX on the CPU emulator with generated or loaded inputs.

    bwtriton emulate kernel.ptx --grid 1 --arg randn:fp16:128x64 --arg randn:fp16:64x128 --arg zeros:fp32:128x128 \
        --check 2=0@1
    bwtriton emulate python/bwtriton/examples/matmul.py:matmul_kernel --grid 2,2 \
        --arg randn:fp16:256x128 --arg randn:fp16:128x256 --arg zeros:fp16:256x256 \
        --arg 256 --arg 256 --arg 128 --arg 128 --arg 256 --arg 256 --check 2=0@1

Argument specs (in the kernel's non-constexpr argument order; Triton's two scratch pointers are added):
  INT / FLOAT            a scalar                      null              a null pointer
  KIND:DTYPE:SHAPE       a generated tensor: KIND in randn, rand, zeros, ones, arange, randint (small ints),
                         DTYPE a torch dtype name or a Triton type (fp16, bf16, fp32, fp8e4nv, u8, i8, i32, ...),
                         SHAPE like 128x64
  FILE.npy / FILE.pt     a tensor loaded from disk
  desc:I:B0xB1           a TMA TensorDescriptor over argument #I with block shape B0xB1
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import InputError

_DTYPES = {"fp16": "float16", "f16": "float16", "bf16": "bfloat16", "fp32": "float32", "f32": "float32",
           "fp64": "float64", "fp8e4nv": "float8_e4m3fn", "e4m3": "float8_e4m3fn", "fp8e5": "float8_e5m2",
           "e5m2": "float8_e5m2", "u8": "uint8", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64"}


def _dtype(name: str):
    import torch
    dt = getattr(torch, _DTYPES.get(name, name), None)
    if not isinstance(dt, torch.dtype):
        raise InputError(f"unknown dtype {name!r}; use e.g. fp16, bf16, fp32, fp8e4nv, u8, i8, i32")
    return dt


def parse_arg(spec: str, previous: list[Any], seed: int) -> Any:
    """One --arg spec -> a kernel argument (see the module docstring)."""
    import torch
    s = spec.strip()
    if s.lower() in ("null", "none"):
        return None
    for conv in (int, float):
        try:
            return conv(s)
        except ValueError:
            pass
    if s.endswith(".npy"):
        import numpy as np
        return torch.from_numpy(np.load(s))
    if s.endswith(".pt"):
        return torch.load(s)
    parts = s.split(":")
    if parts[0] == "desc" and len(parts) == 3:
        from triton.tools.tensor_descriptor import TensorDescriptor
        base = previous[int(parts[1])]
        return TensorDescriptor.from_tensor(base, [int(x) for x in parts[2].split("x")])
    if len(parts) != 3:
        raise InputError(f"cannot parse --arg {spec!r}: expected INT, FLOAT, null, KIND:DTYPE:SHAPE, FILE.npy or "
                         "desc:I:BLOCK")
    kind, dt, shape_s = parts
    dtype = _dtype(dt)
    shape = [int(x) for x in shape_s.split("x")]
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


def _compiled_from_input(args: argparse.Namespace):
    if args.input.endswith(".ptx"):
        with open(args.input) as fh:
            return fh.read()
    from ..cli import _constexpr_value, _parse_kv, load_kernel
    from ..driver import compile as bw_compile
    fn, spec = load_kernel(args.input)
    sig = {**spec.get("signature", {}), **_parse_kv(args.signature, "--signature")}
    consts = {**spec.get("constexprs", {}),
              **{k: _constexpr_value(v) for k, v in _parse_kv(args.constexpr, "--constexpr").items()}}
    if not sig:
        raise InputError(f"no signature for {args.input}: pass --signature or declare BWTRITON_SPECS")
    return bw_compile(fn, signature=sig, constexprs=consts, target="sm_100a",
                      num_warps=args.num_warps or spec.get("num_warps", 4),
                      num_stages=spec.get("num_stages", 3), num_ctas=args.num_ctas or spec.get("num_ctas", 1))


def _summary(t) -> dict:
    import torch
    if not isinstance(t, torch.Tensor):
        return {"value": t if isinstance(t, (int, float)) or t is None else type(t).__name__}
    v = t.double() if t.dtype != torch.bool else t.to(torch.float64)
    return {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "sum": float(v.sum()),
            "abs_max": float(v.abs().max()) if t.numel() else 0.0,
            "head": [round(float(x), 6) for x in v.flatten()[:4]]}


def _check(expr: str, kernel_args: list[Any]) -> dict:
    """`C=A@B` with argument indices, e.g. '2=0@1' or '2=0@1.T' (B given as [N, K])."""
    out_s, _, rhs = expr.partition("=")
    a_s, _, b_s = rhs.partition("@")
    if not out_s or not a_s or not b_s:
        raise InputError(f"--check takes OUT=A@B with argument indices (e.g. 2=0@1 or 2=0@1.T), got {expr!r}")
    trans = b_s.endswith(".T")
    a = kernel_args[int(a_s)].double()
    b = kernel_args[int(b_s[:-2] if trans else b_s)].double()
    ref = a @ (b.T if trans else b)
    out = kernel_args[int(out_s)].double()
    err = float((out - ref).abs().max())
    return {"check": expr, "max_abs_err": err, "ref_abs_max": float(ref.abs().max()),
            "rel_err": err / max(float(ref.abs().max()), 1e-30)}


def cmd_emulate(args: argparse.Namespace) -> int:
    from .runner import run
    compiled = _compiled_from_input(args)
    kernel_args: list[Any] = []
    for i, spec in enumerate(args.arg):
        kernel_args.append(parse_arg(spec, kernel_args, args.seed + i))
    grid = tuple(int(g) for g in args.grid.split(","))
    stats = run(compiled, grid, *kernel_args, num_warps=args.num_warps, num_ctas=args.num_ctas,
                shared=args.shared, name=args.kernel)
    result: dict[str, Any] = {"stats": {"instructions": stats.instructions, "seconds": round(stats.seconds, 3),
                                        "instructions_per_second": round(stats.instructions_per_second),
                                        "ctas": stats.ctas},
                              "args": [_summary(a) for a in kernel_args]}
    rc = 0
    if args.check:
        result["check"] = _check(args.check, kernel_args)
        if result["check"]["rel_err"] > args.rtol:
            rc = 1
    for item in args.save:
        idx, _, path = item.partition("=")
        import numpy as np
        t = kernel_args[int(idx)]
        np.save(path, (t.float() if t.dtype in (_dtype("bf16"),) else t).numpy())
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"emulated: {stats}")
        for i, s in enumerate(result["args"]):
            print(f"  arg {i}: {s}")
        if "check" in result:
            c = result["check"]
            print(f"check {c['check']}: max abs err {c['max_abs_err']:.4g} (rel {c['rel_err']:.3g}, "
                  f"{'OK' if rc == 0 else 'FAILED'} at rtol {args.rtol})")
    return rc


def register(subparsers) -> None:
    p = subparsers.add_parser("emulate", help="run a kernel's sm_100a PTX on the CPU emulator",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", help="FILE.ptx or FILE.py:KERNEL (compiled for sm_100a first)")
    p.add_argument("--grid", default="1", help="programs per grid dimension, e.g. 2,1,1 (clusters when num_ctas>1)")
    p.add_argument("--arg", action="append", default=[], help="kernel argument spec, in order (repeatable)")
    p.add_argument("--kernel", help="entry name when the PTX has several")
    p.add_argument("--signature", action="append", default=[], metavar="NAME=TYPE,...")
    p.add_argument("--constexpr", action="append", default=[], metavar="NAME=VALUE,...")
    p.add_argument("--num-warps", type=int)
    p.add_argument("--num-ctas", type=int)
    p.add_argument("--shared", type=int, help="shared memory bytes per CTA (default: from metadata, else 227 KiB)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check", help="compare OUT=A@B (argument indices; B may be '.T'), exit 1 beyond --rtol")
    p.add_argument("--rtol", type=float, default=1e-2, help="relative tolerance for --check (default 1e-2)")
    p.add_argument("--save", action="append", default=[], metavar="I=FILE.npy", help="save argument I after the run")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_emulate)


if __name__ == "__main__":  # pragma: no cover
    from ..cli import main
    sys.exit(main(["emulate", *sys.argv[1:]]))
