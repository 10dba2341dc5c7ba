"""`MoEExperts`: the experts of a mixture-of-experts layer with NVFP4 or MXFP4 weights, as a torch module.

    experts = MoEExperts.from_dense(gate_up, down, fmt="nvfp4")          # [E, 2I, H] and [E, H, I] float weights
    experts = MoEExperts.from_mxfp4_checkpoint(read_mxfp4_experts(...))   # gpt-oss checkpoint, bytes unchanged
    out = experts(hidden [T, H], top_k_index [T, k], top_k_weights [T, k])   # -> [T, H]

The forward signature is the one of transformers' expert modules (`MixtralExperts`, `Qwen2MoeExperts`,
`GptOssExperts`...), so `bwtriton.models.quantize_` can swap one for the other. On CUDA the forward is the
`bwtriton::moe_experts` custom op (`kernels.moe`; traced by torch.compile, captured by CUDA graphs); on CPU the
same op runs a float32 torch reference of the same numerics (the 'dequant' path: bf16 activations, exact
dequantized weights), which is what lets the CPU tests compile a model.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..errors import InputError
from ..formats import quantize_mxfp4, quantize_nvfp4
from ..kernels.moe import ACTIVATIONS, MoEWeights, pad_k
from . import _ops  # noqa: F401  (registers torch.ops.bwtriton.moe_experts)

__all__ = ["MoEExperts", "quantize_moe_weights"]

_VEC = {"nvfp4": 16, "mxfp4": 32}


def _quantize_rows(w: torch.Tensor, fmt: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(data, scales, global decode scale) of w [E, rows, K], K padded for the kernel (`pad_k`); nvfp4: one
    global scale per expert."""
    if fmt == "mxfp4":
        q = quantize_mxfp4(w.float())
        glob = torch.ones(w.shape[0], dtype=torch.float32, device=w.device)
        return (*pad_k(q.data, q.scales.view(torch.uint8)), glob)
    qs = [quantize_nvfp4(w[e].float()) for e in range(w.shape[0])]
    data, scales = pad_k(torch.stack([q.data for q in qs]), torch.stack([q.scales for q in qs]))
    return data, scales, torch.stack([q.global_scale.reshape(()) for q in qs])


