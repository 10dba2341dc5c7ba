"""`bwtriton demo`: compile the tutorial kernels for sm_100a, show what the Blackwell path emitted, and (when a
CUDA GPU is present) launch the same kernels on it through bwtriton's pipeline and check them against torch."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from .report import format_table, ptx_census, sass_mma_opcodes


@dataclass
class DemoCase:
    name: str
    compile: Callable[[str], Any]       # target -> CompileResult
    run_on_gpu: Callable[[], str] | None  # -> "ok (max err ...)" ; raises on mismatch


def _matmul_case(dtype: str) -> DemoCase:
    from . import compile as bw_compile
    from .examples.matmul import matmul_constexprs, matmul_kernel, matmul_signature
    block_k = 128 if dtype.startswith("fp8") else 64

    def build(target: str):
        out = "fp16" if dtype.startswith("fp8") else dtype
        return bw_compile(matmul_kernel, signature=matmul_signature(dtype, out),
                          constexprs=matmul_constexprs(block_k=block_k), target=target)

    def run() -> str:
        import torch
        from .examples.runners import run_matmul
        torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8e4nv": torch.float8_e4m3fn}[dtype]
        return run_matmul(torch_dtype, block_k=block_k)
    return DemoCase(f"tl.dot {dtype}", build, run)


def _scaled_case(kind: str) -> DemoCase:
    from . import compile as bw_compile
    from .examples.scaled import fp4_scaled_constexprs, fp4_scaled_matmul_kernel, fp4_scaled_signature
    scale, vec = ("fp8e4nv", 16) if kind == "nvfp4" else ("u8", 32)

    def build(target: str):
        return bw_compile(fp4_scaled_matmul_kernel, signature=fp4_scaled_signature(scale),
                          constexprs=fp4_scaled_constexprs(vec), target=target)

    def run() -> str:
        from .examples.runners import run_fp4_scaled
        return run_fp4_scaled(kind)
    return DemoCase(f"tl.dot_scaled {kind}", build, run)


def _two_cta_case() -> DemoCase:
    from . import compile as bw_compile
    from .examples.tma_matmul import matmul_tma_bt_kernel, tma_bt_spec

    def build(target: str):
        spec = tma_bt_spec("fp16")
        return bw_compile(matmul_tma_bt_kernel, target=target, two_cta=True, **spec)
    # cta_group::2 needs Blackwell; on other GPUs this case is compile-only.
    return DemoCase("tl.dot fp16 two_cta", build, None)


def demo_cases() -> list[DemoCase]:
    return [_matmul_case("bf16"), _matmul_case("fp8e4nv"), _scaled_case("nvfp4"), _scaled_case("mxfp4"),
            _two_cta_case()]


def _fmt_counts(counts: dict) -> str:
    return " ".join(f"{k.split('.', 1)[-1]}x{v}" for k, v in sorted(counts.items())) or "-"


def census_row(name: str, result) -> list[str]:
    """One demo table row: what the compile emitted for `name`."""
    c = ptx_census(result.asm["ptx"])
    sass = sass_mma_opcodes(result.asm["sass"])
    verify = result.reports.get("verify-tcgen05", {})
    findings = verify.get("findings", verify.get("errors", []))
    vtext = "not run" if not verify else (f"{len(findings)} finding(s)" if findings else "clean")
    return [name, _fmt_counts(c["tcgen05"]) if c["tcgen05"] else _fmt_counts(c["other_mma"]),
            ",".join(c["mma_kinds"]) or "-", ",".join(c["mma_shapes"]) or "-", ",".join(map(str, c["cta_groups"])) or "-",
            str(result.summary()["tmem_columns"]), ",".join(c["scale_vec"]) or "-",
            " ".join(f"{k}x{v}" for k, v in sorted(sass.items())) or "-", vtext]


def run_demo(target: str = "sm_100a", run_on_gpu: bool = True) -> int:
    """Print the census table for every demo kernel; on a GPU also run and check them. Returns an exit code."""
    from .targets import get_target
    tgt = get_target(target)
    print(f"bwtriton demo: compiling the tutorial kernels for {tgt.name} (no GPU needed)\n")
    rows, failures = [], 0
    t0 = time.perf_counter()
    for case in demo_cases():
        result = case.compile(tgt.name)
        rows.append(census_row(case.name, result))
    print(format_table(("kernel", "tcgen05 instructions (PTX)", "mma kind", "idesc MxNxK", "cta_group", "TMEM cols",
                        "scale_vec", "SASS MMA/TMEM opcodes", "verifier"), rows))
    print(f"\ncompiled {len(rows)} kernels in {time.perf_counter() - t0:.1f} s; "
          f"`bwtriton compile --help` writes any stage (ttgir, ptx, sass, ...) to disk.")

    if not run_on_gpu:
        return 0
    try:
        import torch
        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if not has_gpu:
        print("\nno CUDA GPU here: skipped launching (on a GPU the same kernels run through bwtriton's pipeline "
              "and are checked against torch).")
        return 0
    name = torch.cuda.get_device_name()
    print(f"\nrunning on {name} through bwtriton's pipeline (bwtriton.enable()):")
    from .pipeline import disable, enable
    enable()
    try:
        for case in demo_cases():
            if case.run_on_gpu is None:
                print(f"  {case.name:24s} compile-only on this GPU")
                continue
            try:
                print(f"  {case.name:24s} {case.run_on_gpu()}")
            except Exception as exc:  # report every case, then fail
                failures += 1
                print(f"  {case.name:24s} FAILED: {type(exc).__name__}: {exc}")
    finally:
        disable()
    return 1 if failures else 0
