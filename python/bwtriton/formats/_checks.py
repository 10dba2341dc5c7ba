"""Validation of quantizer inputs, shared by the NVFP4 and MX quantizers."""
from __future__ import annotations

import torch

from ..errors import InputError

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def check_quantizer_input(x: object, block: int, fmt: str) -> torch.Tensor:
    """Return `x` as a contiguous float32 tensor, or raise InputError naming the problem and the fix.

    Non-contiguous input is accepted (copied to contiguous): quantizing writes new tensors anyway."""
    if not isinstance(x, torch.Tensor):
        raise InputError(f"{fmt}: expected a torch.Tensor, got {type(x).__name__}")
    if x.is_complex():
        raise InputError(f"{fmt}: complex input ({x.dtype}) cannot be block-quantized; quantize x.real and "
                         f"x.imag separately")
    if x.dtype not in SUPPORTED_DTYPES:
        raise InputError(f"{fmt}: unsupported dtype {x.dtype}; pass float32, bfloat16 or float16 "
                         f"(e.g. x.float())")
    if x.device.type not in ("cpu", "cuda"):
        raise InputError(f"{fmt}: unsupported device '{x.device}'; move the tensor to 'cpu' or 'cuda'")
    if x.dim() == 0:
        raise InputError(f"{fmt}: expected at least 1-D input [..., K], got a scalar")
    k = x.shape[-1]
    if k == 0 or k % block != 0:
        raise InputError(f"{fmt}: the last dim K={k} must be a positive multiple of the block size {block}; "
                         f"pad K with zeros, e.g. torch.nn.functional.pad(x, (0, {(-k) % block or block}))")
    return x.contiguous().float()