def quantize_moe_weights(gate_up: torch.Tensor, down: torch.Tensor, fmt: str, *,
                         gate_up_bias: Optional[torch.Tensor] = None, down_bias: Optional[torch.Tensor] = None,
                         activation: str = "silu", swiglu_alpha: float = 1.702,
                         swiglu_limit: float = 7.0) -> MoEWeights:
    """Quantize float expert weights gate_up [E, 2I, H] (gate rows, then up rows) and down [E, H, I] along their
    input dim. NVFP4 gives the gate half, the up half and down their own per-expert global scale."""
    if fmt not in _VEC:
        raise InputError(f"quantize_moe_weights: fmt must be 'nvfp4' or 'mxfp4', got {fmt!r}")
    if gate_up.dim() != 3 or down.dim() != 3 or gate_up.shape[1] % 2 or \
            down.shape != (gate_up.shape[0], gate_up.shape[2], gate_up.shape[1] // 2):
        raise InputError(f"quantize_moe_weights: expected gate_up [E, 2I, H] and down [E, H, I], got "
                         f"{tuple(gate_up.shape)} and {tuple(down.shape)}")
    i = gate_up.shape[1] // 2
    gate = _quantize_rows(gate_up[:, :i], fmt)
    up = _quantize_rows(gate_up[:, i:], fmt)
    dn = _quantize_rows(down, fmt)
    return MoEWeights(fmt=fmt, gate_up_data=torch.cat((gate[0], up[0]), 1),
                      gate_up_scales=torch.cat((gate[1], up[1]), 1),
                      gate_up_global=torch.stack((gate[2], up[2]), 1).contiguous(), down_data=dn[0],
                      down_scales=dn[1], down_global=dn[2],
                      gate_up_bias=None if gate_up_bias is None else gate_up_bias.float().contiguous(),
                      down_bias=None if down_bias is None else down_bias.float().contiguous(),
                      activation=activation, swiglu_alpha=swiglu_alpha, swiglu_limit=swiglu_limit)


def _deinterleave(t: torch.Tensor) -> torch.Tensor:
    """Rows gate0, up0, gate1, up1 ... -> gate rows then up rows (dim 1). A row permutation: exact."""
    return torch.cat((t[:, 0::2], t[:, 1::2]), 1).contiguous()


class MoEExperts(torch.nn.Module):
    """Experts of an MoE layer in NVFP4 / MXFP4; forward(hidden [T, H], top_k_index [T, k], top_k_weights [T, k]).

    Buffers: gate_up_data uint8 [E, 2I, Hp/2], gate_up_scales [E, 2I, Hp/vec], gate_up_global fp32 [E, 2],
    down_data [E, H, Ip/2], down_scales [E, H, Ip/vec], down_global fp32 [E] (Hp, Ip: H, I padded with zeros to
    `kernels.moe.K_TILE`), optional fp32 biases
    gate_up_bias [E, 2I] and down_bias [E, H]. Scales are float8_e4m3fn (nvfp4) or uint8 UE8M0 (mxfp4)."""

    def __init__(self, weights: MoEWeights, path: str = "auto"):
        super().__init__()
        if weights.activation not in ACTIVATIONS:
            raise InputError(f"MoEExperts: activation must be one of {ACTIVATIONS}, got {weights.activation!r}")
        self.fmt, self.activation, self.path = weights.fmt, weights.activation, path
        self.swiglu_alpha, self.swiglu_limit = float(weights.swiglu_alpha), float(weights.swiglu_limit)
        for name in ("gate_up_data", "gate_up_scales", "gate_up_global", "down_data", "down_scales", "down_global",
                     "gate_up_bias", "down_bias"):
            self.register_buffer(name, getattr(weights, name))
        self.num_experts, self.hidden_size = weights.num_experts, weights.hidden
        self.intermediate_size = weights.intermediate

    @classmethod
    def from_dense(cls, gate_up: torch.Tensor, down: torch.Tensor, fmt: str = "nvfp4", *, path: str = "auto",
                   **kwargs) -> "MoEExperts":
        """Quantize float weights gate_up [E, 2I, H] (gate rows first) and down [E, H, I]; kwargs as
        `quantize_moe_weights` (biases, activation)."""
        return cls(quantize_moe_weights(gate_up.detach(), down.detach(), fmt, **kwargs), path)

    @classmethod
    def from_mxfp4_checkpoint(cls, experts, *, activation: str = "swiglu_oai", swiglu_alpha: float = 1.702,
                              swiglu_limit: float = 7.0, path: str = "auto") -> "MoEExperts":
        """From `checkpoints.read_mxfp4_experts(...)` (gpt-oss): bytes and scales unchanged; gate/up rows
        de-interleaved (an exact row permutation) into the gate-then-up order the kernel reads."""
        gu, dn = experts.gate_up, experts.down
        order = _deinterleave if experts.gate_up_order == "interleaved" else (lambda t: t)
        ones = torch.ones(gu.shape[0], dtype=torch.float32, device=gu.data.device)
        gu_data, gu_scales = pad_k(order(gu.data), order(gu.scales.view(torch.uint8)))
        dn_data, dn_scales = pad_k(dn.data.contiguous(), dn.scales.view(torch.uint8).contiguous())
        w = MoEWeights(fmt="mxfp4", gate_up_data=gu_data, gate_up_scales=gu_scales,
                       gate_up_global=torch.stack((ones, ones), 1), down_data=dn_data,
                       down_scales=dn_scales, down_global=ones.clone(),
                       gate_up_bias=None if experts.gate_up_bias is None else order(experts.gate_up_bias),
                       down_bias=experts.down_bias, activation=activation, swiglu_alpha=swiglu_alpha,
                       swiglu_limit=swiglu_limit)
        return cls(w, path)

    @classmethod
    def from_nvfp4_checkpoint(cls, experts, *, path: str = "auto") -> "MoEExperts":
        """From `checkpoints.read_nvfp4_experts(...)`: bytes and block scales unchanged, each expert's gate, up and
        down decode scale kept (the gate and up halves of the fused projection keep their own)."""
        def stack(ws, what):
            return torch.stack([getattr(w, what) for w in ws]).contiguous()

        def glob(ws):
            return torch.stack([w.global_scale.reshape(()) for w in ws]).float()
        gu_data, gu_scales = pad_k(torch.cat((stack(experts.gate, "data"), stack(experts.up, "data")), 1),
                                   torch.cat((stack(experts.gate, "scales"), stack(experts.up, "scales")), 1))
        dn_data, dn_scales = pad_k(stack(experts.down, "data"), stack(experts.down, "scales"))
        w = MoEWeights(fmt="nvfp4", gate_up_data=gu_data, gate_up_scales=gu_scales,
                       gate_up_global=torch.stack((glob(experts.gate), glob(experts.up)), 1).contiguous(),
                       down_data=dn_data, down_scales=dn_scales, down_global=glob(experts.down))
        return cls(w, path)

    @property
    def weights(self) -> MoEWeights:
        """The buffers as the kernels' `MoEWeights` (no copy)."""
        return MoEWeights(fmt=self.fmt, gate_up_data=self.gate_up_data, gate_up_scales=self.gate_up_scales,
                          gate_up_global=self.gate_up_global, down_data=self.down_data, down_scales=self.down_scales,
                          down_global=self.down_global, gate_up_bias=self.gate_up_bias, down_bias=self.down_bias,
                          activation=self.activation, swiglu_alpha=self.swiglu_alpha, swiglu_limit=self.swiglu_limit)

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor) -> torch.Tensor:
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        out = torch.ops.bwtriton.moe_experts(
            x.to(torch.bfloat16), top_k_index.reshape(x.shape[0], -1), top_k_weights.reshape(x.shape[0], -1),
            self.fmt, self.gate_up_data, self.gate_up_scales, self.gate_up_global, self.down_data,
            self.down_scales, self.down_global, self.gate_up_bias, self.down_bias, self.activation,
            self.swiglu_alpha, self.swiglu_limit, self.path)
        return out.to(hidden_states.dtype).reshape(shape)

    def get_extra_state(self) -> dict:
        return {"fmt": self.fmt, "activation": self.activation, "swiglu_alpha": self.swiglu_alpha,
                "swiglu_limit": self.swiglu_limit}

    def set_extra_state(self, state: dict) -> None:
        for key in ("fmt", "activation"):
            if state[key] != getattr(self, key):
                raise InputError(f"MoEExperts: the state_dict was saved with {key}={state[key]!r} but this module "
                                 f"has {key}={getattr(self, key)!r}; build it the same way before loading")
        self.swiglu_alpha, self.swiglu_limit = float(state["swiglu_alpha"]), float(state["swiglu_limit"])

    def extra_repr(self) -> str:
        return (f"num_experts={self.num_experts}, hidden={self.hidden_size}, intermediate={self.intermediate_size}, "
                f"fmt={self.fmt}, activation={self.activation}, path={self.path}")
