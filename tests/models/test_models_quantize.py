"""`bwtriton.models.quantize_` on tiny transformers models built from configs (random weights, no download):
a Llama, a Mixtral (experts [E, 2I, H], SiLU) and a gpt-oss (transposed, interleaved gate/up, biases, clamped
SwiGLU). The converted model is compared with the same model where every converted module computes the
quantized numerics the plain way ("fake-quant": Linear layers quantize x with `formats.quantize_nvfp4` and
multiply the dequantized weight; expert modules keep transformers' own loop over dequantized weights). That
isolates the conversion (which layers, weight orientation, gate/up order, biases, activation) from quantization
noise: converted vs fake-quant agree to bf16 rounding, while both differ from the bf16 model by the NVFP4 error."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from bwtriton.errors import InputError  # noqa: E402
from bwtriton.formats import quantize_mxfp4, quantize_nvfp4  # noqa: E402
from bwtriton.models import MoEExperts, experts_layout, quantize_  # noqa: E402
from bwtriton.nn import NVFP4Linear  # noqa: E402

COMMON = dict(vocab_size=256, hidden_size=128, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64)


def _model(kind: str) -> torch.nn.Module:
    if kind.startswith("gpt_oss") and not hasattr(transformers, "GptOssConfig"):
        pytest.skip(f"transformers {transformers.__version__} has no gpt-oss")
    torch.manual_seed(0)
    if kind == "llama":
        cfg = transformers.LlamaConfig(**{**COMMON, "intermediate_size": 256})
        model = transformers.LlamaForCausalLM(cfg)
    elif kind == "mixtral":
        cfg = transformers.MixtralConfig(**COMMON, num_local_experts=4, num_experts_per_tok=2)
        model = transformers.MixtralForCausalLM(cfg)
    else:  # gpt_oss_odd: 192 hidden / 64 intermediate, sizes the kernel pads to its K tile (as gpt-oss's 2880)
        sizes = {"hidden_size": 192, "intermediate_size": 64} if kind == "gpt_oss_odd" else {}
        cfg = transformers.GptOssConfig(**{**COMMON, **sizes}, num_local_experts=4, num_experts_per_tok=2,
                                        head_dim=32, sliding_window=16,
                                        layer_types=["sliding_attention", "full_attention"])
        model = transformers.GptOssForCausalLM(cfg)
    model = model.to(torch.bfloat16).eval()
    if kind != "llama" and not any(experts_layout(m) for m in model.modules()):
        pytest.skip(f"transformers {transformers.__version__} stores {kind}'s experts as per-expert Linear layers "
                    f"(3-D expert tensors came with transformers 5)")
    for name, p in model.named_parameters():
        if "experts" in name:  # gpt-oss leaves expert weights/biases uninitialised (torch.empty)
            torch.nn.init.normal_(p, std=0.05)
        elif ".mlp.gate." in name or ".mlp.router." in name:
            # Decisive routers: with the default std 0.02 the top-k choice of a random model sits on near-ties
            # that bf16 rounding differences flip, which would test the router, not the conversion.
            torch.nn.init.normal_(p, std=1.0)
    return model


class _FakeQuantLinear(torch.nn.Module):
    def __init__(self, layer: NVFP4Linear):
        super().__init__()
        self.w = layer.weight_q.dequantize(torch.float32)
        self.bias = layer.bias

    def forward(self, x):
        xq = quantize_nvfp4(x.float()).dequantize(torch.float32)
        y = xq @ self.w.T
        return (y if self.bias is None else y + self.bias.float()).to(torch.bfloat16)


#: How each model family stores its experts (transformers' modeling code): transposed to [E, H, 2I] / [E, I, H],
#: gate/up interleaved (gate = even columns) instead of gate half then up half.
STORAGE = {"mixtral": (False, False), "gpt_oss": (True, True), "gpt_oss_odd": (True, True)}


def _qdq_rows(w: torch.Tensor, fmt: str) -> torch.Tensor:
    """w [rows, K] quantized along K and dequantized (NVFP4 with one global scale for the block of rows)."""
    q = quantize_nvfp4(w.float()) if fmt == "nvfp4" else quantize_mxfp4(w.float())
    return q.dequantize(torch.float32)


def _fake_quant_experts(module: torch.nn.Module, kind: str, fmt: str) -> None:
    """Replace the expert weights of `module` (original layout) by their quantize-dequantized values, each expert's
    gate rows, up rows and down rows quantized along the input features, independently of bwtriton.models."""
    transposed, interleaved = STORAGE[kind]
    gu, dn = module.gate_up_proj.detach().float(), module.down_proj.detach().float()
    for e in range(gu.shape[0]):
        w = gu[e].T if transposed else gu[e]  # [2I, H]
        i = w.shape[0] // 2
        halves = (slice(0, None, 2), slice(1, None, 2)) if interleaved else (slice(0, i), slice(i, None))
        out = torch.empty_like(w)
        for rows in halves:
            out[rows] = _qdq_rows(w[rows], fmt)
        gu[e] = out.T if transposed else out
        d = dn[e].T if transposed else dn[e]  # [H, I]
        dn[e] = _qdq_rows(d, fmt).T if transposed else _qdq_rows(d, fmt)
    module.gate_up_proj.data = gu.to(torch.bfloat16)
    module.down_proj.data = dn.to(torch.bfloat16)


def _fake_quant(original: torch.nn.Module, converted: torch.nn.Module, kind: str, fmt: str) -> torch.nn.Module:
    """`original` with the modules that `converted` converted computing the quantized numerics in plain torch."""
    fake = copy.deepcopy(original)
    for name, module in converted.named_modules():
        parent, _, child = name.rpartition(".")
        if isinstance(module, NVFP4Linear):
            setattr(fake.get_submodule(parent), child, _FakeQuantLinear(module))
        elif isinstance(module, MoEExperts):
            _fake_quant_experts(fake.get_submodule(name), kind, fmt)
    return fake


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("kind,fmt,n_linear,n_experts", [("llama", "nvfp4", 14, 0), ("mixtral", "nvfp4", 8, 2),
                                                         ("gpt_oss", "mxfp4", 8, 2)])
def test_quantize_converts_the_right_modules(kind, fmt, n_linear, n_experts):
    model = _model(kind)
    original = copy.deepcopy(model)
    report = quantize_(model, experts_fmt=fmt)
    assert len(report.linear) == n_linear and len(report.experts) == n_experts
    assert all(isinstance(model.get_submodule(n), NVFP4Linear) for n in report.linear)
    assert report.kept["lm_head"] == "skipped by name" and isinstance(model.lm_head, torch.nn.Linear)
    assert all(isinstance(model.get_submodule(n), MoEExperts) and model.get_submodule(n).fmt == fmt
               for n in report.experts)
    ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert 0.01 < _rel(model(ids).logits, original(ids).logits) < 0.6  # quantization noise, 2 random layers


# Each part is compared on its own: with both converted, the W4A4 Linear layers re-quantize activations that
# already differ by bf16 rounding, and a moved NVFP4 code (~10% of an element) would swamp what is checked.
@pytest.mark.parametrize("kind,fmt,part", [("llama", "nvfp4", "linear"), ("mixtral", "nvfp4", "experts"),
                                           ("mixtral", "nvfp4", "linear"), ("gpt_oss", "mxfp4", "experts"),
                                           ("gpt_oss", "nvfp4", "experts"), ("gpt_oss_odd", "mxfp4", "experts")])
def test_converted_model_matches_fake_quant(kind, fmt, part):
    model = _model(kind)
    original = copy.deepcopy(model)
    quantize_(model, linear=part == "linear", experts_fmt=fmt if part == "experts" else None)
    ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = original(ids).logits
        fake = _fake_quant(original, model, kind, fmt)(ids).logits
        out = model(ids).logits
    assert _rel(out, fake) < 0.03  # bf16 rounding of activations and of the fake-quant weights
    assert _rel(out, ref) > 2 * _rel(out, fake)  # the check sees past the quantization noise


def test_experts_layout_detection():
    mixtral = _model("mixtral").model.layers[0].mlp.experts
    gpt_oss = _model("gpt_oss").model.layers[0].mlp.experts
    assert experts_layout(mixtral) == type(experts_layout(mixtral))(transposed=False, interleaved=False,
                                                                     activation="silu")
    assert experts_layout(gpt_oss).transposed and experts_layout(gpt_oss).interleaved
    assert experts_layout(gpt_oss).activation == "swiglu_oai"
    assert experts_layout(torch.nn.Linear(4, 4)) is None


def test_quantize_rejects_fp32_model_and_bad_format():
    model = _model("llama").float()
    with pytest.raises(InputError, match=r"model\.to\(torch\.bfloat16\)"):
        quantize_(model)
    with pytest.raises(InputError, match="experts_fmt"):
        quantize_(_model("mixtral"), experts_fmt="int4")


class _WeightOnlyFakeLinear(torch.nn.Module):
    """W4A16 in plain torch: bf16 x times the dequantized weight in fp32, one rounding to bf16."""

    def __init__(self, layer: NVFP4Linear):
        super().__init__()
        self.w, self.bias = layer.weight_q.dequantize(torch.float32), layer.bias

    def forward(self, x):
        y = x.float() @ self.w.T
        return (y if self.bias is None else y + self.bias.float()).to(torch.bfloat16)


def test_quantize_weight_only_converts_and_matches_fake_quant():
    """activations='bf16': Linear layers with in % 256 become weight-only NVFP4Linear, the others are kept with
    the reason; the model computes what the same model with dequantized weights and bf16 activations computes
    (no activation quantization: the outputs agree to bf16 rounding, far below the W4A4 difference)."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(**{**COMMON, "hidden_size": 256, "intermediate_size": 512})
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    original = copy.deepcopy(model)
    report = quantize_(model, activations="bf16", skip=())
    assert len(report.linear) == 15 and not report.kept  # 7 per layer and the LM head (in = 256)
    assert all(model.get_submodule(n).activations == "bf16" for n in report.linear)
    fake = copy.deepcopy(original)
    for name in report.linear:
        parent, _, child = name.rpartition(".")
        setattr(fake.get_submodule(parent) if parent else fake, child,
                _WeightOnlyFakeLinear(model.get_submodule(name)))
    w4a4 = copy.deepcopy(original)
    quantize_(w4a4, skip=())
    ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out, ref = model(ids).logits, fake(ids).logits
        assert _rel(out, ref) < 0.01  # bf16 rounding of the activations, carried through 2 layers
        assert _rel(w4a4(ids).logits, ref) > 4 * _rel(out, ref)
    narrow = quantize_(_model("llama"), activations="bf16")  # hidden 128: only down_proj (in 256) tiles
    assert sorted(narrow.linear) == [f"model.layers.{i}.mlp.down_proj" for i in range(2)]
    assert "in % 256" in narrow.kept["model.layers.0.self_attn.q_proj"]
    with pytest.raises(InputError, match="activations must be"):
        quantize_(_model("llama"), activations="int4")


