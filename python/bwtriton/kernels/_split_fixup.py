"""Split-K inside one launch: the K slices of a row block add their fp32 partial sums into an accumulator with
atomics and count their arrivals; the slice that arrives last turns the sum into the output.

Both buffers are zero when a launch starts and zero again when it ends (the last slice clears what it read), so a
caller keeps one pair per stream (`_launcher.StreamScratch`) instead of zeroing an output and casting it in two
more kernels (`arrive_last`: a release at GPU scope after a CTA barrier, so every thread's atomics into the
accumulator happen before it; the last slice acquires before its reads, which go to L2, `.cg`).
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..compat.gluon import backfill

backfill()  # gl.barrier() below is Triton 3.8+'s spelling; older releases get it here


@gluon.jit
def arrive_last(count_ptr, slices):
    """Count this CTA's slice in *count_ptr; True in the slice that arrives last, which also puts the count back
    to zero for the next launch. The arrival releases at GPU scope after a CTA barrier (every thread's atomics
    come first); only the last slice acquires (in the exchange that resets the count), so the others do not
    invalidate their SM's L1."""
    gl.barrier()
    last = gl.atomic_add(count_ptr, 1, sem="release", scope="gpu") == slices - 1
    if last:
        gl.atomic_xchg(count_ptr, 0, sem="acquire", scope="gpu")
        gl.barrier()  # the other threads' reads come after the acquire
    return last


@gluon.jit
def finish_split_rows(acc_ptr, out_ptr, bias_ptr, alpha, n0, M, N, stride_om, BN: gl.constexpr,
                      HAS_BIAS: gl.constexpr, MP: gl.constexpr):
    """out[m, n0 + j] = acc[m, n0 + j] * alpha (+ bias[n0 + j]) for m < M <= MP, j < BN, in out's dtype; then
    acc's block is set to zero. acc is fp32 [M, N] (row stride N)."""
    L: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [1, gl.num_warps()], [1, 0])
    rm = gl.arange(0, MP, layout=gl.SliceLayout(1, L))
    rn = n0 + gl.arange(0, BN, layout=gl.SliceLayout(0, L))
    mask = gl.expand_dims(rm < M, 1) & gl.expand_dims(rn < N, 0)
    at = gl.expand_dims(rm * N, 1) + gl.expand_dims(rn, 0)
    res = gl.load(acc_ptr + at, mask=mask, other=0.0, cache_modifier=".cg") * alpha
    if HAS_BIAS:
        res = res + gl.expand_dims(gl.load(bias_ptr + rn).to(gl.float32), 0)
    gl.store(out_ptr + (gl.expand_dims(rm * stride_om, 1) + gl.expand_dims(rn, 0)),
             res.to(out_ptr.dtype.element_ty), mask=mask)
    gl.store(acc_ptr + at, gl.zeros([MP, BN], gl.float32, L), mask=mask)
