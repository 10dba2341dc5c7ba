"""Tutorial 03: a fused NVFP4 linear layer (quantize activations in the GEMM prologue), on Blackwell and Hopper.

    python tutorials/03_fused_nvfp4_linear.py

What it shows, step by step:
1. NVFP4 in one paragraph, with `bwtriton.formats.quantize_nvfp4` on a weight.
2. The fused kernel `nvfp4_linear_fused_kernel`: each K step loads a bf16 x tile, quantizes it in registers with
   `bwtriton.language.quantize_nvfp4_tile` (per-16 UE4M3 scales, E2M1 codes) and feeds `tl.dot_scaled`.
   Global scales never enter the main loop: alpha = S_dec(x) * S_dec(w) multiplies the fp32 accumulator once.
3. Compiled for sm_100a (no GPU needed): the MMA is `tcgen05.mma ... kind::mxf4nvf4.block_scale.scale_vec::4X`.
4. Compiled for sm_90a: upstream Triton 3.6 crashes on this kernel; bwtriton's `lower-dot-scaled-portable` pass
   rewrites the NVFP4 `tt.dot_scaled` into exact dequantization + `tt.dot`, and the kernel becomes wgmma.
5. On a GPU: run `nvfp4_linear` (fused) and `nvfp4_linear_two_kernel` (quantize kernel + GEMM chained with PDL),
   check both against a float64 reference and time them.

When to fuse: the fused kernel quantizes each x tile once per column of output tiles (N / BLOCK_N times), the
two-kernel path once. For small M (decode, small batches) the weight dominates the traffic and the fused kernel
saves a launch and the x_q round trip; for large M with many N tiles the redundant quantization can make the
two-kernel path (extra traffic only 4.5/16 of x, and PDL hides the second launch) the better choice. That is
why `nvfp4_linear`'s default (form="auto") times both once per shape and keeps the faster; this tutorial pins
form="fused" to compare the two.
"""
from __future__ import annotations

import importlib
import re

import torch

import bwtriton
from bwtriton.formats import quantize_nvfp4
from bwtriton.report import wrap

linear = importlib.import_module("bwtriton.kernels.nvfp4_linear")


def step1_format() -> None:
    print("== 1. NVFP4: E2M1 elements, one UE4M3 scale per 16 along K, one fp32 global scale")
    w = torch.randn(256, 512) * 0.02
    w_q = quantize_nvfp4(w)
    print(wrap(f"weight {tuple(w.shape)} -> data {tuple(w_q.data.shape)} {w_q.data.dtype}, scales "
               f"{tuple(w_q.scales.shape)} {w_q.scales.dtype}, global decode scale {w_q.global_scale.item():.3e}"))
    bits = (w_q.data.numel() * 8 + w_q.scales.numel() * 8) / w.numel()
    err = ((w_q.dequantize() - w).norm() / w.norm()).item()
    print(f"{bits:.2f} bits per weight (vs 16 for bf16); relative error of the round trip {err:.3f}\n")


SIG = {"x_ptr": "*bf16", "x_enc_ptr": "*fp32", "w_ptr": "*u8", "ws_ptr": "*fp8e4nv", "w_dec_ptr": "*fp32",
       "bias_ptr": "*bf16", "out_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32"}
CONST = {"HAS_BIAS": True, "SCALE_BLOCKED": False, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8}


def _mma_lines(ptx: str) -> set[str]:
    return set(re.findall(r"(tcgen05\.mma\.\S+|wgmma\.mma_async\.\S+)", ptx))


def step2_3_4_compile() -> None:
    print("== 2-3. the fused kernel compiled for sm_100a (offline, no GPU)")
    r = bwtriton.compile(linear.nvfp4_linear_fused_kernel, signature=SIG, constexprs=CONST, target="sm_100a",
                         num_warps=8)
    print("MMA:", ", ".join(sorted(_mma_lines(r.asm["ptx"]))))
    print("lower-dot-scaled-portable:", r.reports["lower-dot-scaled-portable"]["ops"][0]["action"], "(native)\n")

    print("== 4. the same kernel for sm_90a (Hopper)")
    try:
        bwtriton.compile(linear.nvfp4_linear_fused_kernel, signature=SIG, constexprs=CONST, target="sm_90a",
                         num_warps=8, passes="-lower-dot-scaled-portable")
        print("upstream Triton compiled it (this Triton no longer has the bug)")
    except bwtriton.CompileError as exc:
        print(wrap(f"upstream Triton 3.6 without the pass: {str(exc).splitlines()[0]}", indent="  "))
    r = bwtriton.compile(linear.nvfp4_linear_fused_kernel, signature=SIG, constexprs=CONST, target="sm_90a",
                         num_warps=8)
    print("with lower-dot-scaled-portable:", r.reports["lower-dot-scaled-portable"]["ops"][0]["action"])
    print("MMA:", ", ".join(sorted(_mma_lines(r.asm["ptx"]))))
    dot = next(ln.strip() for ln in r.asm["ttir"].splitlines() if " tt.dot " in ln)
    print("TTIR after the pass:\n" + wrap(dot.split(" loc(")[0], indent="      ", first="  "), "\n")


def step5_run() -> None:
    if not torch.cuda.is_available():
        print("== 5. no GPU here: skipping the run (on an H200 this checks and times both variants)")
        return
    import triton.testing
    print(f"== 5. on {torch.cuda.get_device_name()}")
    torch.manual_seed(0)
    m, n, k = 64, 4096, 4096
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w_q = quantize_nvfp4(torch.randn(n, k, device="cuda") * 0.02)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    x_q = quantize_nvfp4(x.float())  # the bit-exact twin of the in-kernel quantizer
    ref = x_q.dequantize(torch.float64) @ w_q.dequantize(torch.float64).T + bias.double()
    gs = float(x_q.global_scale)
    for name, fn in (("fused", lambda: linear.nvfp4_linear(x, w_q, bias, x_global_scale=gs, form="fused")),
                     ("quantize + GEMM (PDL)", lambda: linear.nvfp4_linear_two_kernel(x, w_q, bias,
                                                                                      x_global_scale=gs))):
        out = fn()
        rel = ((out.double() - ref).norm() / ref.norm()).item()
        ms = triton.testing.do_bench(fn, warmup=10, rep=50)
        print(f"{name:24s} rel. error vs float64 {rel:.2e}   {ms * 1e3:7.1f} us")


if __name__ == "__main__":
    step1_format()
    step2_3_4_compile()
    step5_run()
