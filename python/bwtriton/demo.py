"""`bwtriton demo`: compile the tutorial kernels for sm_100a, show what the Blackwell path emitted, and (when a
CUDA GPU is present) launch the same kernels on it through bwtriton's pipeline and check them against torch."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from .driver import compile as bw_compile
from .pipeline import disable, enable
from .report import ptx_census, sass_mma_opcodes, wrap
from .targets import get_target


@dataclass
class DemoCase:
    name: str
    compile: Callable[[str], Any]       # target -> CompileResult
    run_on_gpu: Callable[[], str] | None  # -> "ok (max err ...)" ; raises on mismatch


def _matmul_case(dtype: str) -> DemoCase:
    from .examples.matmul import matmul_constexprs, matmul_kernel, matmul_signature  # heavy: imports Triton
    block_k = 128 if dtype.startswith("fp8") else 64

    def build(target: str):
        out = "fp16" if dtype.startswith("fp8") else dtype
        return bw_compile(matmul_kernel, signature=matmul_signature(dtype, out),
                          constexprs=matmul_constexprs(block_k=block_k), target=target)

    def run() -> str:
        import torch
        from .examples.runners import run_matmul  # heavy: imports torch
        torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8e4nv": torch.float8_e4m3fn}[dtype]
        return run_matmul(torch_dtype, block_k=block_k)
    return DemoCase(f"tl.dot {dtype}", build, run)


def _scaled_case(kind: str) -> DemoCase:
    from .examples.scaled import fp4_scaled_constexprs, fp4_scaled_matmul_kernel, fp4_scaled_signature  # heavy: imports Triton
    scale, vec = ("fp8e4nv", 16) if kind == "nvfp4" else ("u8", 32)

    def build(target: str):
        return bw_compile(fp4_scaled_matmul_kernel, signature=fp4_scaled_signature(scale),
                          constexprs=fp4_scaled_constexprs(vec), target=target)

    def run() -> str:
        from .examples.runners import run_fp4_scaled  # heavy: imports torch
        return run_fp4_scaled(kind)
    return DemoCase(f"tl.dot_scaled {kind}", build, run)


def _two_cta_case() -> DemoCase:
    # the pointer-fed tile: it pairs on every supported Triton (3.8 itself rejects the TMA b.T form at num_ctas=2)
    from .examples.matmul import matmul_constexprs, matmul_kernel, matmul_signature  # heavy: imports Triton

    def build(target: str):
        return bw_compile(matmul_kernel, signature=matmul_signature("fp16"), constexprs=matmul_constexprs(256),
                          target=target, two_cta=True)
    # cta_group::2 needs Blackwell; on other GPUs this case is compile-only.
    return DemoCase("tl.dot fp16 two_cta", build, None)


def demo_cases() -> list[DemoCase]:
    return [_matmul_case("bf16"), _matmul_case("fp8e4nv"), _scaled_case("nvfp4"), _scaled_case("mxfp4"),
            _two_cta_case()]


#: Width the demo's output fits (a common terminal; the table once wrapped at 226 columns).
WIDTH = 100

#: One line per field of a kernel's block: what it shows and where it comes from.
LEGEND = (
    ("tcgen05", "tcgen05.* instructions in the final PTX with counts (mma 8 = eight tcgen05.mma)"),
    ("mma", "the MMAs' kind::, M x N x K from the instruction descriptor, cta_group::, scale_vec::"),
    ("tmem", "Tensor Memory columns allocated per CTA (of 512)"),
    ("sass", "tensor-core and TMEM opcodes in the cubin's SASS, with counts"),
    ("verifier", "what verify-tcgen05 found in the final PTX"),
)


def format_counts(counts: "dict[str, int]", strip_prefix: bool = True) -> str:
    """{'tcgen05.mma': 8, 'tcgen05.ld': 1} -> 'ld 1, mma 8': a space before the count, so it cannot be read as
    an opcode suffix (the old 'mmax8', 'LDTM.x128x1')."""
    items = sorted((k.split(".", 1)[-1] if strip_prefix else k, v) for k, v in counts.items())
    return ", ".join(f"{k} {v}" for k, v in items) or "-"


def census_fields(result) -> list[tuple[str, str]]:
    """(field, text) of one demo block: what the compile emitted, from the final PTX and the cubin's SASS."""
    c = ptx_census(result.asm["ptx"])
    sass = sass_mma_opcodes(result.asm["sass"])
    verify = result.reports.get("verify-tcgen05", {})
    findings = verify.get("findings", verify.get("errors", []))
    vtext = "not run" if not verify else (f"{len(findings)} finding(s)" if findings else "clean")
    mma = (f"kind {','.join(c['mma_kinds']) or '-'}, MxNxK {','.join(c['mma_shapes']) or '-'}, "
           f"cta_group {','.join(map(str, c['cta_groups'])) or '-'}, scale_vec {','.join(c['scale_vec']) or '-'}")
    return [("tcgen05", format_counts(c["tcgen05"] or c["other_mma"])), ("mma", mma),
            ("tmem", f"{result.summary()['tmem_columns']} columns"),
            ("sass", format_counts(dict(sass), strip_prefix=False)), ("verifier", vtext)]


def format_block(name: str, fields: list[tuple[str, str]], width: int = WIDTH) -> str:
    """A kernel's name, then one indented line per field, wrapped to `width` columns."""
    import textwrap
    label = max(len(k) for k, _ in LEGEND) + 2
    lines = [name]
    for key, text in fields:
        lines += textwrap.wrap(text, width, initial_indent=f"  {key:<{label}}", subsequent_indent=" " * (label + 2),
                               break_on_hyphens=False)
    return "\n".join(lines)


def format_legend(width: int = WIDTH) -> str:
    """The legend lines: each field of a block and what it means."""
    return format_block("legend:", list(LEGEND), width)


def run_demo(target: str = "sm_100a", run_on_gpu: bool = True) -> int:
    """Print what the Blackwell path emitted for every demo kernel; on a GPU also run and check them.
    Returns an exit code."""
    tgt = get_target(target)
    print(f"bwtriton demo: compiling the tutorial kernels for {tgt.name} (no GPU needed)\n")
    print(format_legend() + "\n")
    failures, cases = 0, demo_cases()
    t0 = time.perf_counter()
    for case in cases:
        print(format_block(case.name, census_fields(case.compile(tgt.name))) + "\n")
    print(f"compiled {len(cases)} kernels in {time.perf_counter() - t0:.1f} s;\n"
          f"`bwtriton compile --help` writes any stage (ttgir, ptx, sass, ...) to disk.")

    if not run_on_gpu:
        return 0
    try:
        import torch
        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if not has_gpu:
        print(wrap("\nno CUDA GPU here: skipped launching (on a GPU the same kernels run through bwtriton's "
                   "pipeline and are checked against torch)."))
        return 0
    name = torch.cuda.get_device_name()
    print(f"\nrunning on {name} through bwtriton's pipeline (bwtriton.enable()):")
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
                print(wrap(f"  {case.name:24s} FAILED: {type(exc).__name__}: {exc}", indent=" " * 27))
    finally:
        disable()
    return 1 if failures else 0
