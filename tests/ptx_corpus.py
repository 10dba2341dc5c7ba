"""A corpus of real sm_100a PTX emitted by Triton 3.6, for the verifier and the emulator.

`corpus_kernels()` maps a kernel name to a zero-argument callable returning the PTX text. Each callable
compiles once per Python process (functools.cache) and Triton's on-disk cache makes later sessions fast.
Compiling needs no GPU. Importable helper, not a conftest: `from ptx_corpus import corpus_kernels`
(tests/ is on sys.path under pytest) or `importlib` by path.

Kernels cover: tl.dot in fp16/bf16/fp8 e4m3/e5m2/tf32/int8 (pointer path), tl.dot_scaled mxfp4/nvfp4/
mxf8f6f4 (pointer path) and nvfp4/mxfp4 with TMA descriptors and the 5-D cuBLAS scale layout (tcgen05.cp),
a warp-specialized TMA matmul, Gluon kernels (one tcgen05 MMA, tcgen05_mma_scaled, two_ctas), and the
output of bwtriton's plan-tmem fallback (three fissioned accumulator loops).
"""
from __future__ import annotations

import functools
from typing import Callable

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

SM100 = GPUTarget("cuda", 100, 32)


# ---------------------------------------------------------------------------------------------------------------
# tl.dot, pointer loads
@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
                   INT_ACC: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    if INT_ACC:
        acc = tl.zeros((BM, BN), dtype=tl.int32)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        if INT_ACC:
            acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc, out_dtype=tl.int32)
        else:
            acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc, input_precision=PREC)
        a_ptrs += BK * stride_ak
        b_ptrs += BK * stride_bk
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty))


@functools.cache
def compile_matmul_kernel(in_ty: str, out_ty: str, bm=128, bn=128, bk=64, prec="ieee", num_warps=4, num_stages=3):
    """The compiled `_matmul_kernel` (Triton's CompiledKernel, no bwtriton passes) for these types and tile."""
    sig = {"a_ptr": f"*{in_ty}", "b_ptr": f"*{in_ty}", "c_ptr": f"*{out_ty}", "M": "i32", "N": "i32", "K": "i32",
           "stride_am": "i32", "stride_ak": "constexpr", "stride_bk": "i32", "stride_bn": "constexpr",
           "stride_cm": "i32", "stride_cn": "constexpr", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr",
           "PREC": "constexpr", "INT_ACC": "constexpr"}
    constexprs = {"BM": bm, "BN": bn, "BK": bk, "stride_ak": 1, "stride_bn": 1, "stride_cn": 1, "PREC": prec,
                  "INT_ACC": out_ty == "i32"}
    names = _matmul_kernel.arg_names
    # Mimic @jit's 16-byte divisibility specialisation so loads vectorise and cp.async pipelining kicks in.
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in
             ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm")}
    src = triton.compiler.ASTSource(fn=_matmul_kernel, signature=sig, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=SM100, options={"num_warps": num_warps, "num_stages": num_stages})


def _compile_matmul(in_ty: str, out_ty: str, bm=128, bn=128, bk=64, prec="ieee", num_warps=4,
                    num_stages=3) -> str:
    return compile_matmul_kernel(in_ty, out_ty, bm, bn, bk, prec, num_warps, num_stages).asm["ptx"]


