"""bwtriton's kernels as PyTorch custom operators, so `torch.compile(fullgraph=True)` and CUDA graphs take them.

Registered under the `bwtriton` namespace (import this module, or `bwtriton.nn`, to register them):

* ``torch.ops.bwtriton.quantize_nvfp4(x, global_scale, blocked) -> (data, scales, global_scale)``
* ``torch.ops.bwtriton.nvfp4_matmul(a_data, a_scales, a_global_scale, b_data, b_scales, b_global_scale,
  scale_layout, out_dtype) -> Tensor``
* ``torch.ops.bwtriton.nvfp4_linear(x, w_data, w_scales, w_global_scale, bias, x_global_scale, scale_layout)
  -> Tensor`` (x may be batched [..., K])
* ``torch.ops.bwtriton.nvfp4_weight_only_linear(x, w_data, w_scales, w_global_scale, bias, scale_layout)
  -> Tensor`` (bf16 x kept as is, W4A16; x may be batched [..., K])
* ``torch.ops.bwtriton.matmul(a, b, out_dtype, a_scale, b_scale) -> Tensor``

A `QuantizedTensor` is not a tensor, so the ops take its fields (data, scales, global scale, scale layout);
`bwtriton.nn.NVFP4Linear` does that plumbing. Each op has a fake (meta) implementation giving the output's shape
and dtype without running anything, which is what torch.compile traces. On CUDA tensors the ops run bwtriton's
kernels; on CPU tensors they run the torch reference with the same numerics (dequantize, fp32 matmul), so a model
built from them also runs, traces and compiles on a machine without a GPU.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from .errors import InputError
from .formats import QuantizedTensor, blocked_shape, quantize_nvfp4 as _quantize_nvfp4_ref

__all__ = ["quantized_nvfp4", "reference_nvfp4_linear", "reference_nvfp4_weight_only_linear"]

_SCALE_LAYOUTS = ("plain", "blocked_128x4")


def quantized_nvfp4(data: torch.Tensor, scales: torch.Tensor, global_scale: torch.Tensor,
                    scale_layout: str) -> QuantizedTensor:
    """The `QuantizedTensor` [rows, K] that the ops' NVFP4 arguments describe (K = 2 * data.shape[-1])."""
    if scale_layout not in _SCALE_LAYOUTS:
        raise InputError(f"scale_layout must be one of {_SCALE_LAYOUTS}, got {scale_layout!r}")
    if data.dim() != 2:
        raise InputError(f"NVFP4 data must be 2-D [rows, K/2] uint8, got shape {tuple(data.shape)}")
    rows, half_k = data.shape
    return QuantizedTensor(data=data, scales=scales, scale_layout=scale_layout, global_scale=global_scale,
                           format="nvfp4", shape=(rows, 2 * half_k))


def reference_nvfp4_linear(x: torch.Tensor, w_q: QuantizedTensor, bias: Optional[torch.Tensor],
                           x_global_scale: Optional[float]) -> torch.Tensor:
    """What `kernels.nvfp4_linear` computes, in torch: quantize x to NVFP4, dequantize both, fp32 matmul, bias,
    bf16. The kernels accumulate in fp32 in another order, so they agree to fp32 rounding, not bit for bit."""
    x_q = _quantize_nvfp4_ref(x.float(), global_scale=x_global_scale)
    out = x_q.dequantize(torch.float32) @ w_q.dequantize(torch.float32).T
    if bias is not None:
        out = out + bias.float()
    return out.to(torch.bfloat16)


def reference_nvfp4_weight_only_linear(x: torch.Tensor, w_q: QuantizedTensor,
                                       bias: Optional[torch.Tensor]) -> torch.Tensor:
    """What `kernels.nvfp4_decode_matmul` computes (plus bias), in torch: x kept bf16, the weight decoded exactly to
    e2m1 * e4m3 in fp32 (a product of a 2-bit and a 4-bit mantissa: exact), fp32 matmul, times the global scale
    (the kernels' epilogue alpha), bias added in fp32, one rounding to bf16."""
    w = dataclasses.replace(w_q, global_scale=None).dequantize(torch.float32)
    out = (x.float() @ w.T) * w_q.global_scale.float()
    if bias is not None:
        out = out + bias.float()
    return out.to(torch.bfloat16)


