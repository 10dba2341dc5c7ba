"""`QuantizedTensor`: the container every block-scaled format returns."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import torch

from ..errors import InputError
from .e2m1 import e2m1_decode, unpack_e2m1
from .fp8 import e8m0_decode
from .layout import from_blocked_scales, to_blocked_scales

FORMATS = ("nvfp4", "mxfp4", "mxfp8_e4m3", "mxfp8_e5m2")
BLOCK_SIZE = {"nvfp4": 16, "mxfp4": 32, "mxfp8_e4m3": 32, "mxfp8_e5m2": 32}
SCALE_LAYOUTS = ("plain", "blocked_128x4")


@dataclass(frozen=True)
class QuantizedTensor:
    """A block-scaled tensor quantized along its last dim K.

    data:  nvfp4/mxfp4: uint8 [..., K/2], two E2M1 codes per byte, element 2i in the low nibble.
           mxfp8_*: torch.float8_e4m3fn / float8_e5m2 [..., K].
    scales: one per block of `block_size` elements along K.
           nvfp4: torch.float8_e4m3fn (UE4M3, sign bit always 0); mx*: torch.float8_e8m0fnu (UE8M0, 0xFF = NaN).
           `scales_u8` is the uint8 view that Triton kernels take (`tl.dot_scaled` wants uint8 for e8m0).
           "plain": shape[:-1] + (K/block,), i.e. [..., rows, K/block].
           "blocked_128x4": [..., ceil(rows/128), ceil(K/block/4), 32, 4, 4] (a 1-D input counts as one row),
           see `formats.layout`; `.flatten()` is the cuBLASLt / torch._scaled_mm byte order.
    global_scale: nvfp4 only: float32 0-d tensor, the global DECODE scale S_dec, so that
           x ~= e2m1(data) * float(scales) * global_scale. None for MX formats.
    global_encode_scale: nvfp4 only: S_enc with global_scale == float32(1 / S_enc); pass this to
           `bwtriton.language.quantize_nvfp4_tile` to reproduce the quantization bit-exactly in a kernel.
    format: one of "nvfp4", "mxfp4", "mxfp8_e4m3", "mxfp8_e5m2".
    shape: logical (unpacked) shape of the original tensor.
    """

    data: torch.Tensor
    scales: torch.Tensor
    scale_layout: str
    global_scale: Optional[torch.Tensor]
    format: str
    shape: tuple
    global_encode_scale: Optional[torch.Tensor] = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise InputError(f"unknown format '{self.format}'; expected one of {FORMATS}")
        if self.scale_layout not in SCALE_LAYOUTS:
            raise InputError(f"unknown scale_layout '{self.scale_layout}'; expected one of {SCALE_LAYOUTS}")

    @property
    def block_size(self) -> int:
        """Elements per scale along K: 16 for nvfp4, 32 for the MX formats."""
        return BLOCK_SIZE[self.format]

    @property
    def scales_u8(self) -> torch.Tensor:
        """The scales as raw uint8 bytes (same storage)."""
        return self.scales.view(torch.uint8)

    def _plain_dims(self) -> tuple[list[int], int, int]:
        shape = list(self.shape) if len(self.shape) > 1 else [1] + list(self.shape)
        return shape[:-2], shape[-2], shape[-1] // self.block_size

    def to_blocked(self) -> "QuantizedTensor":
        """A copy with the scales in the swizzled 128x4 layout (returns self if already blocked)."""
        if self.scale_layout == "blocked_128x4":
            return self
        batch, rows, n_kb = self._plain_dims()
        blocked = to_blocked_scales(self.scales.reshape(*batch, rows, n_kb))
        return dataclasses.replace(self, scales=blocked, scale_layout="blocked_128x4")

    def to_plain(self) -> "QuantizedTensor":
        """A copy with plain [..., rows, K/block] scales (returns self if already plain)."""
        if self.scale_layout == "plain":
            return self
        batch, rows, n_kb = self._plain_dims()
        plain = from_blocked_scales(self.scales, rows, n_kb)
        return dataclasses.replace(self, scales=plain.reshape(*self.shape[:-1], n_kb), scale_layout="plain")

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Decode to a dense tensor of the logical shape. Computed in float32 as (element * block_scale)
        [* global_scale], then cast to `dtype`."""
        scales = self.to_plain().scales
        if self.format in ("nvfp4", "mxfp4"):
            elements = e2m1_decode(unpack_e2m1(self.data))
        else:
            elements = self.data.float()
        scale_values = scales.float() if self.format == "nvfp4" else e8m0_decode(scales)
        n_kb = self.shape[-1] // self.block_size
        blocks = elements.reshape(*self.shape[:-1], n_kb, self.block_size) * scale_values.unsqueeze(-1)
        if self.global_scale is not None:
            blocks = blocks * self.global_scale.float()
        return blocks.reshape(self.shape).to(dtype)
