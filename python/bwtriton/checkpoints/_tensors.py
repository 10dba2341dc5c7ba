"""Lookup and validation of the tensors a checkpoint reader needs: every failure is an `InputError` that names
the tensor, what was expected and how to fix it, raised before anything is built."""
from __future__ import annotations

from typing import Mapping, Optional, Sequence

import torch

from ..errors import InputError

Tensors = Mapping[str, torch.Tensor]


def name_of(prefix: str, leaf: str) -> str:
    """'model.layers.0.mlp' + 'weight_scale' -> 'model.layers.0.mlp.weight_scale' (an empty prefix adds no dot)."""
    return f"{prefix}.{leaf}" if prefix else leaf


def take(tensors: Tensors, name: str, dtypes: Sequence[torch.dtype], layout: str) -> torch.Tensor:
    """tensors[name], checked to have one of `dtypes`; `layout` names the checkpoint layout for the message."""
    if name not in tensors:
        near = sorted(k for k in tensors if k.rsplit(".", 1)[0] == name.rsplit(".", 1)[0])
        hint = f"; tensors under that module: {near}" if near else ""
        raise InputError(f"{layout}: the checkpoint has no tensor '{name}'{hint}. Check the module prefix, or "
                         f"that the checkpoint really is in the {layout} layout")
    t = tensors[name]
    if t.dtype not in dtypes:
        want = " or ".join(str(d) for d in dtypes)
        raise InputError(f"{layout}: '{name}' is {t.dtype}, expected {want}; the file is not in the {layout} "
                         f"layout (or was converted on save): re-export it, or pick the reader of its layout")
    return t


def take_optional(tensors: Tensors, name: str, dtypes: Sequence[torch.dtype], layout: str) -> Optional[torch.Tensor]:
    """Like `take`, but None when the checkpoint has no such tensor."""
    return take(tensors, name, dtypes, layout) if name in tensors else None


def check_shape(t: torch.Tensor, name: str, expected: Sequence[int], layout: str, fix: str) -> None:
    """Raise InputError unless t.shape == expected."""
    if tuple(t.shape) != tuple(expected):
        raise InputError(f"{layout}: '{name}' has shape {tuple(t.shape)}, expected {tuple(expected)}; {fix}")


def scalar(t: torch.Tensor, name: str, layout: str) -> torch.Tensor:
    """A one-element tensor (shape [] or [1]) as a float32 0-d tensor, finite and positive."""
    if t.numel() != 1:
        raise InputError(f"{layout}: '{name}' must hold one per-tensor scale (shape [] or [1]), got shape "
                         f"{tuple(t.shape)}; per-channel global scales are not part of this layout")
    v = t.detach().float().reshape(())
    if not (torch.isfinite(v) and v > 0):
        raise InputError(f"{layout}: '{name}' = {v.item()} is not a positive finite scale; the checkpoint is "
                         f"corrupt or was quantized from a tensor with NaN/Inf")
    return v


def group_size(k_packed: int, n_scale_cols: int, name: str, layout: str, supported: int) -> int:
    """The quantization group size implied by K/2 packed bytes and the scale's column count; InputError unless it
    is `supported`."""
    k = 2 * k_packed
    if n_scale_cols == 0 or k % n_scale_cols:
        raise InputError(f"{layout}: '{name}' has {n_scale_cols} scale columns, which does not divide K={k}")
    g = k // n_scale_cols
    if g != supported:
        raise InputError(f"{layout}: '{name}' implies group size {g} (K={k}, {n_scale_cols} scales per row); "
                         f"this format needs group size {supported}. Re-quantize with group_size={supported}")
    return g
