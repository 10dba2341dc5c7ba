"""Gluon device code that turns bf16 activations into their exact NVFP4 values inside a consuming kernel, so that
the W4A4 linear's quantize-dequantize of x needs no launch of its own.

`nvfp4_qdq_blocks` is the Gluon twin of `language.quant_dequant_nvfp4_tile`: the same fp32 operations in the same
order (the codecs are the `language.codecs` functions themselves), so the bf16 it returns is bit-equal to
`nvfp4_dequant.quant_dequant_nvfp4`'s. It forms the e2m1 codes and decodes them rather than calling `e2m1_round`:
the round form is fewer instructions but, inside the frag kernel at ACT_ROWS = 1, one register more than fits
(a spill; `tests/kernels/test_decode_frag_layout.py` checks the SASS).

`qdq_slice` is a kernel prologue: a CTA quantize-dequantizes the K slice of x it is about to read and writes it to
a bf16 scratch copy of x, then waits at a CTA barrier. CTAs that share a K slice write the same bits to the same
addresses, and each reads only after its own writes (the barrier orders them), so no CTA depends on another. The
work is redundant across those CTAs, so callers keep it to small slices (`QDQ_MAX_ELEMENTS` per CTA).
"""
from __future__ import annotations

import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..compat.gluon import backfill
from ..language.codecs import e2m1_decode, e2m1_encode, e4m3_decode, e4m3_encode

backfill()  # gl.barrier() below is Triton 3.8+'s spelling; older releases get it here

#: Most activation elements (M x K slice) a CTA's prologue quantize-dequantizes: a bound on the redundant work
#: and on the prologue's registers (64 values per thread at 4 warps).
QDQ_MAX_ELEMENTS = 8192

FP32_MAX = gl.constexpr(3.4028234663852886e38)
NVFP4_MAX = gl.constexpr(2688.0)  # 448 (E4M3 max) * 6 (E2M1 max)


@gluon.jit
def nvfp4_qdq_blocks(b, s_enc):
    """fp32 [R, B, 16] (16-element NVFP4 blocks on the last axis), fp32 S_enc -> fp32 e2m1 * e4m3 of each value
    (the global decode scale left out): exact in bf16."""
    amax = gl.max(gl.abs(b), axis=2)
    s_dec = tl.math.div_rn(1.0, s_enc)
    # IEEE divisions, in the order of `quantize_nvfp4_tile`, so that the scales match torch's bit for bit
    scale = e4m3_decode(e4m3_encode(gl.minimum(amax * tl.math.div_rn(s_enc, 6.0), 448.0)))
    one = gl.full(scale.shape, 1.0, gl.float32, scale.type.layout)
    encode = gl.minimum(tl.math.div_rn(one, scale * s_dec), FP32_MAX)
    codes = e2m1_encode(b * gl.expand_dims(encode, 2))
    return e2m1_decode(codes) * gl.expand_dims(scale, 2)


@gluon.jit
def w4a4_alpha(s_enc, w_dec_ptr):
    """The epilogue scale S_dec(x) * S_dec(w) = div_rn(1, S_enc) * w_dec, as `nvfp4_dequant.quant_dequant_nvfp4`
    computes it."""
    return tl.math.div_rn(1.0, s_enc) * gl.load(w_dec_ptr)


@gluon.jit
def _tile_offsets(ROWS: gl.constexpr, KQ: gl.constexpr):
    """Row and column index tensors [ROWS, 1, 1], [1, KQ/16, 16] of a [ROWS, KQ/16, 16] tile: 8 consecutive
    values per thread (16-byte accesses), a block over 2 lanes, warps over rows where there are enough of them."""
    W: gl.constexpr = gl.num_warps()
    if ROWS >= W:
        L: gl.constexpr = gl.BlockedLayout([1, 1, 8], [1, 16, 2], [W, 1, 1], [2, 1, 0])
    else:
        L: gl.constexpr = gl.BlockedLayout([1, 1, 8], [1, 16, 2], [1, W, 1], [2, 1, 0])
    rows = gl.arange(0, ROWS, layout=gl.SliceLayout(1, gl.SliceLayout(2, L)))
    blocks = gl.arange(0, KQ // 16, layout=gl.SliceLayout(0, gl.SliceLayout(2, L)))
    elems = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(1, L)))
    r3 = gl.expand_dims(gl.expand_dims(rows, 1), 2)
    k3 = gl.expand_dims(gl.expand_dims(blocks * 16, 0), 2) + gl.expand_dims(gl.expand_dims(elems, 0), 1)
    return r3, k3


@gluon.jit
def encode_scale_from_amax(x_ptr, M, K, stride_xm, ROWS: gl.constexpr, KQ: gl.constexpr):
    """S_enc = amax == 0 ? 1 : min(div_rn(2688, amax), FLT_MAX) over bf16 x [M, K], read by this CTA alone
    (the twin of `nvfp4_dequant.encode_scale_from_amax`)."""
    r3, k3 = _tile_offsets(ROWS, KQ)
    best = ((r3 + k3) * 0).to(gl.float32)  # zeros in the tile's layout
    for m in range(0, M, ROWS):
        for k in range(0, K, KQ):
            mask = (r3 + m < M) & (k3 + k < K)
            x = gl.load(x_ptr + ((r3 + m).to(gl.int64) * stride_xm + (k3 + k)), mask=mask, other=0.0)
            best = gl.maximum(best, gl.abs(x.to(gl.float32)))
    amax = gl.max(gl.max(gl.max(best, axis=2), axis=1), axis=0)
    s_enc = gl.minimum(tl.math.div_rn(NVFP4_MAX, amax), FP32_MAX)
    return gl.where(amax == 0.0, 1.0, s_enc)


@gluon.jit
def qdq_slice(x_ptr, xd_ptr, s_enc, M, stride_xm, stride_dm, k_lo, k_len, ROWS: gl.constexpr, KQ: gl.constexpr):
    """xd[m, k] = the NVFP4 value of x[m, k] (bf16, `nvfp4_qdq_blocks`) for m < M, k_lo <= k < k_lo + k_len
    (k_lo, k_len multiples of 16), then a CTA barrier: after it, every thread of the CTA may read that slice."""
    r3, k3 = _tile_offsets(ROWS, KQ)
    for m in range(0, M, ROWS):
        for k in range(k_lo, k_lo + k_len, KQ):
            mask = (r3 + m < M) & (k3 + k < k_lo + k_len)
            rows = (r3 + m).to(gl.int64)
            x = gl.load(x_ptr + (rows * stride_xm + (k3 + k)), mask=mask, other=0.0)
            xd = nvfp4_qdq_blocks(x.to(gl.float32), s_enc)
            gl.store(xd_ptr + (rows * stride_dm + (k3 + k)), xd.to(gl.bfloat16), mask=mask)
    gl.barrier()