# ---------------------------------------------------------------------------------------------------------------
# tl.dot_scaled, pointer loads ([M, K//g] scales -> tcgen05.st into TMEM)
@triton.jit
def _dot_scaled_kernel(a_ptr, as_ptr, b_ptr, bs_ptr, c_ptr, K,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, VEC: tl.constexpr,
                       A_FMT: tl.constexpr, B_FMT: tl.constexpr, A_DIV: tl.constexpr, B_DIV: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rka = tl.arange(0, BK // A_DIV)
    rkb = tl.arange(0, BK // B_DIV)
    rs = tl.arange(0, BK // VEC)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * (K // A_DIV) + (k // A_DIV + rka)[None, :])
        b = tl.load(b_ptr + rn[:, None] * (K // B_DIV) + (k // B_DIV + rkb)[None, :])
        sa = tl.load(as_ptr + rm[:, None] * (K // VEC) + (k // VEC + rs)[None, :])
        sb = tl.load(bs_ptr + rn[:, None] * (K // VEC) + (k // VEC + rs)[None, :])
        acc = tl.dot_scaled(a, sa, A_FMT, b.T, sb, B_FMT, acc)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


@functools.cache
def compile_dot_scaled_kernel(a_fmt: str, b_fmt: str, scale_ty: str, vec: int, bk: int = 256):
    """The compiled `_dot_scaled_kernel` (Triton's CompiledKernel, no bwtriton passes) for these formats."""
    a_div = 2 if a_fmt == "e2m1" else 1
    b_div = 2 if b_fmt == "e2m1" else 1
    elem = {"e2m1": "u8", "e4m3": "fp8e4nv", "e5m2": "fp8e5"}
    sig = {"a_ptr": f"*{elem[a_fmt]}", "as_ptr": f"*{scale_ty}", "b_ptr": f"*{elem[b_fmt]}",
           "bs_ptr": f"*{scale_ty}", "c_ptr": "*fp32", "K": "i32", "BM": "constexpr", "BN": "constexpr",
           "BK": "constexpr", "VEC": "constexpr", "A_FMT": "constexpr", "B_FMT": "constexpr",
           "A_DIV": "constexpr", "B_DIV": "constexpr"}
    constexprs = {"BM": 128, "BN": 128, "BK": bk, "VEC": vec, "A_FMT": a_fmt, "B_FMT": b_fmt,
                  "A_DIV": a_div, "B_DIV": b_div}
    names = _dot_scaled_kernel.arg_names
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ("a_ptr", "as_ptr", "b_ptr", "bs_ptr", "c_ptr", "K")}
    src = triton.compiler.ASTSource(fn=_dot_scaled_kernel, signature=sig, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=SM100, options={"num_warps": 4, "num_stages": 2})


def _compile_dot_scaled(a_fmt: str, b_fmt: str, scale_ty: str, vec: int, bk: int = 256) -> str:
    return compile_dot_scaled_kernel(a_fmt, b_fmt, scale_ty, vec, bk).asm["ptx"]


# ---------------------------------------------------------------------------------------------------------------
# Tutorial-10 style: TMA descriptors and the 5-D cuBLAS scale layout (scales go smem -> TMEM by tcgen05.cp)
@triton.jit
def _block_scaled_tma_kernel(a_desc, a_scale_desc, b_desc, b_scale_desc, c_desc, M: tl.constexpr,
                             N: tl.constexpr, K: tl.constexpr, VEC_SIZE: tl.constexpr, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, rep_m: tl.constexpr,
                             rep_n: tl.constexpr, rep_k: tl.constexpr, NUM_STAGES: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    pid_m = pid % num_pid_m
    pid_n = pid // num_pid_m
    offs_am = pid_m * BLOCK_M
    offs_bn = pid_n * BLOCK_N
    offs_k = 0
    offs_scale_m = pid_m * rep_m
    offs_scale_n = pid_n * rep_n
    offs_scale_k = 0
    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BLOCK_K), num_stages=NUM_STAGES):
        a = a_desc.load([offs_am, offs_k])
        b = b_desc.load([offs_bn, offs_k])
        scale_a = a_scale_desc.load([0, offs_scale_m, offs_scale_k, 0, 0])
        scale_b = b_scale_desc.load([0, offs_scale_n, offs_scale_k, 0, 0])
        scale_a = scale_a.reshape(rep_m, rep_k, 32, 4, 4).trans(0, 3, 2, 1, 4).reshape(BLOCK_M, BLOCK_K // VEC_SIZE)
        scale_b = scale_b.reshape(rep_n, rep_k, 32, 4, 4).trans(0, 3, 2, 1, 4).reshape(BLOCK_N, BLOCK_K // VEC_SIZE)
        accumulator = tl.dot_scaled(a, scale_a, "e2m1", b.T, scale_b, "e2m1", accumulator)
        offs_k += BLOCK_K // 2
        offs_scale_k += rep_k
    c_desc.store([offs_am, offs_bn], accumulator.to(tl.float16))


@functools.cache
def compile_block_scaled_tma_kernel(vec: int, M: int = 1024, N: int = 1024, K: int = 1024, bm: int = 128,
                                    bn: int = 256, bk: int = 256):
    """The compiled tutorial-10 style block-scaled TMA kernel (5-D scales, tcgen05.cp), no bwtriton passes."""
    rep_m, rep_n, rep_k = bm // 128, bn // 128, bk // vec // 4
    scale_ty = "fp8e4nv" if vec == 16 else "u8"
    sig = {"a_desc": f"tensordesc<u8[{bm}, {bk // 2}]>",
           "a_scale_desc": f"tensordesc<{scale_ty}[1, {rep_m}, {rep_k}, 2, 256]>",
           "b_desc": f"tensordesc<u8[{bn}, {bk // 2}]>",
           "b_scale_desc": f"tensordesc<{scale_ty}[1, {rep_n}, {rep_k}, 2, 256]>",
           "c_desc": f"tensordesc<fp16[{bm}, {bn}]>"}
    constexprs = {"M": M, "N": N, "K": K, "VEC_SIZE": vec, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk,
                  "rep_m": rep_m, "rep_n": rep_n, "rep_k": rep_k, "NUM_STAGES": 3}
    sig.update({k: "constexpr" for k in constexprs})
    src = triton.compiler.ASTSource(fn=_block_scaled_tma_kernel, signature=sig, constexprs=constexprs)
    return triton.compile(src, target=SM100, options={"num_warps": 4})


def _compile_block_scaled_tma(vec: int) -> str:
    return compile_block_scaled_tma_kernel(vec).asm["ptx"]


# ---------------------------------------------------------------------------------------------------------------
# Warp-specialized TMA matmul (tl.range(..., warp_specialize=True))
@triton.jit
def _ws_matmul_kernel(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK), warp_specialize=True, num_stages=3):
        a = a_desc.load([pid_m * BM, k * BK])
        b = b_desc.load([pid_n * BN, k * BK])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.float16))


def _compile_ws_matmul() -> str:
    bm, bn, bk = 128, 128, 64
    sig = {"a_desc": f"tensordesc<fp16[{bm}, {bk}]>", "b_desc": f"tensordesc<fp16[{bn}, {bk}]>",
           "c_desc": f"tensordesc<fp16[{bm}, {bn}]>", "K": "i32", "BM": "constexpr", "BN": "constexpr",
           "BK": "constexpr"}
    src = triton.compiler.ASTSource(fn=_ws_matmul_kernel, signature=sig, constexprs={"BM": bm, "BN": bn, "BK": bk})
    return triton.compile(src, target=SM100, options={"num_warps": 4}).asm["ptx"]


# ---------------------------------------------------------------------------------------------------------------
# Persistent matmul: an outer loop over tiles around the K loop (epilogue smem traffic reaches the next tile's MMA
# only through the outer back edge), pointer loads in and out.
@triton.jit
def _persistent_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, NUM_SMS: tl.constexpr, BM: tl.constexpr,
                              BN: tl.constexpr, BK: tl.constexpr):
    num_n = tl.cdiv(N, BN)
    tiles = tl.cdiv(M, BM) * num_n
    for tile in tl.range(tl.program_id(0), tiles, NUM_SMS):
        rm = (tile // num_n) * BM + tl.arange(0, BM)
        rn = (tile % num_n) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
            b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
            acc = tl.dot(a, b, acc)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


def _compile_persistent() -> str:
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
           "NUM_SMS": "constexpr", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}
    names = _persistent_matmul_kernel.arg_names
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K")}
    src = triton.compiler.ASTSource(fn=_persistent_matmul_kernel, signature=sig, attrs=attrs,
                                    constexprs={"NUM_SMS": 148, "BM": 128, "BN": 128, "BK": 64})
    return triton.compile(src, target=SM100, options={"num_warps": 4, "num_stages": 3}).asm["ptx"]


# ---------------------------------------------------------------------------------------------------------------
# Gluon kernels (defined lazily: importing gluon is only needed when one of them is requested)
@functools.cache
def _gluon_kernels():
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.blackwell import (
        TensorMemoryLayout, TensorMemoryScalesLayout, allocate_tensor_memory, fence_async_shared,
        get_tmem_reg_layout, mbarrier, tcgen05_commit, tcgen05_mma, tcgen05_mma_scaled)

    @gluon.jit
    def _commit_wait_store(acc, bar, c_ptr, M: gl.constexpr, N: gl.constexpr, tmem_layout: gl.constexpr,
                           num_warps: gl.constexpr):
        """The epilogue both single-MMA kernels share: commit -> mbarrier wait -> tcgen05.ld -> store."""
        tcgen05_commit(bar)
        mbarrier.wait(bar, phase=0)
        mbarrier.invalidate(bar)
        reg_layout: gl.constexpr = get_tmem_reg_layout(gl.float32, (M, N), tmem_layout, num_warps)
        c = acc.load(reg_layout)
        cm = gl.arange(0, M, layout=gl.SliceLayout(1, reg_layout))
        cn = gl.arange(0, N, layout=gl.SliceLayout(0, reg_layout))
        gl.store(c_ptr + cm[:, None] * N + cn[None, :], c)

    @gluon.jit
    def one_mma(a_ptr, b_ptr, c_ptr, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr, num_warps: gl.constexpr):
        blk: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
        om = gl.arange(0, M, layout=gl.SliceLayout(1, blk))
        on = gl.arange(0, N, layout=gl.SliceLayout(1, blk))
        ok = gl.arange(0, K, layout=gl.SliceLayout(0, blk))
        a = gl.load(a_ptr + om[:, None] * K + ok[None, :])
        b = gl.load(b_ptr + on[:, None] * K + ok[None, :])
        a_smem = gl.allocate_shared_memory(gl.float16, [M, K], gl.NVMMASharedLayout.get_default_for([M, K], gl.float16), a)
        b_smem = gl.allocate_shared_memory(gl.float16, [N, K], gl.NVMMASharedLayout.get_default_for([N, K], gl.float16), b)
        fence_async_shared()
        tmem_layout: gl.constexpr = TensorMemoryLayout(block=(M, N), col_stride=1)
        acc = allocate_tensor_memory(gl.float32, [M, N], tmem_layout)
        bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        mbarrier.init(bar, count=1)
        tcgen05_mma(a_smem, b_smem.permute((1, 0)), acc, use_acc=False)
        _commit_wait_store(acc, bar, c_ptr, M, N, tmem_layout, num_warps)

    @gluon.jit
    def mma_scaled(a_ptr, b_ptr, as_ptr, bs_ptr, c_ptr, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr,
                   VEC: gl.constexpr, num_warps: gl.constexpr):
        # e2m1 operands packed 2 per byte along K: [M, K//2] and [N, K//2] u8.
        blk: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [num_warps, 1], [1, 0])
        om = gl.arange(0, M, layout=gl.SliceLayout(1, blk))
        on = gl.arange(0, N, layout=gl.SliceLayout(1, blk))
        ok = gl.arange(0, K // 2, layout=gl.SliceLayout(0, blk))
        a = gl.load(a_ptr + om[:, None] * (K // 2) + ok[None, :])
        b = gl.load(b_ptr + on[:, None] * (K // 2) + ok[None, :])
        a_smem = gl.allocate_shared_memory(gl.uint8, [M, K // 2], gl.NVMMASharedLayout.get_default_for([M, K // 2], gl.uint8), a)
        b_smem = gl.allocate_shared_memory(gl.uint8, [N, K // 2], gl.NVMMASharedLayout.get_default_for([N, K // 2], gl.uint8), b)
        sl: gl.constexpr = TensorMemoryScalesLayout()
        sa_reg: gl.constexpr = get_tmem_reg_layout(as_ptr.dtype.element_ty, (M, K // VEC), sl, num_warps)
        sb_reg: gl.constexpr = get_tmem_reg_layout(bs_ptr.dtype.element_ty, (N, K // VEC), sl, num_warps)
        sm = gl.arange(0, M, layout=gl.SliceLayout(1, sa_reg))
        sk = gl.arange(0, K // VEC, layout=gl.SliceLayout(0, sa_reg))
        sn = gl.arange(0, N, layout=gl.SliceLayout(1, sb_reg))
        skb = gl.arange(0, K // VEC, layout=gl.SliceLayout(0, sb_reg))
        sa = gl.load(as_ptr + sm[:, None] * (K // VEC) + sk[None, :])
        sb = gl.load(bs_ptr + sn[:, None] * (K // VEC) + skb[None, :])
        sa_t = allocate_tensor_memory(as_ptr.dtype.element_ty, [M, K // VEC], sl, sa)
        sb_t = allocate_tensor_memory(bs_ptr.dtype.element_ty, [N, K // VEC], sl, sb)
        fence_async_shared()
        tmem_layout: gl.constexpr = TensorMemoryLayout(block=(M, N), col_stride=1)
        acc = allocate_tensor_memory(gl.float32, [M, N], tmem_layout)
        bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        mbarrier.init(bar, count=1)
        tcgen05_mma_scaled(a_smem, b_smem.permute((1, 0)), acc, sa_t, sb_t, "e2m1", "e2m1", use_acc=False)
        _commit_wait_store(acc, bar, c_ptr, M, N, tmem_layout, num_warps)

    @gluon.jit
    def mma_two_ctas(a_ptr, b_ptr, c_ptr, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr,
                     block_layout_a: gl.constexpr, block_layout_b: gl.constexpr, block_layout_c: gl.constexpr,
                     acc_layout: gl.constexpr, shared_layout_a: gl.constexpr, shared_layout_b: gl.constexpr,
                     mma_barrier_layout: gl.constexpr):
        om = gl.arange(0, M, layout=gl.SliceLayout(1, block_layout_a))
        ok = gl.arange(0, K, layout=gl.SliceLayout(0, block_layout_a))
        a = gl.load(a_ptr + om[:, None] * K + ok[None, :])
        okb = gl.arange(0, K, layout=gl.SliceLayout(1, block_layout_b))
        on = gl.arange(0, N, layout=gl.SliceLayout(0, block_layout_b))
        b = gl.load(b_ptr + okb[:, None] * N + on[None, :])
        a_smem = gl.allocate_shared_memory(gl.float16, [M, K], shared_layout_a, a)
        b_smem = gl.allocate_shared_memory(gl.float16, [K, N], shared_layout_b, b)
        fence_async_shared(cluster=True)
        bar = gl.allocate_shared_memory(gl.int64, [1], mma_barrier_layout)
        mbarrier.init(bar, count=1)
        acc = allocate_tensor_memory(gl.float32, [M, N], acc_layout)
        tcgen05_mma(a_smem, b_smem, acc, use_acc=False, mbarriers=[bar])
        mbarrier.wait(bar, phase=0)
        reg_layout: gl.constexpr = get_tmem_reg_layout(gl.float32, (M, N), acc_layout, num_warps=gl.num_warps(),
                                                       cga_layout=block_layout_c.cga_layout)
        c = acc.load(reg_layout)
        c = gl.convert_layout(c, block_layout_c)
        cm = gl.arange(0, M, layout=gl.SliceLayout(1, block_layout_c))
        cn = gl.arange(0, N, layout=gl.SliceLayout(0, block_layout_c))
        gl.store(c_ptr + cm[:, None] * N + cn[None, :], c)

    return gl, one_mma, mma_scaled, mma_two_ctas


def _compile_gluon_one_mma() -> str:
    from triton.experimental.gluon._runtime import GluonASTSource
    _, one_mma, _, _ = _gluon_kernels()
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "constexpr", "N": "constexpr",
           "K": "constexpr", "num_warps": "constexpr"}
    src = GluonASTSource(fn=one_mma, signature=sig, constexprs={"M": 128, "N": 128, "K": 64, "num_warps": 4})
    return triton.compile(src, target=SM100, options={"num_warps": 4}).asm["ptx"]


def _compile_gluon_mma_scaled(scale_ty: str, vec: int) -> str:
    from triton.experimental.gluon._runtime import GluonASTSource
    _, _, mma_scaled, _ = _gluon_kernels()
    sig = {"a_ptr": "*u8", "b_ptr": "*u8", "as_ptr": f"*{scale_ty}", "bs_ptr": f"*{scale_ty}", "c_ptr": "*fp32",
           "M": "constexpr", "N": "constexpr", "K": "constexpr", "VEC": "constexpr", "num_warps": "constexpr"}
    src = GluonASTSource(fn=mma_scaled, signature=sig,
                         constexprs={"M": 128, "N": 128, "K": 128, "VEC": vec, "num_warps": 4})
    return triton.compile(src, target=SM100, options={"num_warps": 4}).asm["ptx"]


def _compile_gluon_two_ctas(m: int = 256, n: int = 256) -> str:
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.experimental.gluon.language.nvidia.blackwell import TensorMemoryLayout, mbarrier
    gl, _, _, mma_two_ctas = _gluon_kernels()
    cga_a, cga_b, cga_c = [[1, 0]], [[0, 1]], [[1, 0]]

    def blocked(cga, order):
        return gl.BlockedLayout([1, 8], [1, 32], warps_per_cta=[4, 1], order=order, cga_layout=cga)

    constexprs = dict(
        M=m, N=n, K=64,
        block_layout_a=blocked(cga_a, [0, 1]), block_layout_b=blocked(cga_b, [1, 0]),
        block_layout_c=blocked(cga_c, [1, 0]),
        acc_layout=TensorMemoryLayout((m // 2, n), col_stride=1, cta_split_num=(2, 1), two_ctas=True),
        shared_layout_a=gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2, cga_layout=cga_a),
        shared_layout_b=gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2, cga_layout=cga_b),
        mma_barrier_layout=mbarrier.MBarrierLayout(cga_layout=[[0]]))
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32"}
    sig.update({k: "constexpr" for k in constexprs})
    src = GluonASTSource(fn=mma_two_ctas, signature=sig, constexprs=constexprs)
    return triton.compile(src, target=SM100, options={"num_warps": 4, "num_ctas": 2}).asm["ptx"]


# ---------------------------------------------------------------------------------------------------------------
# A kernel Triton 3.6 turns into `trap;`: three 128x256 fp32 accumulators need 768 > 512 TMEM columns.
@triton.jit
def _tmem_overflow_kernel(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc0 = tl.zeros((BM, BN), dtype=tl.float32)
    acc1 = tl.zeros((BM, BN), dtype=tl.float32)
    acc2 = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc0 = tl.dot(a, b, acc0)
        acc1 = tl.dot(a * 2, b, acc1)
        acc2 = tl.dot(a * 3, b, acc2)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc0 + acc1 * acc2)


def _compile_tmem_overflow() -> str:
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "K": "i32", "BM": "constexpr", "BN": "constexpr",
           "BK": "constexpr"}
    src = triton.compiler.ASTSource(fn=_tmem_overflow_kernel, signature=sig,
                                    constexprs={"BM": 128, "BN": 256, "BK": 32})
    return triton.compile(src, target=SM100, options={"num_warps": 8, "num_stages": 1}).asm["ptx"]


def _compile_tmem_fallback_3acc() -> str:
    """plan-tmem's fallback output: three 256-column accumulators (768 > 512 columns) serialised into three
    fissioned loops, each with a peeled prologue guarded by the trip count (the verifier's own pass is left
    out: the corpus test runs it)."""
    import bwtriton
    from fixtures.tmem_kernels import MULTI_ACC_SIGNATURE, multi_acc_kernel
    res = bwtriton.compile(multi_acc_kernel, signature=MULTI_ACC_SIGNATURE,
                           constexprs=dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, NUM_ACC=3), num_warps=8,
                           num_stages=2, passes="-verify-tcgen05")
    assert res.reports["plan-tmem"]["fallbacks"], "the 768-column kernel no longer needs the fallback"
    return res.asm["ptx"]


_BAD_BUILDERS: dict[str, Callable[[], str]] = {"tmem_overflow_trap": _compile_tmem_overflow}

_BUILDERS: dict[str, Callable[[], str]] = {
    "dot_fp16": lambda: _compile_matmul("fp16", "fp16"),
    "dot_bf16": lambda: _compile_matmul("bf16", "bf16"),
    "dot_bf16_n256": lambda: _compile_matmul("bf16", "fp32", bn=256, num_warps=8, num_stages=2),
    "dot_fp16_m64": lambda: _compile_matmul("fp16", "fp16", bm=64, bn=64),
    "dot_fp8e4m3": lambda: _compile_matmul("fp8e4nv", "fp16", bk=128),
    "dot_fp8e5m2": lambda: _compile_matmul("fp8e5", "fp16", bk=128),
    "dot_tf32": lambda: _compile_matmul("fp32", "fp32", bk=32, prec="tf32"),
    "dot_int8": lambda: _compile_matmul("i8", "i32", bk=128),
    "dot_scaled_mxfp4": lambda: _compile_dot_scaled("e2m1", "e2m1", "u8", 32),
    "dot_scaled_nvfp4": lambda: _compile_dot_scaled("e2m1", "e2m1", "fp8e4nv", 16),
    "dot_scaled_mxf8f6f4": lambda: _compile_dot_scaled("e4m3", "e4m3", "u8", 32, bk=128),
    "dot_scaled_e4m3_e2m1": lambda: _compile_dot_scaled("e4m3", "e2m1", "u8", 32, bk=128),
    "tma_scaled_nvfp4": lambda: _compile_block_scaled_tma(16),
    "tma_scaled_mxfp4": lambda: _compile_block_scaled_tma(32),
    "ws_tma_matmul": _compile_ws_matmul,
    "persistent_matmul": _compile_persistent,
    "gluon_one_mma": _compile_gluon_one_mma,
    "gluon_mma_scaled_nvfp4": lambda: _compile_gluon_mma_scaled("fp8e4nv", 16),
    "gluon_mma_scaled_mxfp4": lambda: _compile_gluon_mma_scaled("u8", 32),
    "gluon_two_ctas": lambda: _compile_gluon_two_ctas(256, 256),
    "gluon_two_ctas_m128": lambda: _compile_gluon_two_ctas(128, 128),
    "tmem_fallback_3acc": _compile_tmem_fallback_3acc,
}


@functools.cache
def _cached(name: str) -> str:
    return {**_BUILDERS, **_BAD_BUILDERS}[name]()


def corpus_kernels() -> dict[str, Callable[[], str]]:
    """Kernel name -> callable returning its sm_100a PTX (compiled on first call, then cached)."""
    return {name: functools.partial(_cached, name) for name in _BUILDERS}


def bad_kernels() -> dict[str, Callable[[], str]]:
    """Kernels that Triton 3.6 compiles "successfully" into broken PTX (the verifier must reject them)."""
    return {name: functools.partial(_cached, name) for name in _BAD_BUILDERS}


def corpus_ptx(name: str) -> str:
    """The PTX of one corpus kernel (compiled once per process)."""
    return _cached(name)


if __name__ == "__main__":  # dump the corpus: python tests/ptx_corpus.py OUTDIR
    import pathlib
    import sys
    import time
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "out/ptx_corpus")
    out.mkdir(parents=True, exist_ok=True)
    for name, get in {**corpus_kernels(), **bad_kernels()}.items():
        t0 = time.time()
        try:
            text = get()
        except Exception as exc:  # report and continue so one broken recipe does not hide the others
            print(f"{name}: FAILED {type(exc).__name__}: {str(exc)[:300]}")
            continue
        (out / f"{name}.ptx").write_text(text)
        print(f"{name}: {len(text.splitlines())} lines, {time.time() - t0:.1f}s")
