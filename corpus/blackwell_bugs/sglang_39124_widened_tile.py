"""sgl-project/sglang#39124, "fix(kda_prefill): fence shared writes before async proxy reads".

Symptom: SGLang's hand-written KDA prefill kernel for SM103 (B300) widened a tile to tf32 in registers, wrote it to
shared memory through the generic proxy, synchronised the CTA and consumed it with tcgen05 MMAs; without a
`fence.proxy.async.shared::cta` after the write, 86 of 100 runs differed from the fenced kernel (stale shared
memory read by the tensor core). The kernel is CUDA, not Triton: the same pattern written in Triton checks that
Triton's lowering places the fence where the hand-written kernel missed it.

Reproducer, written from the description: inside a K loop a bf16 tile is loaded, widened to fp32 and scaled in
registers, and fed as the A operand of a tf32 `tl.dot`, so it reaches the tensor core through `st.shared`.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def widened_tile_kernel(l_ptr, s_ptr, b_ptr, out_ptr, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr):
    """out = (L * s[None, :]) @ B with L bf16 widened to fp32 in registers and a tf32 MMA per K step."""
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        tile = tl.load(l_ptr + rm[:, None] * K + (k + rk)[None, :]).to(tl.float32)
        tile = tile * tl.load(s_ptr + k + rk)[None, :]
        b = tl.load(b_ptr + (k + rk)[:, None] * BLOCK_N + rn[None, :])
        acc = tl.dot(tile, b, acc, input_precision="tf32")
    tl.store(out_ptr + rm[:, None] * BLOCK_N + rn[None, :], acc)


BWTRITON_SPECS = {"widened_tile_kernel": {
    "signature": {"l_ptr": "*bf16", "s_ptr": "*fp32", "b_ptr": "*fp32", "out_ptr": "*fp32", "K": "i32"},
    "constexprs": {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32},
    "num_warps": 4, "num_stages": 2}}
CASE = {"report": "sgl-project/sglang#39124", "kernel": "widened_tile_kernel", "reach": "ptx"}


def emulate_launch():
    """(grid, args, check): one 128 x 64 tile, K = 128 (four K steps)."""
    M, N, K = 128, 64, 128
    g = torch.Generator().manual_seed(3)
    lt = torch.randn(M, K, generator=g).bfloat16()
    s = torch.rand(K, generator=g) + 0.5
    b = torch.randn(K, N, generator=g)
    out = torch.zeros(M, N)

    def check() -> bool:
        ref = (lt.float() * s[None, :]) @ b
        # tf32 operands (10-bit mantissa) over 128 terms: 1e-2 relative, 0.1 absolute on values of size ~10
        return torch.allclose(out, ref, atol=0.1, rtol=1e-2)
    return (1,), [lt, s, b, out, K], check