def test_quantized_model_compiles_fullgraph():
    """The whole converted Mixtral (NVFP4Linear + MoEExperts) traces in one graph with torch.compile(fullgraph=True):
    the custom ops' fake kernels give shapes, nothing graph-breaks, and the compiled model computes what eager
    does."""
    model = _model("mixtral")
    quantize_(model)
    ids = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        eager = model(ids, use_cache=False).logits
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")(ids, use_cache=False).logits
    assert torch.equal(compiled, eager)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kind,fmt", [("mixtral", "nvfp4"), ("gpt_oss", "mxfp4")])
def test_gpu_quantized_model_matches_fake_quant_and_replays_in_cuda_graph(kind, fmt):
    """Experts converted (the Linear layers' GPU kernels have their own tests; converting both would compare two
    W4A4 pipelines whose re-quantized activations differ by moved codes, see above)."""
    model = _model(kind)
    original = copy.deepcopy(model)
    quantize_(model, linear=False, experts_fmt=fmt)
    model = model.cuda()
    ids = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        fake = _fake_quant(original, copy.deepcopy(model).cpu(), kind, fmt)(ids).logits
        out = model(ids.cuda()).logits
        assert _rel(out.cpu(), fake) < 0.03
        experts = model.model.layers[0].mlp.experts
        x = torch.randn(4, 128, device="cuda").bfloat16()
        idx = torch.randint(0, 4, (4, 2), device="cuda")
        wts = torch.rand(4, 2, device="cuda")
        eager = experts(x, idx, wts)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = experts(x, idx, wts)
        idx.copy_((idx + 1) % 4)  # every pair routed elsewhere: the replay must follow the new routing
        graph.replay()
        assert torch.equal(static_out, experts(x, idx, wts))
        assert not torch.equal(static_out, eager)


