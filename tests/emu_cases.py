"""Kernels + inputs + torch references for the emulator tests (tests/test_emu_*.py) and benchmarks.

Each `case_*` compiles once per process (functools.cache) and returns an `EmuCase`: the compiled kernel, the
grid, a function making fresh inputs, the outputs to compare and the reference. The kernels are Triton 3.6's
own sm_100a lowering of the corpus kernels in `fixtures/kernels.py` and the project's examples.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from fixtures import kernels as pc
import torch
import triton
from bwtriton.formats import e2m1_decode, e8m0_decode, to_blocked_scales, unpack_e2m1
from triton.tools.tensor_descriptor import TensorDescriptor

TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8e4nv": torch.float8_e4m3fn, "fp8e5": torch.float8_e5m2,
         "fp32": torch.float32, "i8": torch.int8, "i32": torch.int32}


@dataclass
class EmuCase:
    """`make()` -> (args tuple, output tensor, reference float64 tensor, tolerance)."""

    name: str
    kernel: object
    grid: tuple
    make: Callable


# --- tl.dot (pointer loads, cp.async) --------------------------------------------------------------------
compile_matmul = pc.compile_matmul_kernel  # one definition of the tl.dot test kernel's compile


def out_tolerance(ref: torch.Tensor, out_ty: str, k: int, in_eps: float = 0.0) -> float:
    """Max abs error allowed: half an ulp of the output format at |ref|max (rounding of the result), plus fp32
    accumulation-order error (k * 2^-24 * sum|a*b| bound, loosely k*|ref|max*2^-23)."""
    mx = float(ref.abs().max())
    ulp = {"fp16": 2.0 ** -10, "bf16": 2.0 ** -7, "fp32": 2.0 ** -23, "i32": 0.0}[out_ty]
    return mx * ulp + k * mx * 2.0 ** -22 + in_eps * mx + 1e-6


def case_matmul(in_ty="bf16", out_ty=None, M=128, N=128, K=128, bm=128, bn=128, bk=64, prec="ieee", num_warps=4,
                num_stages=3, seed=0) -> EmuCase:
    out_ty = out_ty or in_ty
    kern = compile_matmul(in_ty, out_ty, bm, bn, bk, prec, num_warps, num_stages)

    def make():
        g = torch.Generator().manual_seed(seed)
        if in_ty == "i8":
            a = torch.randint(-8, 8, (M, K), generator=g, dtype=torch.int8)
            b = torch.randint(-8, 8, (K, N), generator=g, dtype=torch.int8)
        else:
            a = torch.randn(M, K, generator=g).to(TORCH[in_ty])
            b = torch.randn(K, N, generator=g).to(TORCH[in_ty])
        c = torch.zeros(M, N, dtype=TORCH[out_ty])
        av, bv = a.double(), b.double()
        in_eps = 0.0
        if prec == "tf32":  # the tensor core reads tf32 (10-bit mantissa): relative error per product ~2^-10
            in_eps = K ** 0.5 * 2.0 ** -9
        ref = av @ bv
        return (a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0)), c, ref, out_tolerance(ref, out_ty, K, in_eps)
    return EmuCase(f"dot_{in_ty}_{out_ty}_{bm}x{bn}x{bk}", kern, (M // bm, N // bn), make)


def case_example_matmul(dtype="bf16", M=128, N=128, K=128, seed=0) -> EmuCase:
    """bwtriton.examples.matmul.matmul_kernel through bwtriton.compile (BLOCK 128x128x64, 4 warps)."""
    kern = _example_matmul(dtype)

    def make():
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(M, K, generator=g).to(TORCH[dtype])
        b = torch.randn(K, N, generator=g).to(TORCH[dtype])
        c = torch.zeros(M, N, dtype=TORCH[dtype])
        ref = a.double() @ b.double()
        return (a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0)), c, ref, out_tolerance(ref, dtype, K)
    return EmuCase(f"example_matmul_{dtype}", kern, (M // 128, N // 128), make)


@functools.cache
def _example_matmul(dtype: str):
    import bwtriton
    from bwtriton.examples.matmul import (
        matmul_constexprs,
        matmul_kernel,
        matmul_signature,
    )
    return bwtriton.compile(matmul_kernel, signature=matmul_signature(dtype), constexprs=matmul_constexprs(),
                            target="sm_100a", num_warps=4, num_stages=3)


# --- block-scaled operands ------------------------------------------------------------------------------
def fp4_values(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [R, C/2] (two e2m1 per byte, first in the low nibble) -> float64 [R, C]."""
    return e2m1_decode(unpack_e2m1(packed)).double()  # exact: every E2M1 value is a float32