# ------------------------------------------------------------------------------------------- quantize_nvfp4
@torch.library.custom_op("bwtriton::quantize_nvfp4", mutates_args=())
def quantize_nvfp4(x: torch.Tensor, global_scale: Optional[torch.Tensor] = None,
                   blocked: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(data uint8 [..., K/2], scales fp8e4m3 (plain [..., K/16] or 128x4-blocked), global decode scale fp32 [])
    of x quantized to NVFP4 along its last dim, as `bwtriton.formats.quantize_nvfp4`."""
    q = _quantize_nvfp4_ref(x, global_scale=global_scale, blocked=blocked)
    return q.data, q.scales, q.global_scale.reshape(()).clone()


@quantize_nvfp4.register_fake
def _(x, global_scale=None, blocked=False):
    k = x.shape[-1]
    data = x.new_empty((*x.shape[:-1], k // 2), dtype=torch.uint8)
    if blocked:
        rows = 1
        for d in x.shape[:-1]:
            rows *= d
        scale_shape = blocked_shape(rows, k // 16)
    else:
        scale_shape = (*x.shape[:-1], k // 16)
    return data, x.new_empty(scale_shape, dtype=torch.float8_e4m3fn), x.new_empty((), dtype=torch.float32)


# --------------------------------------------------------------------------------------------- nvfp4_matmul
@torch.library.custom_op("bwtriton::nvfp4_matmul", mutates_args=())
def nvfp4_matmul(a_data: torch.Tensor, a_scales: torch.Tensor, a_global_scale: torch.Tensor,
                 b_data: torch.Tensor, b_scales: torch.Tensor, b_global_scale: torch.Tensor,
                 scale_layout: str = "plain", out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """dequant(A)[M, K] @ dequant(B)[N, K]^T for NVFP4 operands given by their fields (see `quantized_nvfp4`)."""
    a_q = quantized_nvfp4(a_data, a_scales, a_global_scale, scale_layout)
    b_q = quantized_nvfp4(b_data, b_scales, b_global_scale, scale_layout)
    if a_data.is_cuda:
        from .kernels import nvfp4_matmul as kernel  # heavy: imports Triton
        return kernel(a_q, b_q, out_dtype=out_dtype)
    return (a_q.dequantize(torch.float32) @ b_q.dequantize(torch.float32).T).to(out_dtype)


@nvfp4_matmul.register_fake
def _(a_data, a_scales, a_global_scale, b_data, b_scales, b_global_scale, scale_layout="plain",
      out_dtype=torch.bfloat16):
    return a_data.new_empty((a_data.shape[0], b_data.shape[0]), dtype=out_dtype)


# --------------------------------------------------------------------------------------------- nvfp4_linear
@torch.library.custom_op("bwtriton::nvfp4_linear", mutates_args=())
def nvfp4_linear(x: torch.Tensor, w_data: torch.Tensor, w_scales: torch.Tensor, w_global_scale: torch.Tensor,
                 bias: Optional[torch.Tensor] = None, x_global_scale: Optional[float] = None,
                 scale_layout: str = "plain") -> torch.Tensor:
    """bf16 [..., N] = quant_nvfp4(x)[..., K] @ dequant(W)[N, K]^T + bias, as `bwtriton.kernels.nvfp4_linear`."""
    w_q = quantized_nvfp4(w_data, w_scales, w_global_scale, scale_layout)
    x2 = x.reshape(-1, x.shape[-1])
    if x.is_cuda:
        from .kernels import nvfp4_linear as kernel  # heavy: imports Triton
        out = kernel(x2.contiguous(), w_q, bias, x_global_scale=x_global_scale)
    else:
        out = reference_nvfp4_linear(x2, w_q, bias, x_global_scale)
    return out.reshape(*x.shape[:-1], w_data.shape[0])


@nvfp4_linear.register_fake
def _(x, w_data, w_scales, w_global_scale, bias=None, x_global_scale=None, scale_layout="plain"):
    return x.new_empty((*x.shape[:-1], w_data.shape[0]), dtype=torch.bfloat16)


# --------------------------------------------------------------------------------- nvfp4_weight_only_linear
@torch.library.custom_op("bwtriton::nvfp4_weight_only_linear", mutates_args=())
def nvfp4_weight_only_linear(x: torch.Tensor, w_data: torch.Tensor, w_scales: torch.Tensor,
                             w_global_scale: torch.Tensor, bias: Optional[torch.Tensor] = None,
                             scale_layout: str = "plain") -> torch.Tensor:
    """bf16 [..., N] = x[..., K] @ dequant(W)[N, K]^T + bias with x kept bf16 (weight-only NVFP4), as
    `bwtriton.kernels.nvfp4_decode_matmul` plus the bias (added to its bf16 output on CUDA)."""
    w_q = quantized_nvfp4(w_data, w_scales, w_global_scale, scale_layout)
    x2 = x.reshape(-1, x.shape[-1])
    if x.is_cuda:
        from .kernels import nvfp4_decode_matmul as kernel  # heavy: imports Triton
        out = kernel(x2.contiguous(), w_q)
        if bias is not None:
            out = out.add_(bias)
    else:
        out = reference_nvfp4_weight_only_linear(x2, w_q, bias)
    return out.reshape(*x.shape[:-1], w_data.shape[0])


@nvfp4_weight_only_linear.register_fake
def _(x, w_data, w_scales, w_global_scale, bias=None, scale_layout="plain"):
    return x.new_empty((*x.shape[:-1], w_data.shape[0]), dtype=torch.bfloat16)


# --------------------------------------------------------------------------------------------------- matmul
def _matmul_out_dtype(a: torch.Tensor, out_dtype: Optional[torch.dtype]) -> torch.dtype:
    if out_dtype is not None:
        return out_dtype
    return torch.bfloat16 if a.dtype == torch.float8_e4m3fn else a.dtype


@torch.library.custom_op("bwtriton::matmul", mutates_args=())
def matmul(a: torch.Tensor, b: torch.Tensor, out_dtype: Optional[torch.dtype] = None,
           a_scale: Optional[torch.Tensor] = None, b_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
    """A[M, K] @ B[K, N] (bf16/fp16, or fp8 e4m3 with optional fp32 scales), as `bwtriton.kernels.matmul`."""
    if a.is_cuda:
        from .kernels import matmul as kernel  # heavy: imports Triton
        out = kernel(a, b, out_dtype=out_dtype, a_scale=a_scale, b_scale=b_scale)
        # A result whose rows are not 16-byte multiples is a column slice of a padded buffer; the op promises
        # a contiguous tensor (what its fake says), so copy in that rare case.
        return out if out.is_contiguous() else out.contiguous()
    out = a.float() @ b.float()
    if a_scale is not None:
        out = out * a_scale.float().reshape(-1, 1) if a_scale.numel() > 1 else out * a_scale.float()
    if b_scale is not None:
        out = out * b_scale.float().reshape(1, -1) if b_scale.numel() > 1 else out * b_scale.float()
    return out.to(_matmul_out_dtype(a, out_dtype))


@matmul.register_fake
def _(a, b, out_dtype=None, a_scale=None, b_scale=None):
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise InputError(f"bwtriton::matmul: needs a [M, K] and b [K, N], got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    return a.new_empty((a.shape[0], b.shape[1]), dtype=_matmul_out_dtype(a, out_dtype))
