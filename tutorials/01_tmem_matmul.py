"""Tutorial 01 — a `tl.dot` matmul on Blackwell: what tcgen05 instructions it becomes, and why.

Run:  python tutorials/01_tmem_matmul.py        (no GPU needed; a few seconds)

On Hopper a tensor-core matmul keeps its accumulator in registers (wgmma). Blackwell's 5th-generation tensor
core (tcgen05) instead accumulates into *Tensor Memory* (TMEM): 128 lanes x 512 columns of 32-bit cells per SM,
which the MMA writes asynchronously while the warps do other work. That changes the protocol a kernel must
follow, and this tutorial walks through every step of it in the PTX Triton 3.6 emits for sm_100a.

`result.asm["ptx"]` is the PTX the cubin is assembled from: Triton's output after bwtriton's PTX passes
(`result.asm["ptx_triton"]` keeps Triton's own text; for this kernel the passes change nothing).
"""
from __future__ import annotations

import re

import bwtriton
from bwtriton.examples.matmul import matmul_constexprs, matmul_kernel, matmul_signature
from bwtriton.report import format_table, ptx_census, sass_mma_opcodes, wrap

# The kernel is an ordinary Triton matmul (see bwtriton/examples/matmul.py): each program computes a 128x128 tile
# of C, looping over K in steps of 64 and calling tl.dot on each pair of tiles.
result = bwtriton.compile(matmul_kernel, signature=matmul_signature("bf16"), constexprs=matmul_constexprs(),
                          target="sm_100a", num_warps=4, num_stages=3)
ptx = result.asm["ptx"]  # the final PTX, the one ptxas turned into result.asm["cubin"]


def first(pattern: str) -> str:
    """The first PTX line matching `pattern`, without its predicate guard, for display."""
    for line in ptx.splitlines():
        if re.search(pattern, line):
            text = re.sub(r"^\s*@!?%p\d+\s+", "", line.strip())
            return text if len(text) <= 96 else text[:75] + " ... " + text[-16:]  # 4 columns of indent
    return "(not found)"


STEPS = [
    ("1. allocate TMEM",
     r"tcgen05\.alloc\.",
     "One warp asks the SM's TMEM allocator for columns (a power of two >= 32). The 128x128 fp32 accumulator needs "
     "128 columns: one column per N element, one lane per M row. The allocator writes the TMEM base address into "
     "shared memory; everyone reads it after a barrier."),
    ("2. give up the right to allocate more",
     r"tcgen05\.relinquish_alloc_permit",
     "Once a CTA has all the TMEM it will ever need it says so, which lets a CTA on the same SM that is waiting "
     "for TMEM know it will not starve behind us."),
    ("3. an mbarrier for MMA completion",
     r"mbarrier\.init",
     "tcgen05.mma is asynchronous: issuing it returns at once. Completion is signalled through an mbarrier in "
     "shared memory, initialised here."),
    ("4. the MMA itself",
     r"tcgen05\.mma\.",
     "A single thread issues D[tmem] (+)= A[smem] x B[smem]. A and B are described by 64-bit shared-memory "
     "descriptors (address, leading/stride byte offsets, swizzle); the 32-bit instruction descriptor (idesc) "
     "carries M, N, the operand types (bf16 -> kind::f16), majorness and whether to accumulate."),
    ("5. commit: MMA -> mbarrier",
     r"tcgen05\.commit\.",
     "commit makes the mbarrier track all MMAs issued so far by this thread: when they finish, the barrier's "
     "phase flips. Triton commits once per pipelined iteration and once after the loop."),
    ("6. wait for the accumulator",
     r"mbarrier\.try_wait\.parity",
     "Before reading D the warps spin on the barrier's phase. Reading TMEM earlier would race with the tensor "
     "core (silent garbage on hardware; `bwtriton check` and the emulator both flag it)."),
    ("7. TMEM -> registers",
     r"tcgen05\.ld\.",
     "Each warp may only touch its own 32-lane quarter of TMEM (warp id % 4). 32x32b.x128 moves 128 columns of "
     "its 32 lanes into 128 registers per thread."),
    ("8. ... and wait for the load",
     r"tcgen05\.wait::ld",
     "tcgen05.ld is asynchronous too: the registers are valid only after wait::ld. Using them before is the "
     "classic Blackwell bug this project's verifier checks for."),
    ("9. free TMEM",
     r"tcgen05\.dealloc",
     "Every allocation must be freed, with the same column count, before the CTA exits — otherwise the next CTA "
     "on this SM cannot allocate and hangs."),
]

print(__doc__.split("Run:")[0].strip(), "\n")
for title, pattern, why in STEPS:
    print(f"{title}\n    {first(pattern)}\n{wrap(why, indent='    ', first='    ')}\n")

census = ptx_census(ptx)
print("Counts in this kernel's PTX:")
print(format_table(("instruction", "count"), sorted(census["tcgen05"].items())))
print(wrap(f"\nMMA kind(s): {census['mma_kinds']}, cta_group: {census['cta_groups']}, TMEM columns allocated: "
           f"{census['alloc_columns']} (metadata tmem_size = {result.summary()['tmem_columns']})"))
print(wrap(f"SASS tensor-core / TMEM opcodes: {dict(sass_mma_opcodes(result.asm['sass']))}"))
print(wrap("\nWhy 8 MMAs: the TTGIR has two tc_gen5_mma ops (the pipeliner peels one iteration out of the K loop), "
           "and each covers BLOCK_K=64, which is 4 instructions of K=16 for 16-bit types. See them all with:") + "\n"
      "  bwtriton compile python/bwtriton/examples/matmul.py:matmul_kernel --emit ptx | grep tcgen05")
