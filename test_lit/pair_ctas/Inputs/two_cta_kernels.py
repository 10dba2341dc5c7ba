"""Kernels for the pair-ctas PTX lit tests: the usual TMA matmul with B stored [N, K] (read as b.T), which Triton 3.6
does not pair by itself, and the pointer-load tutorial matmul, which it does."""
import triton
import triton.language as tl


@triton.jit
def matmul_tma_bt_kernel(a_desc, b_desc, c_desc, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = a_desc.load([pid_m * BLOCK_M, k])
        b = b_desc.load([pid_n * BLOCK_N, k])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


def _tma_spec(dtype: str, block_k: int) -> dict:
    return {"signature": {"a_desc": f"tensordesc<{dtype}[256,{block_k}]>",
                          "b_desc": f"tensordesc<{dtype}[128,{block_k}]>",
                          "c_desc": "tensordesc<fp16[256,128]>", "K": "i32"},
            "constexprs": {"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": block_k}, "num_warps": 4, "num_stages": 3}


matmul_tma_bt_fp8_kernel = matmul_tma_bt_kernel  # same source, fp8 spec below
BWTRITON_SPECS = {"matmul_tma_bt_kernel": _tma_spec("fp16", 64), "matmul_tma_bt_fp8_kernel": _tma_spec("fp8e4nv", 128)}
