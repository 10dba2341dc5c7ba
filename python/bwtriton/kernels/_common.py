"""Helpers shared by the NVFP4/MX kernels (`blockscaled`, `decode`, `nvfp4_linear`): device predicates, the
epilogue's alpha, and the in-kernel scale addressing and E2M1 decode. The kernels import these from here, never
from each other, so the three modules have no import cycle.
"""
from __future__ import annotations

import weakref

import torch
import triton
import triton.language as tl

from ._device import device_capability


def view_as_words(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x bf16 [M, K] viewed as wider words [M, K * 2 / itemsize] (int32: element pairs, int64: quads; the low
    element in the low half), as the decode kernels read activations; a contiguous copy when the row stride or
    storage offset does not allow the view."""
    try:
        return x.view(dtype)
    except RuntimeError:
        return x.clone(memory_format=torch.contiguous_format).view(dtype)


def tcgen05_block_scaled(device: torch.device) -> bool:
    """Whether `device` has block-scaled tcgen05 MMA with scales in TMEM (sm_100a / sm_103a), which the TMA kernel
    needs. Not `Target.native_block_scaled`: that also holds for sm_120a, whose block-scaled MMA is mma.sync."""
    return device_capability(device) in (100, 103)


def alpha_tensor(a_q, b_q, device) -> torch.Tensor:
    """fp32 [1] tensor holding the product of the NVFP4 global decode scales (1 for MX), read by the epilogue."""
    alpha = torch.ones((), dtype=torch.float32, device=device)
    for q in (a_q, b_q):
        if q.global_scale is not None:
            alpha = alpha * q.global_scale.to(device=device, dtype=torch.float32)
    return alpha.reshape(1)


# ------------------------------------------------------------------------------------------ in-kernel helpers

@triton.jit
def scale_offsets(rows, kb, n_kb, BLOCKED: tl.constexpr):
    """Byte offsets of scale (row, k-block) in the plain [rows, n_kb] or the 128x4 blocked layout (ref. §6d)."""
    if BLOCKED:
        n_col_tiles = (n_kb + 3) // 4
        return ((rows // 128) * (n_col_tiles * 512) + (kb // 4) * 512 + (rows % 32) * 16
                + ((rows % 128) // 32) * 4 + (kb % 4))
    else:
        return rows * n_kb + kb


@triton.jit
def _e2m1x4_to_bf16(packed, scale):
    """Four packed bytes (8 E2M1 codes) -> (low-nibble values, high-nibble values) in bf16, times the per-byte
    bf16 `scale`, exactly.

    Each code goes to bf16 bits (sign at 15, exponent/mantissa bits at 8..6): that pattern reads as value * 2^-126,
    so one fma by 2^126 (0x7E80) rebiases it (bf16 fma keeps subnormals), and a second multiplies by the scale
    (exact: at most 2 x 4 significant bits). prmt spreads bytes 0,1 (2,3) into the two 16-bit halves. About 4
    instructions per weight, against ~10 for the same decode written with Triton integer ops."""
    return tl.inline_asm_elementwise(
        asm="""{
        .reg .b32 t, u, m, s, bias, nz;
        mov.b32 bias, 0x7E807E80;
        mov.b32 nz, 0x80008000;
        prmt.b32 t, $4, 0, 0x4140;
        prmt.b32 u, $4, 0, 0x4342;
        and.b32 m, t, 0x00070007; shl.b32 m, m, 6; and.b32 s, t, 0x00080008; shl.b32 s, s, 12; or.b32 $0, m, s;
        and.b32 m, u, 0x00070007; shl.b32 m, m, 6; and.b32 s, u, 0x00080008; shl.b32 s, s, 12; or.b32 $1, m, s;
        and.b32 m, t, 0x00700070; shl.b32 m, m, 2; and.b32 s, t, 0x00800080; shl.b32 s, s, 8; or.b32 $2, m, s;
        and.b32 m, u, 0x00700070; shl.b32 m, m, 2; and.b32 s, u, 0x00800080; shl.b32 s, s, 8; or.b32 $3, m, s;
        fma.rn.bf16x2 $0, $0, bias, nz; fma.rn.bf16x2 $0, $0, $5, nz;
        fma.rn.bf16x2 $1, $1, bias, nz; fma.rn.bf16x2 $1, $1, $6, nz;
        fma.rn.bf16x2 $2, $2, bias, nz; fma.rn.bf16x2 $2, $2, $5, nz;
        fma.rn.bf16x2 $3, $3, bias, nz; fma.rn.bf16x2 $3, $3, $6, nz;
        }""",
        constraints="=r,=r,=r,=r,r,r,r",
        args=[packed, scale],
        dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)


@triton.jit
def dequant_nvfp4_bf16(packed, scales):
    """uint8 [R, KH] (two E2M1 codes per byte, element 2i low) and fp8e4nv scales [R, 2*KH//16] -> bf16 [R, 2*KH]
    equal to e2m1 * scale exactly (the global scale is left to the epilogue)."""
    R: tl.constexpr = packed.shape[0]
    KH: tl.constexpr = packed.shape[1]
    s = scales.to(tl.float32).to(tl.bfloat16)                        # UE4M3 -> bf16 is exact
    s = tl.reshape(tl.broadcast_to(s[:, :, None], (R, KH // 8, 8)), (R, KH))  # one scale per byte (8 per block)
    lo, hi = _e2m1x4_to_bf16(packed, s)
    return tl.reshape(tl.join(lo, hi), (R, 2 * KH))


# ------------------------------------------------------------------------------------------ host-side helpers
_DECODE_SCALES: "weakref.WeakKeyDictionary[torch.Tensor, tuple[int, torch.Tensor]]" = weakref.WeakKeyDictionary()


def decode_scale_arg(q, device: torch.device) -> torch.Tensor:
    """`q.global_scale` as the fp32 [1] device tensor the kernels read. Already fp32 on `device` (what
    `quantize_nvfp4` of a device tensor gives): a view, so in-place edits are seen. Otherwise the converted copy
    is cached per scale tensor (and its version counter), so a weight's scale is copied to the device once, not
    on every call. (A cached view would keep its key alive through `._base`: hence views are never cached.)"""
    gs = q.global_scale
    if gs.device == device and gs.dtype == torch.float32:
        return gs.reshape(1)
    hit = _DECODE_SCALES.get(gs)
    if hit is not None and hit[0] == gs._version and hit[1].device == device:
        return hit[1]
    arg = gs.to(device=device, dtype=torch.float32).reshape(1).clone()
    _DECODE_SCALES[gs] = (gs._version, arg)
    return arg
