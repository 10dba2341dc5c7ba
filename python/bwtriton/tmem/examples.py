"""Kernels that exercise TMEM planning: several accumulators per program (over budget upstream), block-scaled
MMAs (scale allocations), attention-like chains (TMEM operands) and warp-specialized loops (multi-buffered
accumulators). Used by the tests, the docs and the tutorial."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def multi_acc_kernel(a_ptr, b_ptr, c_ptr, K, stride_am, stride_bk, stride_cm,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     NUM_ACC: tl.constexpr):
    """C[:, i*BLOCK_N:(i+1)*BLOCK_N] = A @ B[:, i*BLOCK_N:(i+1)*BLOCK_N] for i < NUM_ACC (2 or 3), with one
    fp32 accumulator per column block, all accumulated in the same K loop. B has NUM_ACC*BLOCK_N columns, C too.
    With BLOCK_M=128, BLOCK_N=256, NUM_ACC=3 it needs 768 TMEM columns: upstream Triton 3.6 emits a `trap;`-only
    kernel for it."""
    pid_m = tl.program_id(0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :]
    acc0 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs)
        acc0 = tl.dot(a, tl.load(b_ptrs), acc0)
        acc1 = tl.dot(a, tl.load(b_ptrs + BLOCK_N), acc1)
        if NUM_ACC == 3:
            acc2 = tl.dot(a, tl.load(b_ptrs + 2 * BLOCK_N), acc2)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * stride_bk
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :]
    tl.store(c, acc0.to(c_ptr.dtype.element_ty))
    tl.store(c + BLOCK_N, acc1.to(c_ptr.dtype.element_ty))
    if NUM_ACC == 3:
        tl.store(c + 2 * BLOCK_N, acc2.to(c_ptr.dtype.element_ty))


MULTI_ACC_SIGNATURE = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "K": "i32", "stride_am": "i32",
                       "stride_bk": "i32", "stride_cm": "i32"}


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, K, stride_am, stride_bk, stride_cm,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One BLOCK_M x BLOCK_N tile of C = A @ B per program (grid: M/BLOCK_M x N/BLOCK_N)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K, BLOCK_K):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * stride_bk
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(c_ptr.dtype.element_ty))


MATMUL_SIGNATURE = MULTI_ACC_SIGNATURE


@triton.jit
def chained_dot_kernel(q_ptr, k_ptr, v_ptr, o_ptr, N_CTX,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Attention-shaped chain without softmax: O = sum_j (Q K_j^T) V_j. The first product's result feeds the
    second MMA as its A operand, which Triton may keep in TMEM (promote-lhs-to-tmem)."""
    pid = tl.program_id(0)
    rm = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rd = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + rm[:, None] * HEAD_DIM + rd[None, :])
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    for start in range(0, N_CTX, BLOCK_N):
        kt = tl.load(k_ptr + (start + rn)[None, :] * HEAD_DIM + rd[:, None])
        s = tl.dot(q, kt)
        v = tl.load(v_ptr + (start + rn)[:, None] * HEAD_DIM + rd[None, :])
        acc = tl.dot(s.to(tl.float16), v, acc)
    tl.store(o_ptr + rm[:, None] * HEAD_DIM + rd[None, :], acc.to(tl.float16))


CHAINED_DOT_SIGNATURE = {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16", "N_CTX": "i32"}


@triton.jit
def scaled_matmul_kernel(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, c_ptr, K,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         GROUP: tl.constexpr):
    """Block-scaled e2m1 x e2m1 matmul tile (NVFP4 with fp8e4nv scales / GROUP=16, MXFP4 with u8 / 32).
    a is [M, K/2] bytes, b is [N, K/2] bytes (both K-packed), scales [M, K/GROUP] and [N, K/GROUP]."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rkp = tl.arange(0, BLOCK_K // 2)
    rs = tl.arange(0, BLOCK_K // GROUP)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * (K // 2) + (k // 2 + rkp)[None, :])
        b = tl.load(b_ptr + rn[:, None] * (K // 2) + (k // 2 + rkp)[None, :])
        sa = tl.load(a_scale_ptr + rm[:, None] * (K // GROUP) + (k // GROUP + rs)[None, :])
        sb = tl.load(b_scale_ptr + rn[:, None] * (K // GROUP) + (k // GROUP + rs)[None, :])
        acc = tl.dot_scaled(a, sa, "e2m1", b.T, sb, "e2m1", acc)
    tl.store(c_ptr + rm[:, None] * (BLOCK_N * tl.num_programs(1)) + rn[None, :], acc)


def scaled_matmul_signature(nvfp4: bool = True) -> dict:
    scale = "*fp8e4nv" if nvfp4 else "*u8"
    return {"a_ptr": "*u8", "a_scale_ptr": scale, "b_ptr": "*u8", "b_scale_ptr": scale, "c_ptr": "*fp32",
            "K": "i32"}


@triton.jit
def ws_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     NUM_SMS: tl.constexpr):
    """Persistent matmul whose tile loop is warp-specialized: Triton multi-buffers the accumulator so the
    epilogue of one tile overlaps the MMAs of the next."""
    num_pid_n = N // BLOCK_N
    num_tiles = (M // BLOCK_M) * num_pid_n
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=True, warp_specialize=True):
        pid_m = tile // num_pid_n
        pid_n = tile % num_pid_n
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = tl.load(a_ptr + rm[:, None] * stride_am + (k + rk)[None, :])
            b = tl.load(b_ptr + (k + rk)[:, None] * stride_bk + rn[None, :])
            acc = tl.dot(a, b, acc)
        tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(tl.float16))


WS_MATMUL_SIGNATURE = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
                       "stride_am": "i32", "stride_bk": "i32", "stride_cm": "i32"}
