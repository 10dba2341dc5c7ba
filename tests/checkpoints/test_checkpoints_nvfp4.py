"""NVFP4 checkpoints -> QuantizedTensor / NVFP4Linear, bit for bit.

compressed-tensors: the checkpoint is produced by compressed-tensors' own quantizer and compressor, written to
safetensors, read back by bwtriton, and bwtriton's dequantization is compared bit for bit (bf16, the dtype the
library decompresses to) with compressed-tensors' `NVFP4PackedCompressor.decompress`.
ModelOpt: there is no pip-installable ModelOpt reader, so the test writes the published layout with its own
writer (below) and checks (a) fp32 bit-equality with the published formula e2m1 * weight_scale * weight_scale_2
and (b) bf16 bit-equality with compressed-tensors' ModelOpt converter + decompressor, an independent reader.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ct_nvfp4 = pytest.importorskip("compressed_tensors.compressors.nvfp4.base")
pytest.importorskip("safetensors")

from compressed_tensors.entrypoints.convert.converters.modelopt_nvfp4 import ModelOptNvfp4Converter  # noqa: E402
from compressed_tensors.quantization import QuantizationScheme  # noqa: E402
from compressed_tensors.quantization.quant_scheme import NVFP4  # noqa: E402
from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from bwtriton.checkpoints import (nvfp4_linear_from_checkpoint, read_compressed_tensors_nvfp4,  # noqa: E402
                                  read_modelopt_nvfp4, read_nvfp4, read_safetensors)
from bwtriton.errors import InputError  # noqa: E402

SCHEME = QuantizationScheme(targets=["Linear"], **NVFP4)
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)


def _ct_checkpoint(w: torch.Tensor, with_input_scale: bool) -> dict[str, torch.Tensor]:
    """compressed-tensors' own NVFP4 quantization of w (bf16 [N, K]) and its compressed state dict."""
    gs = generate_gparam(w.min(), w.max())
    groups = w.float().reshape(w.shape[0], -1, 16)
    scale, zp = calculate_qparams(groups.amin(-1), groups.amax(-1), SCHEME.weights, global_scale=gs)
    sd = ct_nvfp4.NVFP4PackedCompressor.compress(
        {"weight": w, "weight_scale": scale, "weight_global_scale": gs, "weight_zero_point": zp}, SCHEME)
    if with_input_scale:
        sd["input_global_scale"] = torch.tensor([2688.0 / 3.7])
    return sd


def _ct_dequantized(sd: dict[str, torch.Tensor]) -> torch.Tensor:
    return ct_nvfp4.NVFP4PackedCompressor.decompress(dict(sd), SCHEME)["weight"]


def _save(tmp_path, tensors: dict[str, torch.Tensor]) -> str:
    path = str(tmp_path / "model.safetensors")
    save_file({k: v.contiguous() for k, v in tensors.items()}, path)
    return path


@pytest.mark.parametrize("seed,shape,magnitude", [(0, (64, 128), 1.0), (1, (128, 256), 1e-3), (2, (192, 512), 40.0)])
def test_compressed_tensors_checkpoint_dequantizes_bit_exactly(tmp_path, seed, shape, magnitude):
    gen = torch.Generator().manual_seed(seed)
    w = (torch.randn(shape, generator=gen) * magnitude).bfloat16()
    sd = _ct_checkpoint(w, with_input_scale=True)
    tensors = read_safetensors(_save(tmp_path, {f"model.layers.0.q_proj.{k}": v for k, v in sd.items()}))
    got = read_compressed_tensors_nvfp4(tensors, "model.layers.0.q_proj")
    assert got.weight.format == "nvfp4" and got.weight.shape == shape
    assert torch.equal(got.weight.data, sd["weight_packed"])
    assert torch.equal(got.weight.scales.view(torch.uint8), sd["weight_scale"].view(torch.uint8))
    # weight_global_scale is the encode scale: kept exactly, the decode scale is its fp32 reciprocal.
    assert _bits(got.weight.global_encode_scale.reshape(1)).equal(_bits(sd["weight_global_scale"]))
    assert got.weight.global_scale.item() == (1.0 / sd["weight_global_scale"]).item()
    assert got.input_decode_scale == pytest.approx(3.7 / 2688.0, rel=2 ** -23)
    ours, theirs = got.weight.dequantize(torch.bfloat16), _ct_dequantized(sd)
    assert theirs.dtype == torch.bfloat16 and torch.equal(_bits(ours), _bits(theirs))


