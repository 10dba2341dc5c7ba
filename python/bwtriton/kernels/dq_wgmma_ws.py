"""The shared-memory decode GEMM (`dq_wgmma`) with its three jobs in warps of their own: a TMA warp fills the
operand ring, a decode warpgroup turns each K step's weight words into a bf16 tile in a DEC-deep ring, and two
MMA warpgroups (the default partition) run the wgmmas and the epilogue.

In the one-partition kernel the decode of step k + 1, its fence and the barriers around it sit between two
wgmmas. Here the MMA warps only wait on mbarriers and the decode (about 200 instructions per decode warp and K
step) runs beside the tensor cores: 1.12 - 1.24x faster on the H200 (M = 4096, N = K = 4096: 235 against 264 us;
M = 1024, N = K = 8192: 221 against 258). With the decode replaced by zero tiles the same kernel runs at cuBLAS
speed (200 against 199 us), so the decode warpgroup is what is left: ncu has the MMA warps waiting on it
(docs/nvfp4_hopper.md). Same tiles, same decode, same wgmma order per output: the results equal
`dq_wgmma_kernel`'s bit for bit.

Barriers (each one's phase flips once per ring turn):
* ready[s]: slot s's three TMA copies landed (expect-tx; the TMA warp's arrival). Only the decode warpgroup waits
  on it: the MMA warps see the slot's x tile through decoded[d], which the decode warpgroup arrives on after its
  own wait (release / acquire order is transitive);
* decoded[d]: bf16 buffer d holds its step's tile (after the decode warpgroup's fence);
* retired[s]: the wgmma of the step in slot s retired (the MMA warps' arrival). It frees the slot for the TMA warp
  (the step's words were read before decoded[d] was arrived on) and, DEC steps later, bf16 buffer d for the
  decode warpgroup (DEC <= STAGES, so the barrier cannot run a whole phase ahead of that wait).
An arrival from a partition of several warps is one thread's, after a barrier of that partition (Triton's
lowering), so it comes after every warp's part.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from ..compat.gluon import backfill
from ._dq_device import decode_slot, decode_tables, grouped, pair_layout, store_out, word_layout

backfill()  # buf.reinterpret(...) and gl.barrier() below are Triton 3.9 spellings; older releases get them here

__all__ = ["dq_ws_kernel", "MAXNREG", "DECODE_WARPS", "DECODE_REGS", "LOAD_REGS"]

#: Warps of the decode partition (one warpgroup: two were not faster on the H200, 236 - 241 against 231 us at
#: M = 4096, N = K = 4096, with the MMA warpgroups at 168 registers).
DECODE_WARPS = gl.constexpr(4)
#: Registers per thread: the kernel's `maxnreg` (its 16 warps in 64K registers; launch option), the decode
#: warpgroup's (no spills at BLOCK_N = 128) and the TMA warp's warpgroup's (the least setmaxnreg takes); the MMA
#: warpgroups get the rest (200).
MAXNREG = 128
DECODE_REGS = gl.constexpr(88)
LOAD_REGS = gl.constexpr(24)
_BLOCK_K = gl.constexpr(64)


@gluon.jit
def _load_partition(descs, rings, bars, off_m, off_n, steps, table_ptr):
    """The TMA warp: step i's x tile, weight words and scale words into slot i % STAGES once it is free."""
    x_desc, w_desc, s_desc = descs
    x_smem, w_smem, s_smem, b_smem = rings
    ready, decoded, retired = bars
    STAGES: gl.constexpr = x_smem.shape[0]
    nbytes: gl.constexpr = x_desc.block_type.nbytes + w_desc.block_type.nbytes + s_desc.block_type.nbytes
    for i in range(steps):
        slot = i % STAGES
        mbarrier.wait(retired.index(slot), ((i // STAGES) & 1) ^ 1)  # step i - STAGES retired (none at first)
        bar = ready.index(slot)
        mbarrier.expect(bar, nbytes)
        tma.async_copy_global_to_shared(x_desc, [off_m, i * _BLOCK_K], bar, x_smem.index(slot))
        tma.async_copy_global_to_shared(w_desc, [off_n, i * (_BLOCK_K // 8)], bar, w_smem.index(slot))
        tma.async_copy_global_to_shared(s_desc, [i, off_n], bar, s_smem.index(slot))


@gluon.jit
def _decode_partition(descs, rings, bars, off_m, off_n, steps, table_ptr):
    """The decode warpgroup: slot i % STAGES's words into bf16 buffer i % DEC once step i - DEC retired."""
    x_smem, w_smem, s_smem, b_smem = rings
    ready, decoded, retired = bars
    STAGES: gl.constexpr = w_smem.shape[0]
    BLOCK_N: gl.constexpr = w_smem.shape[1]
    BK8: gl.constexpr = w_smem.shape[2]
    DEC: gl.constexpr = b_smem.shape[0]
    WL: gl.constexpr = word_layout(BK8, DECODE_WARPS)
    BL: gl.constexpr = pair_layout(BK8, DECODE_WARPS)
    sel, th, tl = decode_tables(table_ptr, BLOCK_N, BK8, WL)
    for i in range(steps):
        slot = i % STAGES
        mbarrier.wait(ready.index(slot), (i // STAGES) & 1)
        tile = decode_slot(w_smem, s_smem, slot, sel, th, tl, WL, BL)
        j = i - DEC  # the step that last read bf16 buffer i % DEC
        mbarrier.wait(retired.index(j % STAGES), (j // STAGES) & 1, pred=i >= DEC)
        b_smem.index(i % DEC).store(tile)
        fence_async_shared()  # the tile to the wgmma (async proxy); orders the word reads before the next TMA too
        mbarrier.arrive(decoded.index(i % DEC), count=1)


@gluon.jit
def _mma_partition(x_smem, b_smem, bars, steps, out_ptr, alpha_ptr, bias_ptr, M, stride_om, off_m, off_n,
                   HAS_BIAS: gl.constexpr):
    """The MMA warpgroups: x tile times the decoded tile per step, one wgmma group in flight, then the epilogue."""
    ready, decoded, retired = bars
    STAGES: gl.constexpr = x_smem.shape[0]
    BLOCK_M: gl.constexpr = x_smem.shape[1]
    DEC: gl.constexpr = b_smem.shape[0]
    BLOCK_N: gl.constexpr = b_smem.shape[1]
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                  instr_shape=[16, BLOCK_N, 16])
    BS: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, MMA)
    for i in range(steps):
        d = i % DEC
        mbarrier.wait(decoded.index(d), (i // DEC) & 1)
        bt = b_smem.index(d).reinterpret(gl.bfloat16, [BLOCK_N, _BLOCK_K], BS).permute((1, 0))
        acc = warpgroup_mma(x_smem.index(i % STAGES), bt, acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=[acc])
        mbarrier.arrive(retired.index((i - 1) % STAGES), count=1, pred=i > 0)  # step i - 1 retired
    acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
    store_out(acc, out_ptr, alpha_ptr, bias_ptr, M, stride_om, off_m, off_n, HAS_BIAS)


@gluon.jit
def dq_ws_kernel(x_desc, w_desc, s_desc, out_ptr, alpha_ptr, bias_ptr, table_ptr, M, N, K, stride_om,
                 BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                 DEC: gl.constexpr = 2, HAS_BIAS: gl.constexpr = False):
    """`dq_wgmma_kernel`'s contract (same arguments, grid and tile order; num_warps 8 for the MMA warpgroups, and
    maxnreg MAXNREG: the kernel has 16 warps) with the work split into partitions; DEC bf16 buffers,
    DEC <= STAGES."""
    BK8: gl.constexpr = _BLOCK_K // 8
    BS32: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=2)
    pid_m, pid_n = grouped(gl.program_id(0), gl.cdiv(M, BLOCK_M), N // BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    steps = K // _BLOCK_K
    x_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_M, _BLOCK_K], x_desc.layout)
    w_smem = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N, BK8], w_desc.layout)
    s_smem = gl.allocate_shared_memory(gl.int32, [STAGES, 1, BLOCK_N], s_desc.layout)
    b_smem = gl.allocate_shared_memory(gl.int32, [DEC, BLOCK_N, _BLOCK_K // 2], BS32)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    retired = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    decoded = gl.allocate_shared_memory(gl.int64, [DEC, 1], mbarrier.MBarrierLayout())
    for j in gl.static_range(STAGES):
        mbarrier.init(ready.index(j), count=1)
        mbarrier.init(retired.index(j), count=1)
    for j in gl.static_range(DEC):
        mbarrier.init(decoded.index(j), count=1)
    fence_async_shared()
    bars = (ready, decoded, retired)
    worker_args = ((x_desc, w_desc, s_desc), (x_smem, w_smem, s_smem, b_smem), bars, off_m, off_n, steps, table_ptr)
    gl.warp_specialize([
        (_mma_partition, (x_smem, b_smem, bars, steps, out_ptr, alpha_ptr, bias_ptr, M, stride_om, off_m, off_n,
                          HAS_BIAS)),
        (_load_partition, worker_args),
        (_decode_partition, worker_args),
    ], [1, DECODE_WARPS], [LOAD_REGS, DECODE_REGS])
