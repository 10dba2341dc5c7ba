"""A block-scaled (tl.dot_scaled, e2m1 x e2m1) TMA kernel with 128-row tiles: A and B through 2-D descriptors
(B stored [N, K]), scales through 5-D descriptors in the cuBLAS 128x4 blocked layout (so Triton copies them to
TMEM with tcgen05.cp). Program ids run M-fastest: programs 2i and 2i+1 compute the two 128-row halves of one
256-row tile of the same N tile, which is what pair-ctas-scaled needs."""
import triton
import triton.language as tl


@triton.jit
def scaled_tma_kernel(a_desc, a_scale_desc, b_desc, b_scale_desc, c_desc, M: tl.constexpr, K: tl.constexpr,
                      VEC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m: tl.constexpr = M // BLOCK_M
    pid_m = pid % tiles_m
    pid_n = pid // tiles_m
    rep_k: tl.constexpr = BLOCK_K // VEC // 4
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, K // BLOCK_K, num_stages=3):
        a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K // 2])
        b = b_desc.load([pid_n * BLOCK_N, k * BLOCK_K // 2])
        sa = a_scale_desc.load([0, pid_m, k * rep_k, 0, 0])
        sb = b_scale_desc.load([0, pid_n, k * rep_k, 0, 0])
        sa = sa.reshape(1, rep_k, 32, 4, 4).trans(0, 3, 2, 1, 4).reshape(BLOCK_M, BLOCK_K // VEC)
        sb = sb.reshape(1, rep_k, 32, 4, 4).trans(0, 3, 2, 1, 4).reshape(BLOCK_N, BLOCK_K // VEC)
        acc = tl.dot_scaled(a, sa, "e2m1", b.T, sb, "e2m1", acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))


def spec(vec: int) -> dict:
    scale = "fp8e4nv" if vec == 16 else "u8"
    return {"signature": {"a_desc": "tensordesc<u8[128, 128]>", "a_scale_desc": f"tensordesc<{scale}[1, 1, 4, 2, 256]>"
                          if vec == 16 else f"tensordesc<{scale}[1, 1, 2, 2, 256]>",
                          "b_desc": "tensordesc<u8[128, 128]>", "b_scale_desc": f"tensordesc<{scale}[1, 1, 4, 2, 256]>"
                          if vec == 16 else f"tensordesc<{scale}[1, 1, 2, 2, 256]>",
                          "c_desc": "tensordesc<fp16[128, 128]>"},
            "constexprs": {"M": 256, "K": 768, "VEC": vec, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 256},
            "num_warps": 4}


scaled_tma_nvfp4 = scaled_tma_kernel
scaled_tma_mxfp4 = scaled_tma_kernel
BWTRITON_SPECS = {"scaled_tma_nvfp4": spec(16), "scaled_tma_mxfp4": spec(32)}
