"""Kernels + inputs + torch references for the emulator tests (tests/emu/) and benchmarks.

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
import triton.language as tl
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
                num_stages=3, seed=0, target=pc.SM100) -> EmuCase:
    out_ty = out_ty or in_ty
    kern = compile_matmul(in_ty, out_ty, bm, bn, bk, prec, num_warps, num_stages, target)

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


def _fp16_descriptor_problem(M: int, N: int, K: int, seed: int):
    """fp16 A [M, K], B [N, K] and a zero C behind host TensorDescriptors (128x64 operand boxes, 128x128 output
    box), with the float64 reference of C = A @ B.T and its fp16 tolerance."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g).half()
    b = torch.randn(N, K, generator=g).half()
    c = torch.zeros(M, N, dtype=torch.float16)
    args = (TensorDescriptor.from_tensor(a, [128, 64]), TensorDescriptor.from_tensor(b, [128, 64]),
            TensorDescriptor.from_tensor(c, [128, 128]), K)
    ref = a.double() @ b.double().T
    return args, c, ref, out_tolerance(ref, "fp16", K)


def case_ws_matmul(M=128, N=128, K=256, seed=0) -> EmuCase:
    kern = compile_ws_matmul()

    make = functools.partial(_fp16_descriptor_problem, M, N, K, seed)
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
    from triton.experimental.gluon.language.nvidia.blackwell import mbarrier

    from bwtriton.compat.gluon import tensor_memory_layout
    cga_a, cga_b, cga_c = [[1, 0]], [[0, 1]], [[1, 0]]

    def blocked(cga, order):
        return gl.BlockedLayout([1, 8], [1, 32], warps_per_cta=[4, 1], order=order, cga_layout=cga)
    ce = dict(M=m, N=n, K=64, block_layout_a=blocked(cga_a, [0, 1]), block_layout_b=blocked(cga_b, [1, 0]),
              block_layout_c=blocked(cga_c, [1, 0]),
              acc_layout=tensor_memory_layout((m // 2, n), col_stride=1, cta_split=(2, 1), two_ctas=True),
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


# --- pipelined TMA matmul (software-pipelined K loop, TMA loads and a TMA store epilogue) ----------------------
@triton.jit
def _tma_matmul_kernel(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                       STAGES: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK), num_stages=STAGES):
        a = a_desc.load([pid_m * BM, k * BK])
        b = b_desc.load([pid_n * BN, k * BK])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.float16))


@functools.cache
def compile_tma_matmul(bm=128, bn=128, bk=64, stages=3):
    sig = {"a_desc": f"tensordesc<fp16[{bm}, {bk}]>", "b_desc": f"tensordesc<fp16[{bn}, {bk}]>",
           "c_desc": f"tensordesc<fp16[{bm}, {bn}]>", "K": "i32", "BM": "constexpr", "BN": "constexpr",
           "BK": "constexpr", "STAGES": "constexpr"}
    src = triton.compiler.ASTSource(fn=_tma_matmul_kernel, signature=sig,
                                    constexprs={"BM": bm, "BN": bn, "BK": bk, "STAGES": stages})
    return triton.compile(src, target=pc.SM100, options={"num_warps": 4})


