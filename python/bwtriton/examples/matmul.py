"""The tutorial `tl.dot` matmul: the kernel the demo compiles for sm_100a and, on a GPU, runs and checks."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak: tl.constexpr, stride_bk, stride_bn: tl.constexpr,
                  stride_cm, stride_cn: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  INT_ACC: tl.constexpr = False):
    """C[M, N] = A[M, K] @ B[K, N], fp32 accumulation, one BLOCK_M x BLOCK_N tile per program.

    M, N, K must be multiples of the blocks (the torch-facing wrappers check this); unit inner strides are
    constexpr so loads vectorise. INT_ACC accumulates in int32 (int8 operands).
    """
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32 if INT_ACC else tl.float32)
    for _ in range(0, K, BLOCK_K):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc, out_dtype=tl.int32 if INT_ACC else tl.float32)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty))


def matmul_signature(in_dtype: str = "fp16", out_dtype: str | None = None, acc_int: bool = False) -> dict:
    """Triton signature of `matmul_kernel` for the given element types (e.g. 'fp16', 'bf16', 'fp8e4nv', 'i8')."""
    out = out_dtype or ("i32" if acc_int else in_dtype)
    return {"a_ptr": f"*{in_dtype}", "b_ptr": f"*{in_dtype}", "c_ptr": f"*{out}", "M": "i32", "N": "i32",
            "K": "i32", "stride_am": "i32", "stride_bk": "i32", "stride_cm": "i32"}


def matmul_constexprs(block_m: int = 128, block_n: int = 128, block_k: int = 64) -> dict:
    """Constexprs of `matmul_kernel`: the tile and the unit inner strides."""
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k,
            "stride_ak": 1, "stride_bn": 1, "stride_cn": 1}


# The spec `bwtriton compile FILE.py:KERNEL` reads when no --signature is given.
BWTRITON_SPECS = {
    "matmul_kernel": {"signature": matmul_signature("fp16"), "constexprs": matmul_constexprs(),
                      "num_warps": 4, "num_stages": 3},
}
