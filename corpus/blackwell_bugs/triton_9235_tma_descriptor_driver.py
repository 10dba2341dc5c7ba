"""triton-lang/triton#9235, "[NVIDIA] Add a mitigation against potential errors related to TMA descriptor
creation" (following CUTLASS commit b7ecaa6).

Symptom (from the PR): on Blackwell, a TMA descriptor the driver encodes for a tensor whose backing allocation is
under 128 KB and that is not dense and non-overlapping occasionally makes the kernel fail; the PR says no Triton
program reproduces it reliably. The fix is on the host: how the descriptor is created, not the kernel's code.

Below PTX: the kernel's PTX is the same with and without the mitigation (the descriptor is a kernel argument,
`cp.async.bulk.tensor` reads it at run time), so neither the verifier nor the emulator can see the fault; the
emulator encodes descriptors from the documented fields and has no driver to be wrong. Reproducer: a TMA copy of
a strided (not dense) view of a small allocation.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def tma_copy_kernel(src_desc, dst_desc, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """dst tile = src tile, both through TMA descriptors."""
    off_m = tl.program_id(0) * BLOCK_M
    dst_desc.store([off_m, 0], src_desc.load([off_m, 0]))


BWTRITON_SPECS = {"tma_copy_kernel": {
    "signature": {"src_desc": "tensordesc<fp16[64,64]>", "dst_desc": "tensordesc<fp16[64,64]>"},
    "constexprs": {"BLOCK_M": 64, "BLOCK_N": 64},
    "num_warps": 4, "num_stages": 1}}
CASE = {"report": "triton-lang/triton#9235", "kernel": "tma_copy_kernel", "reach": "below-ptx",
        "why": "driver-encoded TMA descriptor; the PTX does not change with the mitigation"}


def emulate_launch():
    """(grid, args, check): a 128 x 64 column slice of a 128 x 128 fp16 tensor (32 KB, strided)."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    base = torch.randn(128, 128, generator=torch.Generator().manual_seed(6)).half()
    src = base[:, :64]
    dst = torch.zeros(128, 64).half()
    descs = [TensorDescriptor(src, list(src.shape), list(src.stride()), [64, 64]),
             TensorDescriptor.from_tensor(dst, [64, 64])]
    return (2,), descs, lambda: torch.equal(dst, src)
