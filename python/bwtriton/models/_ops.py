"""`torch.ops.bwtriton.moe_experts`: the MoE expert computation as a custom op, so torch.compile(fullgraph=True)
traces `MoEExperts` and CUDA graphs capture it. CUDA tensors run `kernels.moe.moe_experts`; CPU tensors run
`reference_experts` (float32 torch with the 'dequant' path's numerics)."""
from __future__ import annotations

from typing import Optional

import torch

from ..formats import QuantizedTensor
from ..kernels.moe import MoEWeights, moe_experts


def _weights(fmt, gu_d, gu_s, gu_g, dn_d, dn_s, dn_g, gu_b, dn_b, activation, alpha, limit) -> MoEWeights:
    return MoEWeights(fmt=fmt, gate_up_data=gu_d, gate_up_scales=gu_s, gate_up_global=gu_g, down_data=dn_d,
                      down_scales=dn_s, down_global=dn_g, gate_up_bias=gu_b, down_bias=dn_b, activation=activation,
                      swiglu_alpha=alpha, swiglu_limit=limit)


def dequantize_projection(data: torch.Tensor, scales: torch.Tensor, fmt: str) -> torch.Tensor:
    """e2m1 * block scale of expert weights [E, rows, K] in float32 (the per-tensor NVFP4 scale left out)."""
    e, rows, kh = data.shape
    scales = scales if fmt == "nvfp4" else scales.view(torch.float8_e8m0fnu)
    q = QuantizedTensor(data=data, scales=scales, scale_layout="plain", global_scale=None, format=fmt,
                        shape=(e, rows, 2 * kh))
    return q.dequantize(torch.float32)


def reference_experts(x: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
                      w: MoEWeights) -> torch.Tensor:
    """What the 'dequant' path computes, in float32 torch: per token and chosen expert, h = act(gate, up) of the
    bf16 x against the exact weights, rounded to bf16, then down, weighted, summed over the k experts."""
    i = w.intermediate
    gu = dequantize_projection(w.gate_up_data, w.gate_up_scales, w.fmt)[..., :w.hidden]
    gu = gu * torch.repeat_interleave(w.gate_up_global.float(), i, dim=1).unsqueeze(-1)
    dn = dequantize_projection(w.down_data, w.down_scales, w.fmt)[..., :i] * w.down_global.float().view(-1, 1, 1)
    out = torch.zeros(x.shape[0], w.hidden, dtype=torch.float32, device=x.device)
    xf = x.float()
    for e in range(w.num_experts):
        tok, slot = torch.where(top_k_index == e)
        if tok.numel() == 0:
            continue
        gate_up = xf[tok] @ gu[e].T
        if w.gate_up_bias is not None:
            gate_up = gate_up + w.gate_up_bias[e]
        g, u = gate_up[:, :i], gate_up[:, i:]
        if w.activation == "silu":
            h = torch.nn.functional.silu(g) * u
        else:
            g, u = g.clamp(max=w.swiglu_limit), u.clamp(-w.swiglu_limit, w.swiglu_limit)
            h = g * torch.sigmoid(w.swiglu_alpha * g) * (u + 1)
        y = h.bfloat16().float() @ dn[e].T
        if w.down_bias is not None:
            y = y + w.down_bias[e]
        out.index_add_(0, tok, y * top_k_weights[tok, slot].float().unsqueeze(-1))
    return out.to(torch.bfloat16)


@torch.library.custom_op("bwtriton::moe_experts", mutates_args=())
def moe_experts_op(x: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor, fmt: str,
                   gate_up_data: torch.Tensor, gate_up_scales: torch.Tensor, gate_up_global: torch.Tensor,
                   down_data: torch.Tensor, down_scales: torch.Tensor, down_global: torch.Tensor,
                   gate_up_bias: Optional[torch.Tensor], down_bias: Optional[torch.Tensor], activation: str,
                   swiglu_alpha: float, swiglu_limit: float, path: str) -> torch.Tensor:
    """bf16 [T, H]: the weighted sum of each token's top-k experts (see `kernels.moe.moe_experts`)."""
    w = _weights(fmt, gate_up_data, gate_up_scales, gate_up_global, down_data, down_scales, down_global,
                 gate_up_bias, down_bias, activation, swiglu_alpha, swiglu_limit)
    if x.is_cuda:
        return moe_experts(x, top_k_index, top_k_weights, w, path=path)
    return reference_experts(x, top_k_index, top_k_weights, w)


@moe_experts_op.register_fake
def _(x, top_k_index, top_k_weights, fmt, gate_up_data, gate_up_scales, gate_up_global, down_data, down_scales,
      down_global, gate_up_bias, down_bias, activation, swiglu_alpha, swiglu_limit, path):
    return x.new_empty(x.shape[0], down_data.shape[1], dtype=torch.bfloat16)