def case_tma_matmul(M=128, N=128, K=512, seed=0) -> EmuCase:
    """fp16 C = A @ B.T through host TensorDescriptors; K=512 gives 8 iterations over the 3 smem stages, so each
    stage is refilled while other stages' MMAs are in flight."""
    kern = compile_tma_matmul()

    make = functools.partial(_fp16_descriptor_problem, M, N, K, seed)
    return EmuCase("tma_matmul", kern, (M // 128, N // 128), make)


# --- tutorial-style kernels for the opcode census (our own code, written after Triton 3.6's tutorials) ---------
@triton.jit
def _bias_matmul_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, LEAKY: tl.constexpr):
    """Tutorial 03 shape: masked pointer loads, fp32 bias-add epilogue (add.f32x2 on sm_100a), leaky ReLU."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc = tl.dot(a, b, acc)
    acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0)[None, :]
    if LEAKY:
        acc = tl.where(acc >= 0, acc, 0.01 * acc)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(tl.float16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@functools.cache
def compile_bias_matmul(leaky: bool = True):
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "bias_ptr": "*fp32", "c_ptr": "*fp16", "M": "i32", "N": "i32",
           "K": "i32", "stride_am": "i32", "stride_bk": "i32", "stride_cm": "i32", "BM": "constexpr",
           "BN": "constexpr", "BK": "constexpr", "LEAKY": "constexpr"}
    names = _bias_matmul_kernel.arg_names
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ("a_ptr", "b_ptr", "bias_ptr", "c_ptr",
                                                                    "stride_am", "stride_bk", "stride_cm")}
    src = triton.compiler.ASTSource(fn=_bias_matmul_kernel, signature=sig, attrs=attrs,
                                    constexprs={"BM": 128, "BN": 128, "BK": 64, "LEAKY": leaky})
    return triton.compile(src, target=pc.SM100, options={"num_warps": 4, "num_stages": 3})


def case_bias_matmul(M=200, N=136, K=100, seed=0) -> EmuCase:
    """Unaligned M/N/K (masks everywhere) with a bias row and leaky ReLU."""
    kern = compile_bias_matmul()

    def make():
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(M, K, generator=g).half()
        b = torch.randn(K, N, generator=g).half()
        bias = torch.randn(N, generator=g)
        c = torch.zeros(M, N, dtype=torch.float16)
        ref = a.double() @ b.double() + bias.double()[None, :]
        ref = torch.where(ref >= 0, ref, 0.01 * ref)
        return (a, b, bias, c, M, N, K, a.stride(0), b.stride(0), c.stride(0)), c, ref, out_tolerance(ref, "fp16", K)
    return EmuCase("bias_matmul", kern, (triton.cdiv(M, 128), triton.cdiv(N, 128)), make)


@triton.jit
def _attn_fwd_kernel(q_desc, k_desc, v_desc, o_desc, N_CTX, qk_scale, HEAD: tl.constexpr, BM: tl.constexpr,
                     BN: tl.constexpr):
    """Tutorial 06 shape (one head, no causal mask): S = QK^T in TMEM, online softmax with exp2, O += P V."""
    start_m = tl.program_id(0) * BM
    q = q_desc.load([start_m, 0])
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, HEAD], tl.float32)
    for start_n in tl.range(0, N_CTX, BN):
        k = k_desc.load([start_n, 0])
        s = tl.dot(q, k.T) * qk_scale
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = v_desc.load([start_n, 0])
        acc = tl.dot(p.to(tl.float16), v, acc * alpha[:, None])
        m_i = m_new
    o_desc.store([start_m, 0], (acc / l_i[:, None]).to(tl.float16))


@functools.cache
def compile_attn_fwd(head=64, bm=128, bn=64):
    sig = {"q_desc": f"tensordesc<fp16[{bm}, {head}]>", "k_desc": f"tensordesc<fp16[{bn}, {head}]>",
           "v_desc": f"tensordesc<fp16[{bn}, {head}]>", "o_desc": f"tensordesc<fp16[{bm}, {head}]>",
           "N_CTX": "i32", "qk_scale": "fp32", "HEAD": "constexpr", "BM": "constexpr", "BN": "constexpr"}
    src = triton.compiler.ASTSource(fn=_attn_fwd_kernel, signature=sig, constexprs={"HEAD": head, "BM": bm, "BN": bn})
    return triton.compile(src, target=pc.SM100, options={"num_warps": 4, "num_stages": 2})


def case_attn_fwd(n_ctx=256, head=64, seed=0) -> EmuCase:
    kern = compile_attn_fwd(head)

    def make():
        g = torch.Generator().manual_seed(seed)
        q, k, v = (torch.randn(n_ctx, head, generator=g).half() for _ in range(3))
        o = torch.zeros(n_ctx, head, dtype=torch.float16)
        scale = head ** -0.5
        ref = torch.softmax(q.double() @ k.double().T * scale, dim=1) @ v.double()
        args = (TensorDescriptor.from_tensor(q, [128, head]), TensorDescriptor.from_tensor(k, [64, head]),
                TensorDescriptor.from_tensor(v, [64, head]), TensorDescriptor.from_tensor(o, [128, head]), n_ctx,
                scale * 1.4426950408889634)
        # P is rounded to fp16 before P @ V: relative error ~2^-11 per term
        return args, o, ref, out_tolerance(ref, "fp16", n_ctx, in_eps=2.0 ** -9)
    return EmuCase("attn_fwd", kern, (n_ctx // 128,), make)


@triton.jit
def _persistent_tma_kernel(a_desc, b_desc, c_desc, M, N, K, NUM_SMS: tl.constexpr, BM: tl.constexpr,
                           BN: tl.constexpr, BK: tl.constexpr, WS: tl.constexpr):
    """Tutorial 09 shape: a persistent loop over output tiles (flattened with the K loop), host descriptors;
    WS: warp-specialized."""
    num_n = tl.cdiv(N, BN)
    tiles = tl.cdiv(M, BM) * num_n
    k_tiles = tl.cdiv(K, BK)
    for tile in tl.range(tl.program_id(0), tiles, NUM_SMS, flatten=True, warp_specialize=WS):
        pm, pn = tile // num_n, tile % num_n
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kk in range(k_tiles):
            acc = tl.dot(a_desc.load([pm * BM, kk * BK]), b_desc.load([pn * BN, kk * BK]).T, acc)
        c_desc.store([pm * BM, pn * BN], acc.to(tl.float16))


@triton.jit
def _descriptor_persistent_kernel(a_ptr, b_ptr, c_ptr, M, N, K, NUM_SMS: tl.constexpr, BM: tl.constexpr,
                                  BN: tl.constexpr, BK: tl.constexpr):
    """Tutorial 09 "descriptor persistent": tensor maps built in the kernel (tl.make_tensor_descriptor)."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    num_n = tl.cdiv(N, BN)
    tiles = tl.cdiv(M, BM) * num_n
    for tile in tl.range(tl.program_id(0), tiles, NUM_SMS, flatten=True):
        pm, pn = tile // num_n, tile % num_n
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kk in range(tl.cdiv(K, BK)):
            acc = tl.dot(a_desc.load([pm * BM, kk * BK]), b_desc.load([pn * BN, kk * BK]).T, acc)
        c_desc.store([pm * BM, pn * BN], acc.to(tl.float16))


@functools.cache
def compile_persistent_tma(ws: bool = False, device_desc: bool = False, num_sms: int = 2):
    bm, bn, bk = 128, 128, 64
    consts = {"NUM_SMS": num_sms, "BM": bm, "BN": bn, "BK": bk}
    if device_desc:
        fn = _descriptor_persistent_kernel
        sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16"}
    else:
        fn = _persistent_tma_kernel
        sig = {"a_desc": f"tensordesc<fp16[{bm}, {bk}]>", "b_desc": f"tensordesc<fp16[{bn}, {bk}]>",
               "c_desc": f"tensordesc<fp16[{bm}, {bn}]>"}
        consts["WS"] = ws
    sig.update({"M": "i32", "N": "i32", "K": "i32", **{k: "constexpr" for k in consts}})
    src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=consts)
    return triton.compile(src, target=pc.SM100, options={"num_warps": 4, "num_stages": 3})


