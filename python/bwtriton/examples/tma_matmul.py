"""The usual TMA matmul with B stored [N, K] and read as `b.T`. With `num_ctas=2` and 256-row tiles Triton 3.6
splits A and C on M and B on N but does not pair the CTAs (it fails in make_llir); bwtriton's `pair-ctas` pass
turns it into `cta_group::2` MMAs (`bwtriton.compile(..., two_cta=True)`)."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def matmul_tma_bt_kernel(a_desc, b_desc, c_desc, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr):
    """C[M, N] = A[M, K] @ B[N, K]^T through TMA tensor descriptors; one BLOCK_M x BLOCK_N tile per program."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = a_desc.load([pid_m * BLOCK_M, k])
        b = b_desc.load([pid_n * BLOCK_N, k])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


def tma_bt_signature(dtype: str = "fp16", block_m: int = 256, block_n: int = 128, block_k: int = 64,
                     out_dtype: str = "fp16") -> dict:
    """Signature with tensor-descriptor block shapes for the given tile."""
    return {"a_desc": f"tensordesc<{dtype}[{block_m},{block_k}]>", "b_desc": f"tensordesc<{dtype}[{block_n},{block_k}]>",
            "c_desc": f"tensordesc<{out_dtype}[{block_m},{block_n}]>", "K": "i32"}


def tma_bt_spec(dtype: str = "fp16", block_m: int = 256, block_n: int = 128, block_k: int = 64) -> dict:
    """signature + constexprs + launch options, as `bwtriton.compile(**spec)` and BWTRITON_SPECS take them."""
    return {"signature": tma_bt_signature(dtype, block_m, block_n, block_k),
            "constexprs": {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k},
            "num_warps": 4, "num_stages": 3}


matmul_tma_bt_fp8_kernel = matmul_tma_bt_kernel  # same source; its BWTRITON_SPECS entry is the fp8 one
BWTRITON_SPECS = {"matmul_tma_bt_kernel": tma_bt_spec("fp16", block_k=64),
                  "matmul_tma_bt_fp8_kernel": tma_bt_spec("fp8e4nv", block_k=128)}
