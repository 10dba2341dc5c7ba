"""`NVFP4Linear`: a drop-in `torch.nn.Linear` replacement whose weight is stored in NVFP4 (4.5 bits per weight).

    layer = NVFP4Linear.from_linear(linear)          # quantizes linear.weight once
    y = layer(x)                                     # bf16 x [..., in] -> bf16 [..., out]
    layer = NVFP4Linear.from_linear(linear, activations="bf16")   # weight-only (W4A16)

With activations="nvfp4" (W4A4, the default) the forward pass is the `bwtriton::nvfp4_linear` custom op
(`bwtriton.torch_ops`): the activations are quantized to NVFP4 on the fly and multiplied with the stored weight,
fused in one kernel on the GPU (or the torch reference on CPU). With activations="bf16" it is
`bwtriton::nvfp4_weight_only_linear`: x stays bf16 and meets the dequantized weight in the weight-only kernels
(`kernels.nvfp4_decode_matmul`), the faster and more accurate mode for decode (small M), where the GEMM is bound
by reading the weight. The layer compiles under `torch.compile(fullgraph=True)` and replays in CUDA graphs. Its
state (weight bytes, scales, global scale, bias, the scale layout, the activations mode and the activations'
calibrated scale) round-trips through `state_dict()` / `load_state_dict()`.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from . import torch_ops  # noqa: F401  (registers torch.ops.bwtriton.*)
from .errors import InputError
from .formats import QuantizedTensor, blocked_shape, quantize_nvfp4

__all__ = ["NVFP4Linear"]

#: Feature sizes the NVFP4 linear kernels tile without masks: N (out) by 64, K (in) by 128.
OUT_MULTIPLE, IN_MULTIPLE = 64, 128
#: K (in) multiple the weight-only kernels (`kernels.nvfp4_decode_matmul`) need.
WEIGHT_ONLY_IN_MULTIPLE = 256
#: The `activations` modes: quantized to NVFP4 per call (W4A4) or kept bf16 (weight-only, W4A16).
ACTIVATIONS = ("nvfp4", "bf16")
#: Call signatures per layer whose kernel plans the eager forward keeps (`NVFP4Linear._remember_fast_call`).
_MAX_FAST_CALLS = 16


class NVFP4Linear(torch.nn.Module):
    """y = act(x) @ dequant(W)^T + b with W [out_features, in_features] stored as NVFP4.

    `activations`: "nvfp4" (default, W4A4): act(x) = quant_nvfp4(x), quantized per call; "bf16" (weight-only,
    W4A16): act(x) = x, kept bf16, through the weight-only kernels (faster at decode batch sizes, no activation
    quantization error; needs in_features % 256 == 0). Buffers: `weight_data` (uint8 [out, in/2]),
    `weight_scales` (float8_e4m3fn, plain [out, in/16] or 128x4 blocked), `weight_global_scale` (fp32 []),
    `bias` (bf16 [out] or None). `x_global_scale` (float or None, "nvfp4" mode only) fixes the activations' global
    decode scale (amax / 2688 from calibration); None derives it from each input's amax.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, scale_layout: str = "plain",
                 x_global_scale: Optional[float] = None, activations: str = "nvfp4",
                 device: "torch.device | str | None" = None):
        super().__init__()
        _check_features(in_features, out_features)
        if scale_layout not in ("plain", "blocked_128x4"):
            raise InputError(f"NVFP4Linear: scale_layout must be 'plain' or 'blocked_128x4', got {scale_layout!r}")
        _check_activations(activations, in_features, x_global_scale)
        self.in_features, self.out_features = in_features, out_features
        self.scale_layout = scale_layout
        self.activations = activations
        self.x_global_scale = None if x_global_scale is None else float(x_global_scale)
        n_kb = in_features // 16
        scale_shape = (out_features, n_kb) if scale_layout == "plain" else blocked_shape(out_features, n_kb)
        self.register_buffer("weight_data", torch.zeros(out_features, in_features // 2, dtype=torch.uint8,
                                                        device=device))
        self.register_buffer("weight_scales", torch.zeros(scale_shape, dtype=torch.float8_e4m3fn, device=device))
        self.register_buffer("weight_global_scale", torch.ones((), dtype=torch.float32, device=device))
        self.register_buffer("bias", torch.zeros(out_features, dtype=torch.bfloat16, device=device) if bias else None)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, *, scale_layout: str = "plain",
                    x_global_scale: Optional[float] = None, activations: str = "nvfp4") -> "NVFP4Linear":
        """An NVFP4Linear with `linear`'s weight quantized once (on the weight's device) and its bias in bf16."""
        if not isinstance(linear, torch.nn.Linear):
            raise InputError(f"NVFP4Linear.from_linear takes a torch.nn.Linear, got {type(linear).__name__}")
        weight = linear.weight.detach()
        layer = cls(linear.in_features, linear.out_features, bias=linear.bias is not None,
                    scale_layout=scale_layout, x_global_scale=x_global_scale, activations=activations,
                    device=weight.device)
        q = quantize_nvfp4(weight.float(), blocked=scale_layout == "blocked_128x4")
        layer.weight_data.copy_(q.data)
        layer.weight_scales.copy_(q.scales)
        layer.weight_global_scale.copy_(q.global_scale.reshape(()))
        if linear.bias is not None:
            layer.bias.copy_(linear.bias.detach().to(torch.bfloat16))
        return layer

    @property
    def weight_q(self) -> QuantizedTensor:
        """The stored weight as a `QuantizedTensor` (views of the buffers, no copy)."""
        return QuantizedTensor(data=self.weight_data, scales=self.weight_scales, scale_layout=self.scale_layout,
                               global_scale=self.weight_global_scale, format="nvfp4",
                               shape=(self.out_features, self.in_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():  # traced code must not read data pointers or hold plans
            fast = self.__dict__.get("_fast_calls")
            hit = None if fast is None else fast.get(self._call_signature(x))
            if hit is not None:
                return hit[0](x)
        if x.shape[-1] != self.in_features:
            raise InputError(f"NVFP4Linear: input has {x.shape[-1]} features in its last dim, the layer takes "
                             f"{self.in_features}")
        if x.dtype != torch.bfloat16:
            raise InputError(f"NVFP4Linear: input must be bfloat16, got {x.dtype}; convert with "
                             f"x.to(torch.bfloat16) (the layer's output is bf16 too)")
        if _runs_kernels(x):
            return self._forward_cuda(x)
        if self.activations == "bf16":
            return torch.ops.bwtriton.nvfp4_weight_only_linear(x, self.weight_data, self.weight_scales,
                                                               self.weight_global_scale, self.bias, self.scale_layout)
        return torch.ops.bwtriton.nvfp4_linear(x, self.weight_data, self.weight_scales, self.weight_global_scale,
                                               self.bias, self.x_global_scale, self.scale_layout)

    def _forward_cuda(self, x: torch.Tensor) -> torch.Tensor:
        """The custom op's GPU branch called directly (eager mode): the op's dispatch and the QuantizedTensor it
        builds per call are host time a layer pays on every token, ~10 us against a few for the kernel's plan. The
        weight wrapper is kept until a buffer is replaced (`.to()`, `load_state_dict(assign=True)`)."""
        from .kernels import nvfp4_decode_matmul, nvfp4_linear  # heavy: imports Triton (nn must import without it)
        buffers = (self.weight_data, self.weight_scales, self.weight_global_scale)
        cached = self.__dict__.get("_weight_q_cache")
        if cached is None or any(a is not b for a, b in zip(cached[0], buffers)):
            cached = self.__dict__["_weight_q_cache"] = (buffers, self.weight_q)
            self.__dict__.pop("_fast_calls", None)  # plans of the replaced buffers: let them be freed
        x2 = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
        if not x2.is_contiguous():
            x2 = x2.contiguous()
        if self.activations == "bf16":
            out = nvfp4_decode_matmul(x2, cached[1])  # replays its plan for a known (weight, x) signature
            if self.bias is not None:
                out = out.add_(self.bias)
        else:
            out = nvfp4_linear(x2, cached[1], self.bias, x_global_scale=self.x_global_scale)
        if x2 is x and len(self.__dict__.get("_fast_calls", ())) < _MAX_FAST_CALLS:
            self._remember_fast_call(x, cached[1])
        return out if x.dim() == 2 else out.reshape(*x.shape[:-1], self.out_features)

    def _call_signature(self, x: torch.Tensor) -> tuple:
        """What the eager CUDA path's outcome depends on: x's shape, strides, dtype, device and 16-byte alignment,
        the buffers' identities (a missing one reads as the `_buffers` dict itself), the bias' signature, the
        x scale, the activations mode and the scale layout. Equal signatures take the same checks and plan."""
        b = self._buffers
        bias = b.get("bias", b)
        bias_sig = (bias.dtype, bias.device, bias.shape, bias.stride(), bias.data_ptr() % 16) \
            if isinstance(bias, torch.Tensor) else None
        return ((x.shape, x.stride(), x.dtype, x.device, x.data_ptr() % 16),
                (id(b.get("weight_data", b)), id(b.get("weight_scales", b)), id(b.get("weight_global_scale", b)),
                 id(bias), bias_sig),
                (self.x_global_scale, self.activations, self.scale_layout))

    def _remember_fast_call(self, x: torch.Tensor, w_q: QuantizedTensor) -> None:
        """Keep the kernel plan that served this 2-D contiguous x under its call signature, so the next forward of
        that signature skips the checks above and the kernel entry's own plan lookup (~5 us of a ~25 us call).
        Nothing is kept before the kernel made a plan (its first call tunes, or its plan cache is full). An entry
        holds `w_q`, hence the buffers, so the ids in its signature cannot name other tensors; entries of replaced
        buffers are dropped (here, when the weight wrapper is rebuilt, by `_apply` and when pickling). At most
        `_MAX_FAST_CALLS` signatures are kept: ever-new shapes keep taking the checked path."""
        from .kernels.decode import cached_plan as decode_plan  # noqa: PLC0415 - reason: imports Triton
        from .kernels.nvfp4_linear import cached_plan as linear_plan  # noqa: PLC0415 - reason: imports Triton
        bias, g = self.bias, self.x_global_scale
        if self.activations == "bf16":
            plan = decode_plan(x, w_q)
            run = plan if plan is None or bias is None else (lambda x: plan(x).add_(bias))
        else:
            plan = linear_plan(x, w_q, bias, g)
            run = None if plan is None else (lambda x: plan(x, w_q, bias, g))
        if run is None:
            return
        sig = self._call_signature(x)
        kept = {s: r for s, r in self.__dict__.get("_fast_calls", {}).items() if s[1] == sig[1]}  # same buffers
        kept[sig] = (run, w_q)  # w_q: keeps the buffers in the signature alive while the entry is
        self.__dict__["_fast_calls"] = kept

    def _apply(self, fn, recurse: bool = True):
        self.__dict__.pop("_fast_calls", None)  # the entries hold the old buffers, which must be freeable
        return super()._apply(fn, recurse)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.pop("_fast_calls", None)  # closures over plans: neither picklable nor meaningful in a copy
        return state

    def get_extra_state(self) -> dict[str, Any]:
        return {"scale_layout": self.scale_layout, "x_global_scale": self.x_global_scale,
                "activations": self.activations}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        if state["scale_layout"] != self.scale_layout:
            raise InputError(f"NVFP4Linear: the state_dict was saved with scale_layout={state['scale_layout']!r} "
                             f"but this layer uses {self.scale_layout!r}; construct it with "
                             f"scale_layout={state['scale_layout']!r}")
        activations = state.get("activations", "nvfp4")  # a state saved before the mode existed was W4A4
        _check_activations(activations, self.in_features, state["x_global_scale"])
        self.x_global_scale = state["x_global_scale"]
        self.activations = activations

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"scale_layout={self.scale_layout}, activations={self.activations}, "
                f"x_global_scale={self.x_global_scale}")


def _runs_kernels(x: torch.Tensor) -> bool:
    """Whether the eager forward calls the kernels directly (`_forward_cuda`): a CUDA x outside torch.compile."""
    return x.is_cuda and not torch.compiler.is_compiling()


def _check_activations(activations: str, in_features: int, x_global_scale: Optional[float]) -> None:
    if activations not in ACTIVATIONS:
        raise InputError(f"NVFP4Linear: activations must be 'nvfp4' (quantized per call, W4A4) or 'bf16' "
                         f"(weight-only, W4A16), got {activations!r}")
    if activations == "bf16" and in_features % WEIGHT_ONLY_IN_MULTIPLE:
        raise InputError(f"NVFP4Linear: activations='bf16' needs in_features % {WEIGHT_ONLY_IN_MULTIPLE} == 0 "
                         f"(the weight-only kernels' K tile), got {in_features}; use activations='nvfp4' or pad "
                         f"the layer")
    if activations == "bf16" and x_global_scale is not None:
        raise InputError("NVFP4Linear: x_global_scale calibrates quantized activations; with activations='bf16' "
                         "nothing is quantized: leave it None")


def _check_features(in_features: int, out_features: int) -> None:
    if in_features <= 0 or in_features % IN_MULTIPLE:
        raise InputError(f"NVFP4Linear: in_features={in_features} must be a positive multiple of {IN_MULTIPLE} "
                         f"(the kernels' K tile); pad the layer or keep it in bf16")
    if out_features <= 0 or out_features % OUT_MULTIPLE:
        raise InputError(f"NVFP4Linear: out_features={out_features} must be a positive multiple of "
                         f"{OUT_MULTIPLE} (the kernels' N tile); pad the layer or keep it in bf16")