def test_compressed_tensors_raw_codes_and_scales_bit_exact():
    """Every byte value and a wide range of UE4M3 scales: same as compressed-tensors' decompress."""
    gen = torch.Generator().manual_seed(3)
    sd = {"weight_packed": torch.arange(256, dtype=torch.uint8).repeat(64, 1),
          "weight_scale": torch.randint(0, 0x7F, (64, 32), dtype=torch.uint8, generator=gen).view(torch.float8_e4m3fn),
          "weight_global_scale": torch.tensor([1234.5678])}
    got = read_compressed_tensors_nvfp4(sd, "")
    assert torch.equal(_bits(got.weight.dequantize(torch.bfloat16)), _bits(_ct_dequantized(sd)))
    assert got.input_decode_scale is None and got.bias is None


def test_nvfp4_linear_from_compressed_tensors(tmp_path):
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(128, 256, generator=gen).bfloat16()
    sd = _ct_checkpoint(w, with_input_scale=False)
    sd["bias"] = torch.randn(128, generator=gen).bfloat16()
    tensors = read_safetensors(_save(tmp_path, {f"o_proj.{k}": v for k, v in sd.items()}))
    for scale_layout in ("plain", "blocked_128x4"):
        layer = nvfp4_linear_from_checkpoint(tensors, "o_proj", scale_layout=scale_layout)
        assert layer.scale_layout == scale_layout and layer.x_global_scale is None
        assert torch.equal(_bits(layer.weight_q.dequantize(torch.bfloat16)), _bits(_ct_dequantized(sd)))
        assert torch.equal(layer.bias, sd["bias"])


# ----------------------------------------------------------------------------------------- ModelOpt (own writer)

def _write_modelopt(w: torch.Tensor, x_amax: float) -> dict[str, torch.Tensor]:
    """The published ModelOpt NVFP4 layout, written independently of bwtriton.formats: weight_scale_2 =
    amax(W) / (6 * 448) (decode), per-16 UE4M3 scales amax_block / (6 * weight_scale_2), E2M1 codes by
    round-to-nearest on the value table, element 2i in the low nibble; input_scale = amax(x) / 2688."""
    w = w.float()
    s2 = w.abs().max() / 2688.0
    blocks = w.reshape(w.shape[0], -1, 16)
    scale = (blocks.abs().amax(-1) / (6.0 * s2)).clamp(max=448.0).to(torch.float8_e4m3fn)
    denom = (scale.float() * s2).unsqueeze(-1)
    scaled = torch.where(denom > 0, blocks / denom, torch.zeros_like(blocks)).clamp(-6, 6)
    mag = (scaled.abs().unsqueeze(-1) - E2M1).abs().argmin(-1)
    codes = (mag | (torch.signbit(scaled).long() << 3)).reshape(w.shape).to(torch.uint8)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return {"weight": packed, "weight_scale": scale, "weight_scale_2": s2.reshape(()),
            "input_scale": torch.tensor(x_amax / 2688.0)}


def _published_modelopt_dequant(t: dict[str, torch.Tensor]) -> torch.Tensor:
    packed = t["weight"]
    codes = torch.stack((packed & 0xF, packed >> 4), -1).reshape(packed.shape[0], -1).long()
    vals = E2M1[codes & 7] * torch.where(codes >= 8, -1.0, 1.0)
    vals = vals.reshape(packed.shape[0], -1, 16) * t["weight_scale"].float().unsqueeze(-1)
    return (vals * t["weight_scale_2"]).reshape(packed.shape[0], -1)


