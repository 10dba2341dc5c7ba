"""A block-scaled `tl.dot_scaled` matmul on packed FP4 (e2m1) operands: NVFP4 when the scales are fp8e4nv
(ue4m3, one per 16 elements), MXFP4 when they are uint8 (e8m0, one per 32). On sm_100a this is one
`tcgen05.mma ... kind::mxf4nvf4.block_scale.scale_vec::4X` (or `kind::mxf4 ... scale_vec::2X`) per K step."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def fp4_scaled_matmul_kernel(a_ptr, b_ptr, a_scale_ptr, b_scale_ptr, c_ptr, M, N, K,
                             stride_am, stride_bn, stride_cm, stride_asm, stride_bsn,
                             VEC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                             BLOCK_K: tl.constexpr, FMT: tl.constexpr = "e2m1"):
    """C[M, N] = dequant(A)[M, K] @ dequant(B)[N, K]^T.

    A is uint8 [M, K/2] and B uint8 [N, K/2] (two e2m1 per byte, first in the low nibble, packed along K);
    scales are [M, K/VEC] and [N, K/VEC]. BLOCK_K counts elements. FMT="e4m3"/"e5m2" takes unpacked fp8 operands
    stored as uint8 [M, K] / [N, K] (MXFP8 with u8 scales, VEC=32).
    """
    KP: tl.constexpr = BLOCK_K // 2 if FMT == "e2m1" else BLOCK_K  # bytes of K per block
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rkp = tl.arange(0, KP)
    rks = tl.arange(0, BLOCK_K // VEC)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rkp[None, :]
    b_ptrs = b_ptr + rn[:, None] * stride_bn + rkp[None, :]
    as_ptrs = a_scale_ptr + rm[:, None] * stride_asm + rks[None, :]
    bs_ptrs = b_scale_ptr + rn[:, None] * stride_bsn + rks[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot_scaled(a, tl.load(as_ptrs), FMT, b.T, tl.load(bs_ptrs), FMT, acc)
        a_ptrs += KP
        b_ptrs += KP
        as_ptrs += BLOCK_K // VEC
        bs_ptrs += BLOCK_K // VEC
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty))


def fp4_scaled_signature(scale_dtype: str = "fp8e4nv", out_dtype: str = "fp32") -> dict:
    """Signature for NVFP4 (scale_dtype='fp8e4nv') or MXFP4 (scale_dtype='u8')."""
    return {"a_ptr": "*u8", "b_ptr": "*u8", "a_scale_ptr": f"*{scale_dtype}", "b_scale_ptr": f"*{scale_dtype}",
            "c_ptr": f"*{out_dtype}", "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32", "stride_bn": "i32",
            "stride_cm": "i32", "stride_asm": "i32", "stride_bsn": "i32"}


def fp4_scaled_constexprs(vec: int = 16, block_m: int = 128, block_n: int = 128, block_k: int = 128) -> dict:
    """Constexprs of `fp4_scaled_matmul_kernel`: `vec` elements per scale (16 NVFP4, 32 MX) and the tile."""
    return {"VEC": vec, "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k}


BWTRITON_SPECS = {"fp4_scaled_matmul_kernel": {"signature": fp4_scaled_signature(),
                                               "constexprs": fp4_scaled_constexprs(), "num_warps": 4}}
