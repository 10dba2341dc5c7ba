"""What a user would run instead of bwtriton's NVFP4 layers, built on the benchmark's own weights:

* `bf16_linear`: `torch.nn.functional.linear` on the bf16 weight (cuBLAS) -- the layer before quantization.
* gemlite (pip `gemlite`, pure Triton, the low-bit library a Triton user reaches for): `gemlite_int4` (weight-only
  int4, asymmetric, group 128, bf16 activations: 4.25 bits per weight, the closest byte count to NVFP4's 4.5),
  `gemlite_nvfp4` (its weight-only NVFP4 path, fed our codes and scales) and `gemlite_nvfp4_w4a4` (its dynamic
  NVFP4-activation path). Each builder returns a callable x -> y, or raises where that gemlite path does not
  run here; the harness reports that peer as unavailable and keeps the row.

gemlite is optional (`GEMLITE_ERROR` says why it is missing). On an H200 its packaged tuning table for the H100
(same sm_90 SM) is loaded, since gemlite keys its tables on the device name and ships none for the H200.
"""
from __future__ import annotations

import os
from typing import Callable

import torch

GEMLITE_ERROR = ""
try:
    import gemlite
    from gemlite import helper as _gl_helper
except Exception as exc:  # noqa: BLE001 - optional peer
    gemlite = None
    GEMLITE_ERROR = f"{type(exc).__name__}: {exc}"[:120]

_CONFIG_LOADED = False


def _gemlite() -> object:
    """The gemlite module with a Hopper tuning table loaded; raises when gemlite is not importable."""
    global _CONFIG_LOADED
    if gemlite is None:
        raise RuntimeError(f"gemlite unavailable ({GEMLITE_ERROR})")
    if not _CONFIG_LOADED:
        name = torch.cuda.get_device_properties(0).name.lower()
        if "h200" in name:
            path = os.path.join(os.path.dirname(gemlite.__file__), "configs", "h100.json")
            if os.path.exists(path):
                gemlite.load_config(path)
        _CONFIG_LOADED = True
    return gemlite


def bf16_linear(w_bf16: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """x -> F.linear(x, w_bf16) (cuBLAS)."""
    return lambda x: torch.nn.functional.linear(x, w_bf16)


def gemlite_int4(w: torch.Tensor, group: int = 128) -> Callable[[torch.Tensor], torch.Tensor]:
    """gemlite's weight-only int4 layer (asymmetric min/max quantization per group of `group`) for weight w
    [N, K] (float); bf16 activations."""
    _gemlite()
    n, k = w.shape
    g = w.float().reshape(n, k // group, group)
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp_min(1e-8)
    zero = (-lo / scale).round()
    q = (g / scale + zero).round().clamp(0, 15).to(torch.uint8).reshape(n, k)
    layer = _gl_helper.A16Wn(device=w.device, dtype=torch.bfloat16).from_weights(
        q, scale.reshape(n, -1).to(torch.bfloat16), zero.reshape(n, -1).to(torch.bfloat16), W_nbits=4,
        group_size=group)
    return layer


def gemlite_nvfp4(w_q) -> Callable[[torch.Tensor], torch.Tensor]:
    """gemlite's weight-only NVFP4 layer on our codes ([N, K/2], low nibble first) and UE4M3 scales."""
    _gemlite()
    layer = _gl_helper.A16W4_NVFP(device=w_q.data.device, dtype=torch.bfloat16).from_packed_weights(
        w_q.data, scales=w_q.scales.view(torch.uint8), meta_scale=1.0 / w_q.global_scale.float())
    return layer


def gemlite_nvfp4_w4a4(w_q) -> Callable[[torch.Tensor], torch.Tensor]:
    """gemlite's NVFP4-weight, dynamically NVFP4-quantized-activation layer (W4A4) on our codes and scales."""
    _gemlite()
    layer = _gl_helper.A4W4_NVFP_dynamic(device=w_q.data.device, dtype=torch.bfloat16).from_packed_weights(
        w_q.data, scales=w_q.scales.view(torch.uint8), meta_scale=1.0 / w_q.global_scale.float())
    return layer
