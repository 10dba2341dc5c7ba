"""bwtriton's torch.library custom ops and `bwtriton.nn.NVFP4Linear`.

CPU: the ops' fake (meta) implementations agree with their real ones (torch.library.opcheck), trace under
FakeTensorMode and `torch.compile(fullgraph=True)` (aot_eager backend: no C++ compiler needed), and the layer's
state_dict round-trips. GPU: a small MLP built from these layers compiles with inductor and matches its bf16 twin.
"""
from __future__ import annotations

import pytest
import torch

from bwtriton import nn as bnn
from bwtriton import torch_ops
from bwtriton.errors import InputError
from bwtriton.formats import quantize_nvfp4

# Skip test_schema: its mutation check compares inputs with allclose, which CPU torch lacks for float8.
_OPCHECK_UTILS = ("test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic")


def _layer(in_f=256, out_f=128, bias=True, **kw):
    torch.manual_seed(0)
    return torch.nn.Linear(in_f, out_f, bias=bias), kw


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("blocked", [False, True])
def test_quantize_op_matches_formats_and_fake(blocked):
    x = torch.randn(130, 64)
    data, scales, gs = torch.ops.bwtriton.quantize_nvfp4(x, None, blocked)
    ref = quantize_nvfp4(x, blocked=blocked)
    assert torch.equal(data, ref.data)
    assert torch.equal(scales.view(torch.uint8), ref.scales.view(torch.uint8))
    assert gs.shape == () and gs.item() == ref.global_scale.item()
    torch.library.opcheck(torch.ops.bwtriton.quantize_nvfp4, (x, None, blocked), test_utils=_OPCHECK_UTILS)


def test_nvfp4_matmul_op_is_the_dequantized_product():
    a, b = quantize_nvfp4(torch.randn(64, 128)), quantize_nvfp4(torch.randn(96, 128))
    args = (a.data, a.scales, a.global_scale, b.data, b.scales, b.global_scale, "plain", torch.float32)
    out = torch.ops.bwtriton.nvfp4_matmul(*args)
    assert out.shape == (64, 96) and out.dtype == torch.float32
    torch.testing.assert_close(out, a.dequantize() @ b.dequantize().T)
    torch.library.opcheck(torch.ops.bwtriton.nvfp4_matmul, args, test_utils=_OPCHECK_UTILS)


def test_matmul_op_cpu_reference_and_fake():
    a, b = torch.randn(8, 16).bfloat16(), torch.randn(16, 24).bfloat16()
    out = torch.ops.bwtriton.matmul(a, b, None, None, None)
    assert out.dtype == torch.bfloat16 and out.shape == (8, 24)
    torch.testing.assert_close(out, (a.float() @ b.float()).bfloat16())
    torch.library.opcheck(torch.ops.bwtriton.matmul, (a, b, None, None, None))


def test_matmul_fake_rejects_mismatched_k():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        a, b = torch.empty(8, 16, dtype=torch.bfloat16), torch.empty(12, 24, dtype=torch.bfloat16)
        with pytest.raises(InputError, match=r"needs a \[M, K\] and b \[K, N\]"):
            torch.ops.bwtriton.matmul(a, b, None, None, None)


def test_linear_op_batched_shapes_under_fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    w = quantize_nvfp4(torch.randn(128, 256))
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty(2, 3, 256, dtype=torch.bfloat16)
        out = torch.ops.bwtriton.nvfp4_linear(x, w.data, w.scales, w.global_scale, None, None, "plain")
        assert out.shape == (2, 3, 128) and out.dtype == torch.bfloat16


def test_linear_op_opcheck_and_reference():
    lin, _ = _layer()
    w = quantize_nvfp4(lin.weight.detach())
    x = torch.randn(4, 256).bfloat16()
    bias = lin.bias.detach().bfloat16()
    args = (x, w.data, w.scales, w.global_scale, bias, None, "plain")
    out = torch.ops.bwtriton.nvfp4_linear(*args)
    # Same quantized operands and fp32 accumulation as the reference: equal up to the final bf16 rounding.
    torch.testing.assert_close(out, torch_ops.reference_nvfp4_linear(x, w, bias, None), rtol=2 ** -7, atol=0)
    torch.library.opcheck(torch.ops.bwtriton.nvfp4_linear, args, test_utils=_OPCHECK_UTILS)


def test_from_linear_quantizes_once_and_round_trips_state_dict():
    lin, _ = _layer()
    layer = bnn.NVFP4Linear.from_linear(lin, x_global_scale=0.01)
    ref = quantize_nvfp4(lin.weight.detach())
    assert torch.equal(layer.weight_data, ref.data) and torch.equal(layer.weight_global_scale, ref.global_scale)
    x = torch.randn(3, 256).bfloat16()
    y = layer(x)
    state = layer.state_dict()
    assert set(state) == {"weight_data", "weight_scales", "weight_global_scale", "bias", "_extra_state"}
    fresh = bnn.NVFP4Linear(256, 128)
    assert not torch.equal(fresh(x), y)  # an unloaded layer (zero weight) differs
    fresh.load_state_dict(state)
    assert fresh.x_global_scale == 0.01
    assert torch.equal(fresh(x), y)


