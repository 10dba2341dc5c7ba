"""linkedin/Liger-Kernel#1435, "fix(mlp): correct SwiGLU backward_dI on Blackwell (SM100/B200)".

Symptom: on B200 the SwiGLU MLP backward's input gradient is wrong for bf16/fp16 (relative error ~0.46) when two
`tl.dot(..., acc=acc)` calls accumulate into the same accumulator within one K-loop iteration (TMA descriptor
operands); one dot per iteration, two accumulators added at the end, or two sequential K loops are all correct.
The fix restructured the kernel, not Triton.

Reproducer, written from the description: dI = dG @ Wg + dU @ Wu with both products accumulated into one fp32
accumulator inside the same K step, operands through tensor descriptors.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def two_dots_one_acc_kernel(dg_desc, wg_desc, du_desc, wu_desc, out_desc, K, BLOCK_M: tl.constexpr,
                            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """out[M, N] = dG[M, K] @ Wg[K, N] + dU[M, K] @ Wu[K, N], both dots into one accumulator per K step."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        acc = tl.dot(dg_desc.load([pid_m * BLOCK_M, k]), wg_desc.load([k, pid_n * BLOCK_N]), acc)
        acc = tl.dot(du_desc.load([pid_m * BLOCK_M, k]), wu_desc.load([k, pid_n * BLOCK_N]), acc)
    out_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(out_desc.dtype))


_A = "tensordesc<bf16[128,64]>"
_B = "tensordesc<bf16[64,128]>"
BWTRITON_SPECS = {"two_dots_one_acc_kernel": {
    "signature": {"dg_desc": _A, "wg_desc": _B, "du_desc": _A, "wu_desc": _B,
                  "out_desc": "tensordesc<bf16[128,128]>", "K": "i32"},
    "constexprs": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64},
    "num_warps": 4, "num_stages": 3}}
CASE = {"report": "linkedin/Liger-Kernel#1435", "kernel": "two_dots_one_acc_kernel", "reach": "ptx"}


def emulate_launch():
    """(grid, args, check): M = N = 128, K = 256 (four K steps, eight MMAs into one accumulator)."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    M, N, K = 128, 128, 256
    g = torch.Generator().manual_seed(2)
    dg, du = (torch.randn(M, K, generator=g).bfloat16() for _ in range(2))
    wg, wu = (torch.randn(K, N, generator=g).bfloat16() for _ in range(2))
    out = torch.zeros(M, N).bfloat16()
    descs = [TensorDescriptor.from_tensor(t, [128, 64]) for t in (dg,)] + [
        TensorDescriptor.from_tensor(wg, [64, 128]), TensorDescriptor.from_tensor(du, [128, 64]),
        TensorDescriptor.from_tensor(wu, [64, 128]), TensorDescriptor.from_tensor(out, [128, 128])]

    def check() -> bool:
        ref = dg.float() @ wg.float() + du.float() @ wu.float()
        # fp32 sums of 512 bf16 products, bf16 output: 1e-2 relative is the output rounding
        return torch.allclose(out.float(), ref, atol=0.25, rtol=1e-2)
    return (1, 1), descs + [K], check
