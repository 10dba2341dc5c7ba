"""NVFP4 linear weights as the two exporters write them, read into `QuantizedTensor` / `NVFP4Linear`.

Both layouts store the same bytes for the data and the block scales; they differ in the names and in which way
round the per-tensor scale is written (docs/models.md has the sources):

| what                   | compressed-tensors `nvfp4-pack-quantized` | ModelOpt `NVFP4`             |
|------------------------|-------------------------------------------|------------------------------|
| E2M1 codes, uint8 [N, K/2] (1)     | `weight_packed`                           | `weight`                     |
| UE4M3 block scales (2)             | `weight_scale`                            | `weight_scale`               |
| weight per-tensor scale fp32 | `weight_global_scale`: ENCODE 2688 / amax(W) | `weight_scale_2`: DECODE amax/2688 |
| activation per-tensor scale  | `input_global_scale` = ENCODE (static only) | `input_scale` = DECODE |

(1) two codes per byte, element 2i in the low nibble. (2) float8_e4m3fn [N, K/16], plain row-major (not swizzled
on disk; the 128x4 swizzle is applied at load time when asked for).
So W = e2m1 * scale / weight_global_scale = e2m1 * scale * weight_scale_2. bwtriton keeps the decode scale S_dec
in `QuantizedTensor.global_scale` (what the GEMM epilogue multiplies) and the encode scale S_enc in
`global_encode_scale`; the stored one is kept bit for bit and the other is its float32 reciprocal.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..errors import InputError
from ..formats import QuantizedTensor
from ._tensors import Tensors, check_shape, group_size, name_of, scalar, take, take_optional

NVFP4_GROUP = 16
COMPRESSED_TENSORS = "compressed-tensors nvfp4-pack-quantized"
MODELOPT = "ModelOpt NVFP4"
_SCALE_DTYPES = (torch.float8_e4m3fn,)
_BIAS_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@dataclass(frozen=True)
class NVFP4Weight:
    """One linear layer's NVFP4 weight as read from a checkpoint.

    weight: QuantizedTensor [out, in] (format nvfp4, plain scales, both global scales set).
    input_decode_scale: the activations' static per-tensor decode scale (amax / 2688), None when the checkpoint
        quantizes activations dynamically (or is weight-only).
    bias: the layer's bias, None when it has none."""

    weight: QuantizedTensor
    input_decode_scale: Optional[float]
    bias: Optional[torch.Tensor]