@pytest.mark.parametrize("seed,magnitude", [(5, 1.0), (6, 3e-4)])
def test_modelopt_checkpoint_bit_exact(tmp_path, seed, magnitude):
    gen = torch.Generator().manual_seed(seed)
    t = _write_modelopt(torch.randn(128, 256, generator=gen) * magnitude, x_amax=5.5)
    tensors = read_safetensors(_save(tmp_path, {f"mlp.down_proj.{k}": v for k, v in t.items()}))
    got = read_modelopt_nvfp4(tensors, "mlp.down_proj")
    assert got.weight.global_scale.item() == t["weight_scale_2"].item()  # decode scale kept exactly
    assert got.input_decode_scale == t["input_scale"].item()
    assert torch.equal(_bits(got.weight.dequantize(torch.float32)), _bits(_published_modelopt_dequant(t)))
    converted = ModelOptNvfp4Converter(targets=["re:.*"]).process({f"l.{k}": v for k, v in t.items()})
    # The converter leaves the global scale 0-d; compressed-tensors checkpoints store it as [1] (a 0-d fp32
    # tensor would make torch compute the bf16 scale / global_scale quotient in bf16).
    theirs = _ct_dequantized({"weight_packed": converted["l.weight_packed"],
                              "weight_scale": converted["l.weight_scale"],
                              "weight_global_scale": converted["l.weight_global_scale"].reshape(1)})
    assert torch.equal(_bits(got.weight.dequantize(torch.bfloat16)), _bits(theirs))
    assert read_nvfp4(tensors, "mlp.down_proj").weight.data.equal(got.weight.data)  # layout detected by name


def test_modelopt_linear_keeps_static_input_scale():
    t = _write_modelopt(torch.randn(64, 128, generator=torch.Generator().manual_seed(7)), x_amax=2.0)
    layer = nvfp4_linear_from_checkpoint(t, "", layout="modelopt")
    assert layer.x_global_scale == t["input_scale"].item()
    assert nvfp4_linear_from_checkpoint(t, "", static_input_scale=False).x_global_scale is None


def test_modelopt_linear_weight_only_ignores_the_input_scale():
    """activations='bf16': the same weight bytes, bf16 activations (no input scale), and on CPU the output is
    x @ W^T of the published decode (codes x UE4M3 scale x weight_scale_2, computed here in float64) within one
    bf16 rounding of the output plus fp32 accumulation over K."""
    t = _write_modelopt(torch.randn(64, 256, generator=torch.Generator().manual_seed(8)), x_amax=2.0)
    w4a4 = nvfp4_linear_from_checkpoint(t, "", layout="modelopt")
    layer = nvfp4_linear_from_checkpoint(t, "", layout="modelopt", activations="bf16")
    assert layer.activations == "bf16" and layer.x_global_scale is None
    assert torch.equal(layer.weight_data, w4a4.weight_data) and torch.equal(_bits(layer.weight_scales),
                                                                            _bits(w4a4.weight_scales))
    codes = torch.stack([t["weight"] & 15, t["weight"] >> 4], -1).reshape(64, 256).long()
    w = (E2M1.double()[codes & 7] * (1 - 2 * (codes >> 3)).double()).reshape(64, 16, 16)
    w = (w * t["weight_scale"].double().unsqueeze(-1)).reshape(64, 256) * t["weight_scale_2"].double()
    x = torch.randn(5, 256, generator=torch.Generator().manual_seed(9)).bfloat16()
    ref = x.double() @ w.T
    bound = 2.0 ** -8 * ref.abs() + 258 * 2.0 ** -24 * (x.double().abs() @ w.abs().T)
    assert ((layer(x).double() - ref).abs() <= bound).all()


# ------------------------------------------------------------------------------------------------------ errors

def _ct_minimal() -> dict[str, torch.Tensor]:
    return {"p.weight_packed": torch.zeros(64, 64, dtype=torch.uint8),
            "p.weight_scale": torch.ones(64, 8).to(torch.float8_e4m3fn),
            "p.weight_global_scale": torch.tensor([100.0])}


@pytest.mark.parametrize("edit,match", [
    (lambda t: t.pop("p.weight_scale"), r"no tensor 'p\.weight_scale'.*p\.weight_global_scale"),
    (lambda t: t.__setitem__("p.weight_scale", torch.ones(64, 8, dtype=torch.uint8)), r"'p\.weight_scale' is "
     r"torch\.uint8, expected torch\.float8_e4m3fn"),
    (lambda t: t.__setitem__("p.weight_scale", torch.ones(64, 4).to(torch.float8_e4m3fn)), r"group size 32.*"
     r"group_size=16"),
    (lambda t: t.__setitem__("p.weight_scale", torch.ones(32, 8).to(torch.float8_e4m3fn)), r"shape \(32, 8\), "
     r"expected \(64, 8\).*swizzled"),
    (lambda t: t.__setitem__("p.weight_global_scale", torch.ones(64)), "one per-tensor scale"),
    (lambda t: t.__setitem__("p.weight_global_scale", torch.tensor([0.0])), "not a positive finite scale"),
    (lambda t: t.__setitem__("p.weight_packed", torch.zeros(64, 64, dtype=torch.int8)), "is torch.int8"),
])
def test_compressed_tensors_errors_name_tensor_and_fix(edit, match):
    t = _ct_minimal()
    edit(t)
    with pytest.raises(InputError, match=match):
        read_compressed_tensors_nvfp4(t, "p")