def test_moe_experts_state_dict_round_trip():
    gen = torch.Generator().manual_seed(5)
    gu, dn = torch.randn(2, 256, 128, generator=gen), torch.randn(2, 128, 128, generator=gen)
    a = MoEExperts.from_dense(gu, dn, "mxfp4", activation="swiglu_oai", swiglu_limit=5.0)
    b = MoEExperts.from_dense(torch.zeros_like(gu), torch.zeros_like(dn), "mxfp4", activation="swiglu_oai")
    b.load_state_dict(a.state_dict())
    assert torch.equal(b.gate_up_data, a.gate_up_data) and b.swiglu_limit == 5.0
    x, idx = torch.randn(3, 128, generator=gen).bfloat16(), torch.tensor([[0, 1], [1, 0], [1, 1]])
    wts = torch.rand(3, 2)
    assert torch.equal(a(x, idx, wts), b(x, idx, wts))
    with pytest.raises(InputError, match="saved with fmt='mxfp4'"):
        MoEExperts.from_dense(gu, dn, "nvfp4", activation="swiglu_oai").load_state_dict(a.state_dict())


class _DecodeBlock(torch.nn.Module):
    """Attention projections and routed experts of a decoder block, as the model benchmark builds them."""

    def __init__(self, h: int = 256, e: int = 4, i: int = 256):
        super().__init__()
        self.q_proj, self.o_proj = torch.nn.Linear(h, h, bias=False), torch.nn.Linear(h, h, bias=False)
        self.router = torch.nn.Linear(h, e, bias=False)
        experts = torch.nn.Module()
        experts.gate_up_proj = torch.nn.Parameter(torch.randn(e, 2 * i, h) * h ** -0.5)
        experts.down_proj = torch.nn.Parameter(torch.randn(e, h, i) * i ** -0.5)
        self.experts = experts

    def forward(self, x):
        x = x + self.o_proj(self.q_proj(x))
        wts, idx = torch.topk(torch.softmax(self.router(x).float(), -1), 2, dim=-1)
        return x + self.experts(x, idx, wts / wts.sum(-1, keepdim=True))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("tokens", [1, 64])
def test_gpu_quantized_block_replays_in_cuda_graph(tokens):
    """The whole converted block (NVFP4Linear + MoEExperts, routing on the device) captured in one CUDA graph:
    the replay follows new inputs exactly as eager calls do, and the default CUDA generator still works after the
    capture (a capture that failed inside torch would leave it raising 'Offset increment outside graph
    capture')."""
    torch.manual_seed(4)
    block = _DecodeBlock().bfloat16().cuda()
    report = quantize_(block, experts_fmt="nvfp4", skip=("router",))
    assert sorted(report.linear) == ["o_proj", "q_proj"] and report.experts == ["experts"]
    x = torch.randn(tokens, 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        first = block(x)  # compiles and tunes outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = block(x)
        x.copy_(torch.randn_like(x))
        graph.replay()
        eager = block(x)
        # equal up to the fp32 summation order of split-K atomics (one bf16 rounding of the sums)
        assert (static_out.float() - eager.float()).abs().max() <= 2.0 ** -7 * eager.float().abs().max()
        assert (static_out.float() - first.float()).abs().max() > 0.1 * first.float().abs().max()
    assert torch.randn(8, device="cuda").isfinite().all()
