"""In-kernel block-scaled quantize/dequantize of register tiles, bit-exact twins of `bwtriton.formats`.

All take / return 2-D tiles [BM, BK] quantized along the second (K) dim; BK must be a multiple of the block
(16 for NVFP4, 32 for MX). The NaN/Inf behaviour of `bwtriton.formats` is mirrored for MX (a non-finite block
gets scale 0xFF and zero data); the NVFP4 helper assumes finite input (the torch quantizer raises instead).
"""
from __future__ import annotations

import triton
import triton.language as tl

from .codecs import (e2m1_decode, e2m1_encode, e2m1_round, e4m3_decode, e4m3_encode, e5m2_encode, e8m0_decode,
                     e8m0_from_amax, e8m0_inverse_scale)

FP32_MAX = tl.constexpr(3.4028234663852886e38)


@triton.jit
def pack_e2m1(codes):
    """int codes [BM, BK] -> uint8 [BM, BK//2]; element 2i in the low nibble."""
    BM: tl.constexpr = codes.shape[0]
    BK: tl.constexpr = codes.shape[1]
    lo, hi = tl.split(tl.reshape(codes.to(tl.int32), [BM, BK // 2, 2]))
    return (lo | (hi << 4)).to(tl.uint8)


@triton.jit
def unpack_e2m1(packed):
    """uint8 [BM, BK//2] -> int32 codes [BM, BK]."""
    BM: tl.constexpr = packed.shape[0]
    BKH: tl.constexpr = packed.shape[1]
    p = packed.to(tl.int32)
    return tl.reshape(tl.join(p & 0xF, (p >> 4) & 0xF), [BM, BKH * 2])


@triton.jit
def _blocks(x, SIZE: tl.constexpr):
    """fp32 [BM, BK // SIZE, SIZE] of a tile [BM, BK]: its scale blocks along K."""
    tl.static_assert(x.shape[1] % SIZE == 0, "the tile's K (x.shape[1]) must be a multiple of the format's block "
                                              "(16 for NVFP4, 32 for MX): make BLOCK_K one")
    return tl.reshape(x.to(tl.float32), [x.shape[0], x.shape[1] // SIZE, SIZE])


@triton.jit
def _nvfp4_block_scales(blocks, global_encode_scale):
    """fp32 blocks [BM, BK//16, 16] -> (E4M3 scale codes int32, their values, the fp32 encode factors), each
    [BM, BK//16], the recipe of `formats.nvfp4`."""
    amax = tl.max(tl.abs(blocks), axis=2)
    s_enc = tl.cast(global_encode_scale, tl.float32)  # a tensor or a plain number
    # IEEE division (div_rn), not Triton's default approximate fp32 `/`, so the scalars match torch bit for bit.
    s_dec = tl.math.div_rn(1.0, s_enc)
    scale_code = e4m3_encode(tl.minimum(amax * tl.math.div_rn(s_enc, 6.0), 448.0))
    scale = e4m3_decode(scale_code)
    encode = tl.minimum(tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale * s_dec), FP32_MAX)
    return scale_code, scale, encode


@triton.jit
def quantize_nvfp4_tile(x, global_encode_scale):
    """NVFP4-quantize a bf16/fp16/fp32 tile [BM, BK] with the global encode scale S_enc (fp32 scalar, e.g.
    `QuantizedTensor.global_encode_scale` or `bwtriton.formats.nvfp4_global_encode_scale(x)`).

    Returns (packed uint8 [BM, BK//2], scales tl.float8e4nv [BM, BK//16]), the recipe of `formats.nvfp4`.
    The global decode scale to apply after a GEMM is 1 / S_enc (`tl.math.div_rn(1.0, s_enc)`)."""
    BM: tl.constexpr = x.shape[0]
    BK: tl.constexpr = x.shape[1]
    blocks = _blocks(x, 16)
    scale_code, scale, encode = _nvfp4_block_scales(blocks, global_encode_scale)
    # No clamp to +-6 needed before encoding: e2m1_encode saturates and the clamp never changes the sign.
    codes = e2m1_encode(blocks * encode[:, :, None])
    packed = pack_e2m1(tl.reshape(codes, [BM, BK]))
    return packed, scale_code.to(tl.uint8).to(tl.float8e4nv, bitcast=True)


@triton.jit
def quant_dequant_nvfp4_tile(x, global_encode_scale):
    """fp32 [BM, BK]: the NVFP4 values e2m1 * scale of a tile quantized with S_enc, the global decode scale left
    out; bit-equal to `dequantize_nvfp4_tile(*quantize_nvfp4_tile(x, s_enc), 1.0)` without forming the codes
    (`e2m1_round`), so a quantize-dequantize pass spends about half the instructions."""
    BM: tl.constexpr = x.shape[0]
    BK: tl.constexpr = x.shape[1]
    blocks = _blocks(x, 16)
    _, scale, encode = _nvfp4_block_scales(blocks, global_encode_scale)
    return tl.reshape(e2m1_round(blocks * encode[:, :, None]) * scale[:, :, None], [BM, BK])


@triton.jit
def dequantize_nvfp4_tile(packed, scales, global_decode_scale):
    """(uint8 [BM, BK//2], fp8e4nv or uint8 scales [BM, BK//16], fp32 S_dec) -> fp32 [BM, BK],
    computed as (e2m1 * scale) * S_dec like `QuantizedTensor.dequantize`."""
    BM: tl.constexpr = packed.shape[0]
    BK: tl.constexpr = packed.shape[1] * 2
    vals = tl.reshape(e2m1_decode(unpack_e2m1(packed)), [BM, BK // 16, 16])
    scale = e4m3_decode(scales.to(tl.uint8, bitcast=True))
    out = vals * scale[:, :, None] * tl.cast(global_decode_scale, tl.float32)
    return tl.reshape(out, [BM, BK])


@triton.jit
def _mx_blocks(x, EMAX_ELEM: tl.constexpr):
    """(e8m0 codes int32 [BM, BK//32], scaled blocks x * 2^-shared_exp fp32 [BM, BK//32, 32]); blocks holding
    NaN/Inf get code 255 and zeros."""
    blocks = _blocks(x, 32)
    ab = tl.abs(blocks)
    # tl.max may drop NaN on GPU, so non-finite elements are flagged explicitly (NaN != NaN; |inf| > FLT_MAX).
    bad = tl.max(((ab != ab) | (ab > FP32_MAX)).to(tl.int32), axis=2) != 0
    code = tl.where(bad, 255, e8m0_from_amax(tl.max(ab, axis=2), EMAX_ELEM))
    scaled = blocks * e8m0_inverse_scale(code)[:, :, None]
    scaled = tl.where(bad[:, :, None], 0.0, scaled)
    return code, scaled


@triton.jit
def quantize_mxfp8_tile(x, E5M2: tl.constexpr = False):
    """MXFP8-quantize a tile [BM, BK] (BK % 32 == 0). Returns (data tl.float8e4nv (or tl.float8e5 when E5M2)
    [BM, BK], uint8 e8m0 scales [BM, BK//32]); same bits as `formats.quantize_mxfp8`."""
    BM: tl.constexpr = x.shape[0]
    BK: tl.constexpr = x.shape[1]
    if E5M2:
        code, scaled = _mx_blocks(x, 15)
        data = e5m2_encode(tl.minimum(tl.maximum(scaled, -57344.0), 57344.0))
        out = tl.reshape(data, [BM, BK]).to(tl.uint8).to(tl.float8e5, bitcast=True)
    else:
        code, scaled = _mx_blocks(x, 8)
        data = e4m3_encode(tl.minimum(tl.maximum(scaled, -448.0), 448.0))
        out = tl.reshape(data, [BM, BK]).to(tl.uint8).to(tl.float8e4nv, bitcast=True)
    return out, code.to(tl.uint8)


@triton.jit
def quantize_mxfp4_tile(x):
    """MXFP4-quantize a tile [BM, BK] (BK % 32 == 0). Returns (packed uint8 [BM, BK//2], uint8 e8m0 scales
    [BM, BK//32]); same bits as `formats.quantize_mxfp4`."""
    BM: tl.constexpr = x.shape[0]
    BK: tl.constexpr = x.shape[1]
    code, scaled = _mx_blocks(x, 2)
    return pack_e2m1(tl.reshape(e2m1_encode(scaled), [BM, BK])), code.to(tl.uint8)


@triton.jit
def dequantize_mxfp8_tile(data, scales):
    """(fp8 [BM, BK] as tl.float8e4nv / tl.float8e5, uint8 e8m0 scales [BM, BK//32]) -> fp32 [BM, BK]."""
    BM: tl.constexpr = data.shape[0]
    BK: tl.constexpr = data.shape[1]
    vals = tl.reshape(data.to(tl.float32), [BM, BK // 32, 32])
    return tl.reshape(vals * e8m0_decode(scales)[:, :, None], [BM, BK])


@triton.jit
def dequantize_mxfp4_tile(packed, scales):
    """(uint8 [BM, BK//2], uint8 e8m0 scales [BM, BK//32]) -> fp32 [BM, BK]."""
    BM: tl.constexpr = packed.shape[0]
    BK: tl.constexpr = packed.shape[1] * 2
    vals = tl.reshape(e2m1_decode(unpack_e2m1(packed)), [BM, BK // 32, 32])
    return tl.reshape(vals * e8m0_decode(scales)[:, :, None], [BM, BK])