def _codes_and_scales(tensors: Tensors, prefix: str, data_leaf: str, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    data_name, scale_name = name_of(prefix, data_leaf), name_of(prefix, "weight_scale")
    data = take(tensors, data_name, (torch.uint8,), layout)
    scales = take(tensors, scale_name, _SCALE_DTYPES, layout)
    if data.dim() != 2 or scales.dim() != 2:
        raise InputError(f"{layout}: '{data_name}' and '{scale_name}' must be 2-D ([out, in/2] and [out, in/16]), "
                         f"got {tuple(data.shape)} and {tuple(scales.shape)}")
    n, k_half = data.shape
    group_size(k_half, scales.shape[1], scale_name, layout, NVFP4_GROUP)
    check_shape(scales, scale_name, (n, 2 * k_half // NVFP4_GROUP), layout,
                "one scale row per weight row: the scales must not be swizzled or transposed on disk")
    return data.contiguous(), scales.contiguous()


def _weight(data: torch.Tensor, scales: torch.Tensor, s_dec: torch.Tensor, s_enc: torch.Tensor) -> QuantizedTensor:
    n, k_half = data.shape
    return QuantizedTensor(data=data, scales=scales, scale_layout="plain", global_scale=s_dec, format="nvfp4",
                           shape=(n, 2 * k_half), global_encode_scale=s_enc)


def _bias(tensors: Tensors, prefix: str, n: int, layout: str) -> Optional[torch.Tensor]:
    name = name_of(prefix, "bias")
    bias = take_optional(tensors, name, _BIAS_DTYPES, layout)
    if bias is not None:
        check_shape(bias, name, (n,), layout, "the bias has one entry per output feature")
    return bias


def read_compressed_tensors_nvfp4(tensors: Tensors, prefix: str) -> NVFP4Weight:
    """The NVFP4 weight of module `prefix` in compressed-tensors' `nvfp4-pack-quantized` layout.

    weight_global_scale (and input_global_scale) are encode scales: S_enc is kept exactly and
    S_dec = float32(1 / S_enc)."""
    layout = COMPRESSED_TENSORS
    data, scales = _codes_and_scales(tensors, prefix, "weight_packed", layout)
    gs_name = name_of(prefix, "weight_global_scale")
    s_enc = scalar(take(tensors, gs_name, (torch.float32,), layout), gs_name, layout)
    in_name = name_of(prefix, "input_global_scale")
    in_gs = take_optional(tensors, in_name, (torch.float32,), layout)
    input_decode = None if in_gs is None else float(1.0 / scalar(in_gs, in_name, layout))
    return NVFP4Weight(_weight(data, scales, 1.0 / s_enc, s_enc), input_decode, _bias(tensors, prefix,
                                                                                       data.shape[0], layout))


def read_modelopt_nvfp4(tensors: Tensors, prefix: str) -> NVFP4Weight:
    """The NVFP4 weight of module `prefix` in ModelOpt's layout.

    weight_scale_2 (and input_scale) are decode scales: S_dec is kept exactly and S_enc = float32(1 / S_dec)."""
    layout = MODELOPT
    data, scales = _codes_and_scales(tensors, prefix, "weight", layout)
    s2_name = name_of(prefix, "weight_scale_2")
    s_dec = scalar(take(tensors, s2_name, (torch.float32,), layout), s2_name, layout)
    in_name = name_of(prefix, "input_scale")
    in_scale = take_optional(tensors, in_name, (torch.float32,), layout)
    input_decode = None if in_scale is None else float(scalar(in_scale, in_name, layout))
    return NVFP4Weight(_weight(data, scales, s_dec, 1.0 / s_dec), input_decode, _bias(tensors, prefix,
                                                                                     data.shape[0], layout))


def detect_nvfp4_layout(tensors: Tensors, prefix: str) -> str:
    """'compressed-tensors' or 'modelopt', from the tensor names under `prefix`."""
    if name_of(prefix, "weight_packed") in tensors:
        return "compressed-tensors"
    if name_of(prefix, "weight_scale_2") in tensors:
        return "modelopt"
    raise InputError(f"no NVFP4 weight under '{prefix}': expected '{name_of(prefix, 'weight_packed')}' "
                     f"(compressed-tensors) or '{name_of(prefix, 'weight_scale_2')}' (ModelOpt)")


def read_nvfp4(tensors: Tensors, prefix: str, layout: str = "auto") -> NVFP4Weight:
    """Read module `prefix`'s NVFP4 weight; layout 'compressed-tensors', 'modelopt' or 'auto' (from the names)."""
    if layout == "auto":
        layout = detect_nvfp4_layout(tensors, prefix)
    readers = {"compressed-tensors": read_compressed_tensors_nvfp4, "modelopt": read_modelopt_nvfp4}
    if layout not in readers:
        raise InputError(f"layout must be 'auto', 'compressed-tensors' or 'modelopt', got {layout!r}")
    return readers[layout](tensors, prefix)


def nvfp4_linear_from_checkpoint(tensors: Tensors, prefix: str, layout: str = "auto", *,
                                 scale_layout: str = "plain", static_input_scale: bool = True,
                                 activations: str = "nvfp4"):
    """An `NVFP4Linear` holding module `prefix`'s checkpoint weight (bytes copied unchanged; the scales are
    swizzled to 128x4 when scale_layout='blocked_128x4'). activations: 'nvfp4' (W4A4: static_input_scale uses
    the checkpoint's activation scale when it has one; False quantizes activations from each input's amax) or
    'bf16' (weight-only: the activations stay bf16 and the checkpoint's input scale is not used)."""
    from ..nn import NVFP4Linear  # bwtriton.nn registers the torch ops: not needed for reading alone
    w = read_nvfp4(tensors, prefix, layout)
    n, k = w.weight.shape
    static = static_input_scale and activations == "nvfp4"
    layer = NVFP4Linear(k, n, bias=w.bias is not None, scale_layout=scale_layout,
                        x_global_scale=w.input_decode_scale if static else None,
                        activations=activations, device=w.weight.data.device)
    q = w.weight.to_blocked() if scale_layout == "blocked_128x4" else w.weight
    layer.weight_data.copy_(q.data)
    layer.weight_scales.copy_(q.scales)
    layer.weight_global_scale.copy_(q.global_scale)
    if w.bias is not None:
        layer.bias.copy_(w.bias.to(torch.bfloat16))
    return layer


@dataclass(frozen=True)
class NVFP4Experts:
    """An MoE layer's experts stored as one NVFP4 linear per expert and projection (how compressed-tensors and
    ModelOpt export Mixtral / Qwen-MoE): gate [E, I, H], up [E, I, H], down [E, H, I] byte tensors with their
    plain scales, and per-expert decode scales gate_global / up_global / down_global fp32 [E]."""

    gate: list
    up: list
    down: list

    @property
    def num_experts(self) -> int:
        return len(self.gate)


def read_nvfp4_experts(tensors: Tensors, prefix: str, num_experts: int, layout: str = "auto",
                       names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")) -> NVFP4Experts:
    """Experts `{prefix}.{e}.{name}` for e < num_experts and name in `names` (gate, up, down; Mixtral's
    exports use ('w1', 'w3', 'w2')), each read with `read_nvfp4`. Shapes must agree across experts."""
    if num_experts <= 0:
        raise InputError(f"read_nvfp4_experts: num_experts must be positive, got {num_experts}")
    per_proj = []
    for name in names:
        weights = [read_nvfp4(tensors, name_of(prefix, f"{e}.{name}"), layout).weight for e in range(num_experts)]
        shapes = {w.shape for w in weights}
        if len(shapes) != 1:
            raise InputError(f"read_nvfp4_experts: the experts' '{name}' weights differ in shape ({sorted(shapes)}); "
                             f"every expert of one layer must have the same shape")
        per_proj.append(weights)
    gate, up, down = per_proj
    (i, h), (h2, i2) = gate[0].shape, down[0].shape
    if up[0].shape != (i, h) or (h2, i2) != (h, i):
        raise InputError(f"read_nvfp4_experts: gate {gate[0].shape}, up {up[0].shape} and down {down[0].shape} do "
                         f"not form an MLP (expected gate/up [I, H] and down [H, I])")
    return NVFP4Experts(gate, up, down)
