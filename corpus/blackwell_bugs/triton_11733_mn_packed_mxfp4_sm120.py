"""triton-lang/triton#11733, "3.8.0 on sm_120: MN-packed mxfp4 dot_scaled returns wrong results and batched scaled
dots fail an assert; both fixed on main (#10726, #11262)" (backport: triton-lang/triton#11734).

Symptom: on an RTX PRO 6000 (sm_120) Triton 3.8.0 compiles an mxfp4 `tl.dot_scaled` whose operands are packed
along M/N (not K) and runs it, and nearly every element of the result is wrong (524,214 of 524,288 in
`test_block_scale_fp4`); main sends that form to the decomposition path on sm_120.

Reproducer, written from the description: a single 128 x 128 tile of an mxfp4 x mxfp4 scaled dot with A packed
along M and B packed along N, compiled for sm_120a (consumer Blackwell: `mma.sync` block-scaled MMAs, no
tcgen05). Our emulator runs sm_100a and sm_90a PTX only, so this case is compiled and inspected, not run.
"""
import triton
import triton.language as tl


@triton.jit
def mn_packed_mxfp4_kernel(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, c_ptr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C = (A * 2^sa) @ (B * 2^sb) for one tile; A[M, K] stored [M/2, K] and B[K, N] stored [K, N/2] as e2m1 pairs."""
    rm2 = tl.arange(0, BLOCK_M // 2)
    rn2 = tl.arange(0, BLOCK_N // 2)
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    rs = tl.arange(0, BLOCK_K // 32)
    a = tl.load(a_ptr + rm2[:, None] * BLOCK_K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * (BLOCK_N // 2) + rn2[None, :])
    sa = tl.load(a_scale_ptr + rm[:, None] * (BLOCK_K // 32) + rs[None, :])
    sb = tl.load(b_scale_ptr + rn[:, None] * (BLOCK_K // 32) + rs[None, :])
    c = tl.dot_scaled(a, sa, "e2m1", b, sb, "e2m1", lhs_k_pack=False, rhs_k_pack=False)
    tl.store(c_ptr + rm[:, None] * BLOCK_N + rn[None, :], c)


BWTRITON_SPECS = {"mn_packed_mxfp4_kernel": {
    "signature": {"a_ptr": "*u8", "a_scale_ptr": "*u8", "b_ptr": "*u8", "b_scale_ptr": "*u8", "c_ptr": "*fp32"},
    "constexprs": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128},
    "num_warps": 4, "num_stages": 1}}
CASE = {"report": "triton-lang/triton#11733", "also": ["triton-lang/triton#10726", "triton-lang/triton#11734"],
        "kernel": "mn_packed_mxfp4_kernel", "reach": "ptx", "target": "sm_120a"}
