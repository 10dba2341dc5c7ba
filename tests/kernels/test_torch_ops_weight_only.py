"""`bwtriton.nn.NVFP4Linear(activations="bf16")` (weight-only NVFP4, W4A16) and its custom op
`bwtriton::nvfp4_weight_only_linear`.

The reference is computed here in float64 from the stored bytes, without the package's dequantizer: e2m1 codes
decoded from a table, scales read as fp8 e4m3 -> float64, y = x @ W^T * global_scale + b. x (bf16 -> fp32) and
the decoded weight (e2m1 * e4m3: at most 5 significant bits) are exact in the kernels, so the only errors are the
fp32 accumulation (at most K * 2^-24 * sum|x||W|, plus two fp32 roundings for the global scale and the bias) and
the bf16 output rounding (round to nearest, 8 significant bits: at most 2^-8 * |y|). The CUDA path with a bias
rounds to bf16 twice (the matmul result, then its sum with the bias): 2^-8 * (|x @ W^T| + |y|).
"""
from __future__ import annotations

import pytest
import torch

from bwtriton import nn as bnn
from bwtriton.errors import InputError

_E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
_OPCHECK_UTILS = ("test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic")


def _weight_f64(layer: bnn.NVFP4Linear) -> torch.Tensor:
    """dequant(W) [out, in] in float64 from the layer's bytes: low nibble first, bit 3 the sign."""
    data = layer.weight_data.cpu().to(torch.int64)
    codes = torch.stack((data & 0xF, data >> 4), -1).reshape(layer.out_features, layer.in_features)
    values = _E2M1[codes & 7] * torch.where(codes >= 8, -1.0, 1.0).double()
    scales = layer.weight_q.to_plain().scales.cpu().double()  # blocked: the package's permutation back to rows
    w = values.reshape(layer.out_features, -1, 16) * scales.unsqueeze(-1)
    return w.reshape(layer.out_features, layer.in_features) * layer.weight_global_scale.double().cpu()