def case_persistent_tma(ws=False, device_desc=False, M=256, N=256, K=256, seed=0) -> EmuCase:
    """4 output tiles over 2 persistent programs, K = 4 k-tiles."""
    kern = compile_persistent_tma(ws, device_desc)

    def make():
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(M, K, generator=g).half()
        b = torch.randn(N, K, generator=g).half()
        c = torch.zeros(M, N, dtype=torch.float16)
        ref = a.double() @ b.double().T
        if device_desc:
            args = (a, b, c, M, N, K)
        else:
            args = (TensorDescriptor.from_tensor(a, [128, 64]), TensorDescriptor.from_tensor(b, [128, 64]),
                    TensorDescriptor.from_tensor(c, [128, 128]), M, N, K)
        return args, c, ref, out_tolerance(ref, "fp16", K)
    name = "descriptor_persistent" if device_desc else ("persistent_ws" if ws else "persistent_tma")
    return EmuCase(name, kern, (2,), make)


def census_kernels() -> dict:
    """name -> compile function of every kernel whose opcodes the emulator must cover."""
    out = {
        "tl.dot bf16 (cp.async)": lambda: compile_matmul("bf16", "bf16"),
        "tl.dot fp8": lambda: compile_matmul("fp8e4nv", "fp16"),
        "tl.dot tf32": lambda: compile_matmul("fp32", "fp32", prec="tf32"),
        "tl.dot i8 (mma.sync)": lambda: compile_matmul("i8", "i32"),
        "03 bias matmul": compile_bias_matmul,
        "06 attention fwd": compile_attn_fwd,
        "09 persistent": lambda: compile_persistent_tma(False),
        "09 persistent warp-specialized": lambda: compile_persistent_tma(True),
        "09 descriptor persistent": lambda: compile_persistent_tma(device_desc=True),
        "TMA pipelined matmul": compile_tma_matmul,
        "warp-specialized matmul": compile_ws_matmul,
        "10 block-scaled nvfp4 (TMA, tcgen05.cp)": lambda: pc.compile_block_scaled_tma_kernel(16),
        "10 block-scaled mxfp4": lambda: pc.compile_block_scaled_tma_kernel(32),
        "10 block-scaled mixed mxfp8 x mxfp4 (fp4-padded TMA)": compile_mixed_scaled_tma,
        "gluon one MMA": lambda: compile_gluon("one_mma"),
        "gluon tcgen05_mma_scaled nvfp4": lambda: compile_gluon("scaled_nvfp4"),
        "gluon two-CTA MMA": lambda: compile_gluon("two_ctas"),
    }
    for a_fmt, b_fmt, sty, vec in (("e2m1", "e2m1", "u8", 32), ("e4m3", "e4m3", "u8", 32),
                                   ("e4m3", "e2m1", "u8", 32)):
        out[f"dot_scaled {a_fmt} x {b_fmt}"] = (lambda a=a_fmt, b=b_fmt, t=sty, v=vec:
                                                pc.compile_dot_scaled_kernel(a, b, t, v))
    return out


