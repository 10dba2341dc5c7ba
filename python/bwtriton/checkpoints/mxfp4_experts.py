"""MXFP4 MoE experts in gpt-oss's checkpoint layout, read into `QuantizedTensor`s [E, rows, K].

gpt-oss (and transformers' `integrations/mxfp4.py`, which loads it) stores each expert projection as

    {prefix}.{proj}_blocks  uint8 [E, rows, K/32, 16]   16 bytes = one 32-element block, two E2M1 codes per byte,
                                                          element 2i in the low nibble
    {prefix}.{proj}_scales  uint8 [E, rows, K/32]       UE8M0: scale = 2^(byte - 127)
    {prefix}.{proj}_bias    [E, rows]                    (bf16 or fp32)

with proj in (gate_up_proj, down_proj); rows are the output features (gate_up: 2 * intermediate, down: hidden)
and K the input features. So value[e, r, 32 b + j] = e2m1(code j of block b) * 2^(scales[e, r, b] - 127): the
same bytes as `QuantizedTensor` (format mxfp4, plain scales) once the block axis is flattened. gate_up's rows
interleave the two halves: gate = even rows, up = odd rows (gpt-oss's `x[..., ::2], x[..., 1::2]`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..errors import InputError
from ..formats import QuantizedTensor
from ._tensors import Tensors, check_shape, name_of, take, take_optional

LAYOUT = "gpt-oss MXFP4 experts"
MX_GROUP = 32
BYTES_PER_BLOCK = MX_GROUP // 2
_BIAS_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@dataclass(frozen=True)
class MXFP4Experts:
    """gate_up [E, 2I, H] (rows interleaved gate/up, as stored), down [E, H, I], both mxfp4 with plain UE8M0
    scales; biases fp32 [E, 2I] / [E, H] or None."""

    gate_up: QuantizedTensor
    down: QuantizedTensor
    gate_up_bias: Optional[torch.Tensor]
    down_bias: Optional[torch.Tensor]
    gate_up_order: str = "interleaved"


def read_mxfp4_projection(tensors: Tensors, prefix: str, proj: str) -> tuple[QuantizedTensor, Optional[torch.Tensor]]:
    """({proj}_blocks + {proj}_scales as a QuantizedTensor [E, rows, K], {proj}_bias as fp32 or None)."""
    blocks_name, scales_name = name_of(prefix, f"{proj}_blocks"), name_of(prefix, f"{proj}_scales")
    blocks = take(tensors, blocks_name, (torch.uint8,), LAYOUT)
    scales = take(tensors, scales_name, (torch.uint8, torch.float8_e8m0fnu), LAYOUT)
    if blocks.dim() != 4:
        raise InputError(f"{LAYOUT}: '{blocks_name}' must be 4-D [experts, rows, K/32, 16], got shape "
                         f"{tuple(blocks.shape)}")
    e, rows, n_blocks, block_bytes = blocks.shape
    if block_bytes != BYTES_PER_BLOCK:
        raise InputError(f"{LAYOUT}: '{blocks_name}' has {block_bytes} bytes per block ({2 * block_bytes} "
                         f"elements), MXFP4 needs group size {MX_GROUP} ({BYTES_PER_BLOCK} bytes); re-quantize with "
                         f"32-element blocks")
    check_shape(scales, scales_name, (e, rows, n_blocks), LAYOUT, "one UE8M0 scale per 32-element block")
    k = n_blocks * MX_GROUP
    q = QuantizedTensor(data=blocks.reshape(e, rows, k // 2).contiguous(),
                        scales=scales.contiguous().view(torch.float8_e8m0fnu), scale_layout="plain",
                        global_scale=None, format="mxfp4", shape=(e, rows, k))
    bias_name = name_of(prefix, f"{proj}_bias")
    bias = take_optional(tensors, bias_name, _BIAS_DTYPES, LAYOUT)
    if bias is not None:
        check_shape(bias, bias_name, (e, rows), LAYOUT, "one bias per expert and output feature")
        bias = bias.float()
    return q, bias


def read_mxfp4_experts(tensors: Tensors, prefix: str) -> MXFP4Experts:
    """The experts of an MoE layer stored gpt-oss style under `prefix` (e.g. 'model.layers.0.mlp.experts')."""
    gate_up, gate_up_bias = read_mxfp4_projection(tensors, prefix, "gate_up_proj")
    down, down_bias = read_mxfp4_projection(tensors, prefix, "down_proj")
    e, two_i, h = gate_up.shape
    if two_i % 2 or down.shape != (e, h, two_i // 2):
        raise InputError(f"{LAYOUT}: gate_up_proj is {tuple(gate_up.shape)} [experts, 2*intermediate, hidden] but "
                         f"down_proj is {tuple(down.shape)}; expected down_proj [{e}, {h}, {two_i // 2}]")
    return MXFP4Experts(gate_up, down, gate_up_bias, down_bias)