def test_unknown_layout_and_missing_module():
    with pytest.raises(InputError, match="no NVFP4 weight under 'q'"):
        read_nvfp4(_ct_minimal(), "q")
    with pytest.raises(InputError, match="layout must be"):
        read_nvfp4(_ct_minimal(), "p", layout="gptq")
    with pytest.raises(InputError, match="does not exist"):
        read_safetensors("/nonexistent/model.safetensors")


# ------------------------------------------------------------------------------------- per-expert NVFP4 linears

def test_nvfp4_experts_checkpoint_into_moe_module():
    """Mixtral-style export (w1 = gate, w3 = up, w2 = down per expert, compressed-tensors layout): the MoE module
    holds the same bytes and per-expert scales, and its CPU forward equals a float32 per-expert loop over the
    single-linear reader's weights (bit-exact with compressed-tensors, above)."""
    from bwtriton.checkpoints import read_nvfp4_experts
    from bwtriton.models import MoEExperts
    gen = torch.Generator().manual_seed(8)
    tensors, dense = {}, {}
    for e in range(3):
        for name, shape in (("w1", (128, 128)), ("w3", (128, 128)), ("w2", (128, 128))):
            sd = _ct_checkpoint((torch.randn(shape, generator=gen) * (e + 1)).bfloat16(), with_input_scale=False)
            tensors.update({f"mlp.experts.{e}.{name}.{k}": v for k, v in sd.items()})
            dense[e, name] = read_compressed_tensors_nvfp4(sd, "").weight.dequantize(torch.float32)
    experts = MoEExperts.from_nvfp4_checkpoint(read_nvfp4_experts(tensors, "mlp.experts", 3, names=("w1", "w3", "w2")))
    assert experts.gate_up_data.shape == (3, 256, 64) and experts.down_scales.shape == (3, 128, 8)
    assert torch.equal(experts.gate_up_data[1, 128:], tensors["mlp.experts.1.w3.weight_packed"])
    assert experts.gate_up_global[2, 1].item() == (1.0 / tensors["mlp.experts.2.w3.weight_global_scale"]).item()
    x = torch.randn(4, 128, generator=gen).bfloat16()
    idx, wts = torch.tensor([[0, 2], [1, 0], [2, 1], [2, 0]]), torch.rand(4, 2, generator=gen)
    ref = torch.zeros(4, 128)
    for t in range(4):
        for j in range(2):
            e = int(idx[t, j])
            h = torch.nn.functional.silu(x[t].float() @ dense[e, "w1"].T) * (x[t].float() @ dense[e, "w3"].T)
            ref[t] += (h.bfloat16().float() @ dense[e, "w2"].T) * wts[t, j]
    out = experts(x, idx, wts).float()
    assert ((out - ref).abs() <= 2.0 ** -8 * ref.abs() + 1e-5 * ref.abs().max()).all()  # bf16 output rounding


def test_nvfp4_experts_shape_mismatch_is_named():
    from bwtriton.checkpoints import read_nvfp4_experts
    t = {f"x.{e}.{n}.{k}": v for e in range(2) for n in ("gate_proj", "up_proj", "down_proj")
         for k, v in _ct_minimal().items() if k.startswith("p.") for k in [k[2:]]}
    t["x.1.up_proj.weight_packed"] = torch.zeros(128, 64, dtype=torch.uint8)
    t["x.1.up_proj.weight_scale"] = torch.ones(128, 8).to(torch.float8_e4m3fn)
    with pytest.raises(InputError, match="'up_proj' weights differ in shape"):
        read_nvfp4_experts(t, "x", 2)
