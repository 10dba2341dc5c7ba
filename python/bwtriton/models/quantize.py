"""`quantize_(model)`: swap a model's Linear layers for `NVFP4Linear` and its MoE expert modules for
`MoEExperts`, in place.

Expert modules are recognised by their parameters, as transformers (>= 5) stores them: `gate_up_proj` and
`down_proj` 3-D tensors, either [E, 2I, H] / [E, H, I] with gate rows then up rows and SiLU (Mixtral, Qwen2-MoE,
Qwen3-MoE...) or transposed [E, H, 2I] / [E, I, H] with interleaved gate/up columns, biases and the clamped
SwiGLU (gpt-oss, which has `alpha` and `limit`). The replacements keep the modules' forward signatures, hold no
Python state that changes per call and do no host synchronisation, so the converted model compiles with
torch.compile and replays in CUDA graphs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

import torch

from ..errors import InputError
from ..kernels.moe import N_MULTIPLE
from .moe import MoEExperts

__all__ = ["quantize_", "QuantizeReport", "experts_layout"]


@dataclass
class QuantizeReport:
    """What `quantize_` did: converted module names, and the ones kept in their dtype with the reason."""

    linear: list[str] = field(default_factory=list)
    experts: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExpertsLayout:
    """How an expert module stores its weights: transposed ([E, H, 2I]), interleaved gate/up, activation."""

    transposed: bool
    interleaved: bool
    activation: str


def experts_layout(module: torch.nn.Module) -> Optional[ExpertsLayout]:
    """The layout of a transformers-style expert module, or None when `module` is not one."""
    gu, dn = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
    if not (isinstance(gu, torch.Tensor) and isinstance(dn, torch.Tensor) and gu.dim() == 3 and dn.dim() == 3):
        return None
    e, a, b = gu.shape
    if dn.shape == (e, b, a // 2) and a % 2 == 0:
        transposed = False
    elif dn.shape == (e, b // 2, a) and b % 2 == 0:
        transposed = True
    else:
        return None
    gpt_oss = hasattr(module, "alpha") and hasattr(module, "limit")
    return ExpertsLayout(transposed=transposed, interleaved=gpt_oss, activation="swiglu_oai" if gpt_oss else "silu")


def _is_silu(module: torch.nn.Module) -> bool:
    act = getattr(module, "act_fn", None)
    return act is None or isinstance(act, torch.nn.SiLU) or type(act).__name__ in ("SiLUActivation", "SiLU")


def _convert_experts(module: torch.nn.Module, layout: ExpertsLayout, fmt: str, path: str) -> MoEExperts:
    gu, dn = module.gate_up_proj.detach(), module.down_proj.detach()
    if layout.transposed:
        gu, dn = gu.transpose(1, 2), dn.transpose(1, 2)
    gu_bias = getattr(module, "gate_up_proj_bias", None)
    if layout.interleaved:
        gu = torch.cat((gu[:, 0::2], gu[:, 1::2]), 1)
        if gu_bias is not None:
            gu_bias = torch.cat((gu_bias[:, 0::2], gu_bias[:, 1::2]), 1)
    kwargs = dict(activation=layout.activation, gate_up_bias=None if gu_bias is None else gu_bias.detach(),
                  down_bias=None if getattr(module, "down_proj_bias", None) is None else module.down_proj_bias.detach())
    if layout.activation == "swiglu_oai":
        kwargs.update(swiglu_alpha=float(module.alpha), swiglu_limit=float(module.limit))
    return MoEExperts.from_dense(gu.contiguous(), dn.contiguous(), fmt, path=path, **kwargs)


def _linear_reason(name: str, linear: torch.nn.Linear, skip: Iterable[str], activations: str) -> Optional[str]:
    """Why `linear` stays as it is, or None to convert it."""
    from ..nn import IN_MULTIPLE, OUT_MULTIPLE, WEIGHT_ONLY_IN_MULTIPLE  # nn registers torch ops: load on use
    if any(name == s or name.endswith("." + s) for s in skip):
        return "skipped by name"
    in_multiple = WEIGHT_ONLY_IN_MULTIPLE if activations == "bf16" else IN_MULTIPLE
    if linear.in_features % in_multiple or linear.out_features % OUT_MULTIPLE:
        return (f"shape [{linear.out_features}, {linear.in_features}] does not tile (in % {in_multiple}, "
                f"out % {OUT_MULTIPLE})")
    return None


def _set_child(model: torch.nn.Module, name: str, new: torch.nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, new)


def quantize_(model: torch.nn.Module, *, linear: bool = True, experts_fmt: Optional[str] = "nvfp4",
              skip: Iterable[str] = ("lm_head",), scale_layout: str = "plain", path: str = "auto",
              activations: str = "nvfp4") -> QuantizeReport:
    """Convert `model` in place: each nn.Linear whose shape tiles (in % 128, out % 64) becomes an `NVFP4Linear`
    (NVFP4 weights; `activations` 'nvfp4': quantized on the fly (W4A4), 'bf16': kept bf16 (weight-only, W4A16,
    the faster mode for decode; in % 256)), each expert module a `MoEExperts` in `experts_fmt` ('nvfp4', 'mxfp4',
    or None to leave experts alone; `activations` does not change them). `skip`: module names (or name
    suffixes) to keep, by default the LM head. The model must be bf16 (the kernels' activation dtype). Returns a
    `QuantizeReport`."""
    from ..nn import ACTIVATIONS, NVFP4Linear  # bwtriton.nn registers torch ops; imported only when converting
    if experts_fmt not in (None, "nvfp4", "mxfp4"):
        raise InputError(f"quantize_: experts_fmt must be 'nvfp4', 'mxfp4' or None, got {experts_fmt!r}")
    if activations not in ACTIVATIONS:
        raise InputError(f"quantize_: activations must be 'nvfp4' (W4A4) or 'bf16' (weight-only W4A16), got "
                         f"{activations!r}")
    skip = tuple(skip)
    report = QuantizeReport()
    for name, module in list(model.named_modules()):
        layout = experts_layout(module) if experts_fmt else None
        if layout is not None:
            _check_bf16(name, module.gate_up_proj)
            _, hidden, inter = module.down_proj.shape  # [E, H, I]; transposed: [E, I, H]
            if layout.transposed:
                hidden, inter = inter, hidden
            if hidden % N_MULTIPLE or inter % N_MULTIPLE:
                report.kept[name] = f"expert sizes hidden={hidden}, intermediate={inter} are not multiples of " \
                                    f"{N_MULTIPLE}"
            elif not _is_silu(module):
                report.kept[name] = f"activation {type(module.act_fn).__name__} is not SiLU"
            else:
                _set_child(model, name, _convert_experts(module, layout, experts_fmt, path))
                report.experts.append(name)
        elif linear and isinstance(module, torch.nn.Linear):
            reason = _linear_reason(name, module, skip, activations)
            if reason is None:
                _check_bf16(name, module.weight)
                _set_child(model, name, NVFP4Linear.from_linear(module, scale_layout=scale_layout,
                                                                activations=activations))
                report.linear.append(name)
            else:
                report.kept[name] = reason
    return report


def _check_bf16(name: str, weight: torch.Tensor) -> None:
    if weight.dtype != torch.bfloat16:
        raise InputError(f"quantize_: '{name}' has {weight.dtype} weights; the quantized layers take bf16 "
                         f"activations: convert the model first with model.to(torch.bfloat16)")
