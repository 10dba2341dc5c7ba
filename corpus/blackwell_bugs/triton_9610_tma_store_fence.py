"""triton-lang/triton#9610, "[FenceAsync] Add async read dependencies to the pass" (merged after 3.6.0).

Symptom (from the PR): Triton's fence-insertion pass did not put a `fence.proxy.async` between a generic-proxy
shared-memory write and a TMA store (`copy_local_to_global`) that reads the same buffer, so the TMA engine could
store bytes the threads had not made visible to the async proxy yet: stale or mixed output tiles.

Reproducer, written from the description: a persistent kernel whose epilogue writes each output tile to shared
memory from registers and stores it with a TMA store, tile after tile through the same buffer.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def persistent_tma_store_kernel(a_desc, b_desc, c_desc, M, N, K, NUM_PROGRAMS: tl.constexpr,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C = A @ B^T over tiles strided by NUM_PROGRAMS; each tile's epilogue goes out through a TMA store."""
    n_tiles_n = tl.cdiv(N, BLOCK_N)
    n_tiles = tl.cdiv(M, BLOCK_M) * n_tiles_n
    for tile in range(tl.program_id(0), n_tiles, NUM_PROGRAMS):
        off_m = (tile // n_tiles_n) * BLOCK_M
        off_n = (tile % n_tiles_n) * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            acc = tl.dot(a_desc.load([off_m, k]), b_desc.load([off_n, k]).T, acc)
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


BWTRITON_SPECS = {"persistent_tma_store_kernel": {
    "signature": {"a_desc": "tensordesc<fp16[128,64]>", "b_desc": "tensordesc<fp16[64,64]>",
                  "c_desc": "tensordesc<fp16[128,64]>", "M": "i32", "N": "i32", "K": "i32"},
    "constexprs": {"NUM_PROGRAMS": 1, "BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64},
    "num_warps": 4, "num_stages": 2}}
CASE = {"report": "triton-lang/triton#9610", "kernel": "persistent_tma_store_kernel", "reach": "ptx"}


def emulate_launch():
    """(grid, args, check): one program walks two output tiles through the same epilogue buffer."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    M, N, K = 128, 128, 128
    g = torch.Generator().manual_seed(4)
    a = torch.randn(M, K, generator=g).half()
    b = torch.randn(N, K, generator=g).half()
    c = torch.zeros(M, N).half()
    descs = [TensorDescriptor.from_tensor(a, [128, 64]), TensorDescriptor.from_tensor(b, [64, 64]),
             TensorDescriptor.from_tensor(c, [128, 64])]

    def check() -> bool:
        # fp16 operands, fp32 accumulation of 128 terms, fp16 output: 1e-2 relative is the output rounding
        return torch.allclose(c.float(), a.float() @ b.float().T, atol=5e-2, rtol=1e-2)
    return (1,), descs + [M, N, K], check