def _reference(layer: bnn.NVFP4Linear, x: torch.Tensor,
               bf16_roundings: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(float64 x @ W^T + b, per-element error bound) for fp32 accumulation and `bf16_roundings` bf16 roundings
    (see the module docstring)."""
    w = _weight_f64(layer)
    xd = x.cpu().double().reshape(-1, layer.in_features)
    prod = xd @ w.T
    y = prod + (0 if layer.bias is None else layer.bias.cpu().double())
    accum = (layer.in_features + 2) * 2.0 ** -24 * (xd.abs() @ w.abs().T + y.abs())
    tol = 2.0 ** -8 * (y.abs() + (prod.abs() if bf16_roundings == 2 else 0)) + accum + 1e-30
    return y.reshape(*x.shape[:-1], -1), tol.reshape(*x.shape[:-1], -1)


def _assert_matches(out: torch.Tensor, ref: torch.Tensor, tol: torch.Tensor) -> None:
    assert out.dtype == torch.bfloat16 and out.shape == ref.shape
    err = (out.cpu().double() - ref).abs()
    worst = (err / tol).max().item()
    assert worst <= 1.0, f"error {worst:.2f}x the bf16 rounding bound (max abs err {err.max().item():.3g})"


def _layer(in_f=512, out_f=128, bias=True, device="cpu", **kw) -> bnn.NVFP4Linear:
    torch.manual_seed(0)
    lin = torch.nn.Linear(in_f, out_f, bias=bias, device=device).bfloat16()
    return bnn.NVFP4Linear.from_linear(lin, activations="bf16", **kw)


@pytest.mark.parametrize("scale_layout", ["plain", "blocked_128x4"])
@pytest.mark.parametrize("bias", [True, False])
def test_weight_only_equals_float64_reference(scale_layout, bias):
    layer = _layer(bias=bias, scale_layout=scale_layout)
    x = torch.randn(2, 3, 512).bfloat16()
    _assert_matches(layer(x), *_reference(layer, x))


def test_weight_only_is_not_the_w4a4_result():
    """The mode changes the math: W4A4 quantizes x, so its result leaves the bf16 rounding bound."""
    layer = _layer()
    w4a4 = bnn.NVFP4Linear(512, 128)
    w4a4.load_state_dict({**layer.state_dict(), "_extra_state": {**layer.get_extra_state(), "activations": "nvfp4"}})
    x = torch.randn(4, 512).bfloat16()
    ref, tol = _reference(layer, x)
    assert ((w4a4(x).double() - ref).abs() > tol).any()


def test_op_opcheck_and_fake_shapes():
    layer = _layer()
    x = torch.randn(3, 512).bfloat16()
    args = (x, layer.weight_data, layer.weight_scales, layer.weight_global_scale, layer.bias, "plain")
    torch.library.opcheck(torch.ops.bwtriton.nvfp4_weight_only_linear, args, test_utils=_OPCHECK_UTILS)
    with torch._subclasses.fake_tensor.FakeTensorMode(allow_non_fake_inputs=True):
        out = torch.ops.bwtriton.nvfp4_weight_only_linear(torch.empty(2, 5, 512, dtype=torch.bfloat16), *args[1:])
    assert out.shape == (2, 5, 128) and out.dtype == torch.bfloat16


def test_state_dict_round_trip_and_extra_repr():
    layer = _layer()
    assert "activations=bf16" in repr(layer)
    assert "activations=nvfp4" in repr(bnn.NVFP4Linear(512, 128))
    fresh = bnn.NVFP4Linear(512, 128)  # default W4A4: the saved mode is adopted
    fresh.load_state_dict(layer.state_dict())
    assert fresh.activations == "bf16"
    x = torch.randn(4, 512).bfloat16()
    assert torch.equal(fresh(x), layer(x))


def test_bad_activations_are_refused():
    with pytest.raises(InputError, match="activations must be 'nvfp4'"):
        bnn.NVFP4Linear(512, 128, activations="fp8")
    with pytest.raises(InputError, match="in_features % 256"):
        bnn.NVFP4Linear(384, 128, activations="bf16")
    with pytest.raises(InputError, match="leave it None"):
        _layer(x_global_scale=0.01)
    state = _layer().state_dict()
    state["_extra_state"] = {**state["_extra_state"], "activations": "int8"}
    with pytest.raises(InputError, match="activations must be"):
        bnn.NVFP4Linear(512, 128).load_state_dict(state)


def test_compile_fullgraph_on_cpu_matches_eager():
    torch.manual_seed(1)
    mlp = torch.nn.Sequential(bnn.NVFP4Linear.from_linear(torch.nn.Linear(512, 256), activations="bf16"),
                              torch.nn.ReLU(),
                              bnn.NVFP4Linear.from_linear(torch.nn.Linear(256, 512), activations="bf16"))
    x = torch.randn(4, 512).bfloat16()
    compiled = torch.compile(mlp, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x), mlp(x))


@pytest.mark.gpu
@pytest.mark.parametrize("scale_layout", ["plain", "blocked_128x4"])
@pytest.mark.parametrize("m", [1, 16, 64, 300])
def test_gpu_weight_only_matches_reference_and_op(m, scale_layout):
    """Eager CUDA forward (the kernel with the cached weight wrapper), the custom op on the same CUDA tensors and
    the replayed plan, each against the float64 reference. Not against each other: split-K sums in another fp32
    order, and the bias added after the kernel's bf16 rounding, can leave two correct results 2 bf16 roundings of
    |x @ W^T| apart, far more than one rounding of an output the bias nearly cancels."""
    layer = _layer(in_f=1024, out_f=512, device="cuda", scale_layout=scale_layout)
    x = torch.randn(m, 1024, device="cuda").bfloat16()
    ref = _reference(layer, x, bf16_roundings=2)
    _assert_matches(layer(x), *ref)
    op = torch.ops.bwtriton.nvfp4_weight_only_linear(x, layer.weight_data, layer.weight_scales,
                                                     layer.weight_global_scale, layer.bias, layer.scale_layout)
    _assert_matches(op, *ref)
    _assert_matches(layer(x), *ref)  # the replayed plan