def test_state_dict_with_other_scale_layout_is_refused():
    lin, _ = _layer()
    state = bnn.NVFP4Linear.from_linear(lin, scale_layout="blocked_128x4").state_dict()
    with pytest.raises(InputError, match="construct it with scale_layout='blocked_128x4'"):
        bnn.NVFP4Linear(256, 128).load_state_dict(state)


@pytest.mark.parametrize("in_f,out_f,match", [(200, 128, "in_features=200"), (256, 100, "out_features=100")])
def test_layer_rejects_untileable_sizes(in_f, out_f, match):
    with pytest.raises(InputError, match=match):
        bnn.NVFP4Linear(in_f, out_f)


def test_layer_rejects_wrong_input():
    layer = bnn.NVFP4Linear.from_linear(_layer()[0])
    with pytest.raises(InputError, match="bfloat16"):
        layer(torch.randn(2, 256))
    with pytest.raises(InputError, match="has 128 features"):
        layer(torch.randn(2, 128).bfloat16())
    with pytest.raises(InputError, match="torch.nn.Linear"):
        bnn.NVFP4Linear.from_linear(torch.nn.Conv1d(1, 1, 1))


def test_compile_fullgraph_on_cpu_matches_eager():
    torch.manual_seed(1)
    mlp = torch.nn.Sequential(bnn.NVFP4Linear.from_linear(torch.nn.Linear(256, 128)), torch.nn.ReLU(),
                              bnn.NVFP4Linear.from_linear(torch.nn.Linear(128, 256)))
    x = torch.randn(2, 5, 256).bfloat16()
    compiled = torch.compile(mlp, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x), mlp(x))


def _quant_rel_error(t: torch.Tensor) -> float:
    """RMS relative error NVFP4 quantization puts on `t` (measured, not assumed)."""
    return _rel(quantize_nvfp4(t.float()).dequantize(), t.float())


@pytest.mark.gpu
def test_mlp_compiles_and_matches_bf16_twin():
    """Tolerance: y = x W^T with both operands quantized, each with measured relative RMS error e_x, e_w; for
    independent rounding errors the product's relative error is ~sqrt(e_x^2 + e_w^2) per layer (errors add in
    quadrature), so two layers stay within 2 * sqrt(2) * max(e) plus bf16 rounding; we allow 1.5x that. A wrong
    scale (off by a factor) or a dropped block gives O(1) errors and fails."""
    torch.manual_seed(2)
    twin = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)).cuda()
    twin = twin.to(torch.bfloat16)
    mlp = torch.nn.Sequential(bnn.NVFP4Linear.from_linear(twin[0]), torch.nn.ReLU(),
                              bnn.NVFP4Linear.from_linear(twin[2]))
    x = torch.randn(16, 512, device="cuda").bfloat16()
    compiled = torch.compile(mlp, fullgraph=True)
    out = compiled(x)
    with torch.no_grad():
        ref = twin(x)
    torch.testing.assert_close(out, mlp(x), rtol=2 ** -6, atol=1e-3)  # compiled == eager (same kernels)
    e = max(_quant_rel_error(x), _quant_rel_error(twin[0].weight), _quant_rel_error(twin[2].weight))
    assert _rel(out, ref) < 1.5 * 2 * 2 ** 0.5 * e + 2 ** -7


@pytest.mark.gpu
def test_linear_op_under_cuda_graph_replay():
    torch.manual_seed(3)
    layer = bnn.NVFP4Linear.from_linear(torch.nn.Linear(256, 128).cuda(), x_global_scale=0.002)
    x = torch.randn(8, 256, device="cuda").bfloat16()
    eager = layer(x)  # first call tunes the form and compiles, outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = layer(x)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.testing.assert_close(out, layer(x), rtol=0, atol=0)
    assert not torch.equal(out, eager)


@pytest.mark.gpu
def test_eager_forward_is_the_op_and_follows_replaced_buffers():
    """The eager CUDA forward calls the kernel directly with a cached weight wrapper: it must equal the custom op
    bit for bit (3-D input, bias), and a buffer replaced by load_state_dict(assign=True) must be used at once."""
    torch.manual_seed(4)
    layer = bnn.NVFP4Linear.from_linear(torch.nn.Linear(256, 128).cuda(), x_global_scale=0.002)
    x = torch.randn(2, 4, 256, device="cuda").bfloat16()
    op = torch.ops.bwtriton.nvfp4_linear(x, layer.weight_data, layer.weight_scales, layer.weight_global_scale,
                                         layer.bias, layer.x_global_scale, layer.scale_layout)
    torch.testing.assert_close(layer(x), op, rtol=0, atol=0)
    other = bnn.NVFP4Linear.from_linear(torch.nn.Linear(256, 128).cuda(), x_global_scale=0.002)
    layer.load_state_dict(other.state_dict(), assign=True)
    torch.testing.assert_close(layer(x), other(x), rtol=0, atol=0)
    assert not torch.equal(layer(x), op)