@triton.jit
def _mixed_scaled_tma_kernel(a_desc, a_scale_desc, b_desc, b_scale_desc, c_desc, K, BM: tl.constexpr,
                             BN: tl.constexpr, BK: tl.constexpr, REP_K: tl.constexpr):
    """Tutorial 10 "mixed": mxfp8 A (e4m3) x mxfp4 B (packed e2m1) through TMA; the fp4 operand of the
    kind::mxf8f6f4 MMA needs the fp4-padded shared layout (16U4_ALIGN16B tensor map)."""
    pm, pn = tl.program_id(0), tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK), num_stages=2):
        a = a_desc.load([pm * BM, k * BK])
        b = b_desc.load([pn * BN, k * BK // 2])
        sa = a_scale_desc.load([0, pm, k * REP_K, 0, 0]).reshape(1, REP_K, 32, 4, 4).trans(0, 3, 2, 1, 4)
        sb = b_scale_desc.load([0, pn, k * REP_K, 0, 0]).reshape(1, REP_K, 32, 4, 4).trans(0, 3, 2, 1, 4)
        acc = tl.dot_scaled(a, sa.reshape(BM, BK // 32), "e4m3", b.T, sb.reshape(BN, BK // 32), "e2m1", acc)
    c_desc.store([pm * BM, pn * BN], acc.to(tl.float16))


@functools.cache
def compile_mixed_scaled_tma(bm=128, bn=128, bk=128):
    rep_k = bk // 32 // 4
    sig = {"a_desc": f"tensordesc<fp8e4nv[{bm}, {bk}]>", "a_scale_desc": f"tensordesc<u8[1, 1, {rep_k}, 2, 256]>",
           "b_desc": f"tensordesc<u8[{bn}, {bk // 2}]>", "b_scale_desc": f"tensordesc<u8[1, 1, {rep_k}, 2, 256]>",
           "c_desc": f"tensordesc<fp16[{bm}, {bn}]>", "K": "i32", "BM": "constexpr", "BN": "constexpr",
           "BK": "constexpr", "REP_K": "constexpr"}
    src = triton.compiler.ASTSource(fn=_mixed_scaled_tma_kernel, signature=sig,
                                    constexprs={"BM": bm, "BN": bn, "BK": bk, "REP_K": rep_k})
    return triton.compile(src, target=pc.SM100, options={"num_warps": 4})


def case_mixed_scaled_tma(M=128, N=128, K=256, seed=0) -> EmuCase:
    bm, bn, bk = 128, 128, 128
    kern = compile_mixed_scaled_tma(bm, bn, bk)

    def make():
        a, b, sa, sb, ref = _scaled_problem("e4m3", "e2m1", M, N, K, "u8", 32, torch.Generator().manual_seed(seed))
        sa5 = to_blocked(sa).reshape(1, M // 128, K // 32 // 4, 2, 256)
        sb5 = to_blocked(sb).reshape(1, N // 128, K // 32 // 4, 2, 256)
        c = torch.zeros(M, N, dtype=torch.float16)
        rep_k = bk // 32 // 4
        args = (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(sa5, [1, 1, rep_k, 2, 256]),
                TensorDescriptor.from_tensor(b, [bn, bk // 2]),
                TensorDescriptor.from_tensor(sb5, [1, 1, rep_k, 2, 256]), TensorDescriptor.from_tensor(c, [bm, bn]), K)
        return args, c, ref, out_tolerance(ref, "fp16", K)
    return EmuCase("mixed_scaled_tma", kern, (M // bm, N // bn), make)


@triton.jit
def _dot_scaled_mn_packed_kernel(a_ptr, as_ptr, b_ptr, bs_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr,
                                 BK: tl.constexpr):
    """mxfp8 A x mxfp4 B with B's fp4 pairs packed along N (rhs_k_pack=False): the MMA reads B MN-major from the
    fp4-padded shared layout (upstream test_matmul's pack_along_k=False cases)."""
    rm, rn, rn2 = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BN // 2)
    rk, rs = tl.arange(0, BK), tl.arange(0, BK // 32)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * (BN // 2) + rn2[None, :])
        sa = tl.load(as_ptr + rm[:, None] * (K // 32) + (k // 32 + rs)[None, :])
        sb = tl.load(bs_ptr + rn[:, None] * (K // 32) + (k // 32 + rs)[None, :])
        acc = tl.dot_scaled(a, sa, "e4m3", b, sb, "e2m1", acc, rhs_k_pack=False)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


@functools.cache
def compile_dot_scaled_mn_packed(bk: int = 128):
    sig = {"a_ptr": "*fp8e4nv", "as_ptr": "*u8", "b_ptr": "*u8", "bs_ptr": "*u8", "c_ptr": "*fp32", "K": "i32",
           "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}
    names = _dot_scaled_mn_packed_kernel.arg_names
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ("a_ptr", "as_ptr", "b_ptr", "bs_ptr", "c_ptr", "K")}
    src = triton.compiler.ASTSource(fn=_dot_scaled_mn_packed_kernel, signature=sig, attrs=attrs,
                                    constexprs={"BM": 128, "BN": 128, "BK": bk})
    return triton.compile(src, target=pc.SM100, options={"num_warps": 4, "num_stages": 2})


def case_dot_scaled_mn_packed(K=256, seed=0) -> EmuCase:
    kern = compile_dot_scaled_mn_packed()

    def make():
        g = torch.Generator().manual_seed(seed)
        a, av = _operand("e4m3", 128, K, g)
        bt, btv = _operand("e2m1", K, 128, g)           # [K, N/2] packed along N; values [K, N]
        sa, sb = random_scales(128, K // 32, "u8", g), random_scales(128, K // 32, "u8", g)
        ref = scaled_ref(av, sa, btv.T.contiguous(), sb, 32)
        c = torch.zeros(128, 128, dtype=torch.float32)
        return (a, sa, bt, sb, c, K), c, ref, out_tolerance(ref, "fp32", K)
    return EmuCase("dot_scaled_mn_packed_fp4", kern, (1,), make)


@functools.cache
def _compile_lhs_in_tmem(in_ty: str, bm: int):
    """The tl.dot kernel with Triton's LHS-to-TMEM promotion (ALLOW_LHS_TMEM_LAYOUT_CONVERSION=1, as upstream's
    test_lhs_in_tmem sets): A goes registers -> tcgen05.st -> TMEM and the MMA reads it from there."""
    import os
    old = os.environ.get("ALLOW_LHS_TMEM_LAYOUT_CONVERSION")
    os.environ["ALLOW_LHS_TMEM_LAYOUT_CONVERSION"] = "1"
    try:
        return pc.compile_matmul_kernel.__wrapped__(in_ty, "fp32", bm, 128, 32, "tf32" if in_ty == "fp32" else "ieee",
                                                    4, 3)
    finally:
        if old is None:
            del os.environ["ALLOW_LHS_TMEM_LAYOUT_CONVERSION"]
        else:
            os.environ["ALLOW_LHS_TMEM_LAYOUT_CONVERSION"] = old


def case_lhs_in_tmem(in_ty="fp16", bm=64, seed=0) -> EmuCase:
    """M = 64 puts A's rows in TMEM like D's layout F (16-row groups per 32-lane sub-partition)."""
    base = case_matmul(in_ty, "fp32", M=128, N=128, K=64, bm=bm, bn=128, bk=32,
                       prec="tf32" if in_ty == "fp32" else "ieee", seed=seed)
    return EmuCase(f"lhs_in_tmem_{in_ty}_m{bm}", _compile_lhs_in_tmem(in_ty, bm), base.grid, base.make)