def scale_values(s: torch.Tensor) -> torch.Tensor:
    """uint8 (e8m0) or float8_e4m3fn scales -> float64 values."""
    return (e8m0_decode(s) if s.dtype == torch.uint8 else s).double()


def random_scales(rows: int, cols: int, kind: str, g: torch.Generator) -> torch.Tensor:
    if kind == "u8":  # e8m0 around 2^0
        return torch.randint(124, 131, (rows, cols), generator=g, dtype=torch.uint8)
    return (torch.rand(rows, cols, generator=g) * 3 + 0.25).to(torch.float8_e4m3fn)


def scaled_ref(a_vals, sa, b_vals, sb, vec):
    """float64 (a_vals * scales) @ (b_vals * scales)^T with one scale per `vec` elements along K."""
    return (a_vals * scale_values(sa).repeat_interleave(vec, 1)) @ (b_vals * scale_values(sb).repeat_interleave(vec, 1)).T


compile_dot_scaled = pc.compile_dot_scaled_kernel  # one definition of the dot_scaled test kernel


def _operand(fmt: str, rows: int, k: int, g: torch.Generator):
    """(kernel tensor, float64 values [rows, k])."""
    if fmt == "e2m1":
        packed = torch.randint(0, 256, (rows, k // 2), generator=g, dtype=torch.uint8)
        return packed, fp4_values(packed)
    t = (torch.randn(rows, k, generator=g) * 2).to(TORCH["fp8e4nv" if fmt == "e4m3" else "fp8e5"])
    return t, t.double()


def _scaled_problem(a_fmt: str, b_fmt: str, M: int, N: int, K: int, scale_ty: str, vec: int,
                    g: torch.Generator) -> tuple:
    """(a [M, K], b [N, K] kernel operands, scales sa [M, K/vec], sb [N, K/vec], float64 reference a@b^T)."""
    a, av = _operand(a_fmt, M, K, g)
    b, bv = _operand(b_fmt, N, K, g)
    sa, sb = random_scales(M, K // vec, scale_ty, g), random_scales(N, K // vec, scale_ty, g)
    return a, b, sa, sb, scaled_ref(av, sa, bv, sb, vec)


def case_dot_scaled(a_fmt="e2m1", b_fmt="e2m1", scale_ty="u8", vec=32, bk=256, K=512, seed=0) -> EmuCase:
    kern = compile_dot_scaled(a_fmt, b_fmt, scale_ty, vec, bk)

    def make():
        a, b, sa, sb, ref = _scaled_problem(a_fmt, b_fmt, 128, 128, K, scale_ty, vec,
                                            torch.Generator().manual_seed(seed))
        c = torch.zeros(128, 128, dtype=torch.float32)
        return (a, sa, b, sb, c, K), c, ref, out_tolerance(ref, "fp32", K)
    return EmuCase(f"dot_scaled_{a_fmt}_{b_fmt}_{scale_ty}", kern, (1,), make)


def case_fp4_example(scale_ty="fp8e4nv", M=128, N=128, K=256, seed=0) -> EmuCase:
    """bwtriton.examples.scaled.fp4_scaled_matmul_kernel (NVFP4: fp8e4nv scales / 16, MXFP4: u8 / 32)."""
    vec = 16 if scale_ty == "fp8e4nv" else 32
    kern = _fp4_example(scale_ty)

    def make():
        a, b, sa, sb, ref = _scaled_problem("e2m1", "e2m1", M, N, K, scale_ty, vec,
                                            torch.Generator().manual_seed(seed))
        c = torch.zeros(M, N, dtype=torch.float32)
        args = (a, b, sa, sb, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), sa.stride(0), sb.stride(0))
        return args, c, ref, out_tolerance(ref, "fp32", K)
    return EmuCase(f"fp4_example_{scale_ty}", kern, (M // 128, N // 128), make)


@functools.cache
def _fp4_example(scale_ty: str):
    import bwtriton
    from bwtriton.examples.scaled import (
        fp4_scaled_constexprs,
        fp4_scaled_matmul_kernel,
        fp4_scaled_signature,
    )
    vec = 16 if scale_ty == "fp8e4nv" else 32
    return bwtriton.compile(fp4_scaled_matmul_kernel, signature=fp4_scaled_signature(scale_ty),
                            constexprs=fp4_scaled_constexprs(vec=vec), target="sm_100a", num_warps=4)


# --- TMA + 5-D scales (tcgen05.cp) ------------------------------------------------------------------------
def to_blocked(s: torch.Tensor) -> torch.Tensor:
    """[rows, kb] scales -> cuBLAS 128x4 blocked layout (flat), rows padded to 128 and kb to 4."""
    return to_blocked_scales(s).reshape(-1)


compile_block_scaled_tma = pc.compile_block_scaled_tma_kernel  # one definition of the TMA test kernel


def case_block_scaled_tma(vec=16, M=128, N=256, K=512, seed=0) -> EmuCase:
    bm, bn, bk = 128, 256, 256
    kern = compile_block_scaled_tma(vec, M, N, K, bm, bn, bk)
    scale_ty = "fp8e4nv" if vec == 16 else "u8"

    def make():
        a, b, sa, sb, ref = _scaled_problem("e2m1", "e2m1", M, N, K, scale_ty, vec,
                                            torch.Generator().manual_seed(seed))
        sa5 = to_blocked(sa).reshape(1, M // 128, K // vec // 4, 2, 256)
        sb5 = to_blocked(sb).reshape(1, N // 128, K // vec // 4, 2, 256)
        c = torch.zeros(M, N, dtype=torch.float16)
        rep_k = bk // vec // 4
        args = (TensorDescriptor.from_tensor(a, [bm, bk // 2]),
                TensorDescriptor.from_tensor(sa5, [1, bm // 128, rep_k, 2, 256]),
                TensorDescriptor.from_tensor(b, [bn, bk // 2]),
                TensorDescriptor.from_tensor(sb5, [1, bn // 128, rep_k, 2, 256]),
                TensorDescriptor.from_tensor(c, [bm, bn]))
        return args, c, ref, out_tolerance(ref, "fp16", K)
    return EmuCase(f"tma_scaled_vec{vec}", kern, ((M // bm) * (N // bn),), make)


# --- warp-specialized TMA matmul -----------------------------------------------------------------------------
@functools.cache
def compile_ws_matmul():
    bm, bn, bk = 128, 128, 64
    sig = {"a_desc": f"tensordesc<fp16[{bm}, {bk}]>", "b_desc": f"tensordesc<fp16[{bn}, {bk}]>",
           "c_desc": f"tensordesc<fp16[{bm}, {bn}]>", "K": "i32", "BM": "constexpr", "BN": "constexpr",
           "BK": "constexpr"}
    src = triton.compiler.ASTSource(fn=pc._ws_matmul_kernel, signature=sig, constexprs={"BM": bm, "BN": bn, "BK": bk})
    return triton.compile(src, target=pc.SM100, options={"num_warps": 4})


def case_ws_matmul(M=128, N=128, K=256, seed=0) -> EmuCase:
    kern = compile_ws_matmul()

    def make():
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(M, K, generator=g).half()
        b = torch.randn(N, K, generator=g).half()
        c = torch.zeros(M, N, dtype=torch.float16)
        args = (TensorDescriptor.from_tensor(a, [128, 64]), TensorDescriptor.from_tensor(b, [128, 64]),
                TensorDescriptor.from_tensor(c, [128, 128]), K)
        ref = a.double() @ b.double().T
        return args, c, ref, out_tolerance(ref, "fp16", K)
    return EmuCase("ws_tma_matmul", kern, (M // 128, N // 128), make)


# --- Gluon ---------------------------------------------------------------------------------------------------
@functools.cache
def compile_gluon(which: str):
    from triton.experimental.gluon._runtime import GluonASTSource
    gl, one_mma, mma_scaled, mma_two_ctas = pc._gluon_kernels()
    if which == "one_mma":
        sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "constexpr", "N": "constexpr",
               "K": "constexpr", "num_warps": "constexpr"}
        src = GluonASTSource(fn=one_mma, signature=sig, constexprs={"M": 128, "N": 128, "K": 64, "num_warps": 4})
        return triton.compile(src, target=pc.SM100, options={"num_warps": 4})
    if which.startswith("scaled_"):
        scale_ty, vec = ("fp8e4nv", 16) if which.endswith("nvfp4") else ("u8", 32)
        sig = {"a_ptr": "*u8", "b_ptr": "*u8", "as_ptr": f"*{scale_ty}", "bs_ptr": f"*{scale_ty}", "c_ptr": "*fp32",
               "M": "constexpr", "N": "constexpr", "K": "constexpr", "VEC": "constexpr", "num_warps": "constexpr"}
        src = GluonASTSource(fn=mma_scaled, signature=sig,
                             constexprs={"M": 128, "N": 128, "K": 128, "VEC": vec, "num_warps": 4})
        return triton.compile(src, target=pc.SM100, options={"num_warps": 4})
    m = n = 256 if which == "two_ctas" else 128
    from triton.experimental.gluon.language.nvidia.blackwell import (
        TensorMemoryLayout,
        mbarrier,
    )
    cga_a, cga_b, cga_c = [[1, 0]], [[0, 1]], [[1, 0]]

    def blocked(cga, order):
        return gl.BlockedLayout([1, 8], [1, 32], warps_per_cta=[4, 1], order=order, cga_layout=cga)
    ce = dict(M=m, N=n, K=64, block_layout_a=blocked(cga_a, [0, 1]), block_layout_b=blocked(cga_b, [1, 0]),
              block_layout_c=blocked(cga_c, [1, 0]),
              acc_layout=TensorMemoryLayout((m // 2, n), col_stride=1, cta_split_num=(2, 1), two_ctas=True),
              shared_layout_a=gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2,
                                                   cga_layout=cga_a),
              shared_layout_b=gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2,
                                                   cga_layout=cga_b),
              mma_barrier_layout=mbarrier.MBarrierLayout(cga_layout=[[0]]))
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32"}
    sig.update({k: "constexpr" for k in ce})
    src = GluonASTSource(fn=mma_two_ctas, signature=sig, constexprs=ce)
    return triton.compile(src, target=pc.SM100, options={"num_warps": 4, "num_ctas": 2})


def case_gluon_one_mma(seed=0) -> EmuCase:
    kern = compile_gluon("one_mma")

    def make():
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(128, 64, generator=g).half()
        b = torch.randn(128, 64, generator=g).half()  # B^T stored [N, K]
        c = torch.zeros(128, 128, dtype=torch.float32)
        ref = a.double() @ b.double().T
        return (a, b, c), c, ref, out_tolerance(ref, "fp32", 64)
    return EmuCase("gluon_one_mma", kern, (1,), make)


def case_gluon_scaled(fmt="nvfp4", seed=0) -> EmuCase:
    kern = compile_gluon(f"scaled_{fmt}")
    scale_ty, vec = ("fp8e4nv", 16) if fmt == "nvfp4" else ("u8", 32)

    def make():
        a, b, sa, sb, ref = _scaled_problem("e2m1", "e2m1", 128, 128, 128, scale_ty, vec,
                                            torch.Generator().manual_seed(seed))
        c = torch.zeros(128, 128, dtype=torch.float32)
        return (a, b, sa, sb, c), c, ref, out_tolerance(ref, "fp32", 128)
    return EmuCase(f"gluon_scaled_{fmt}", kern, (1,), make)


def case_gluon_two_ctas(m=256, seed=0) -> EmuCase:
    kern = compile_gluon("two_ctas" if m == 256 else "two_ctas_m128")

    def make():
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(m, 64, generator=g).half()
        b = torch.randn(64, m, generator=g).half()
        c = torch.zeros(m, m, dtype=torch.float32)
        ref = a.double() @ b.double()
        return (a, b, c), c, ref, out_tolerance(ref, "fp32", 64)
    return EmuCase(f"gluon_two_ctas_m{m}", kern, (1,), make)
