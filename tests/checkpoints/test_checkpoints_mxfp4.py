"""gpt-oss-style MXFP4 experts (`*_blocks` / `*_scales`) -> QuantizedTensor [E, rows, K], bit for bit.

The checkpoint is written in the published layout by the test's own writer (random bytes: every code and a
range of UE8M0 exponents), and bwtriton's dequantization is compared with the published formula
(lut[low nibble], lut[high nibble] interleaved, times 2^(scale - 127)) and, where transformers is installed,
with transformers' own gpt-oss dequantizer (`integrations.mxfp4.convert_moe_packed_tensors`)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
from safetensors.torch import save_file  # noqa: E402

from bwtriton.checkpoints import read_mxfp4_experts, read_safetensors  # noqa: E402
from bwtriton.errors import InputError  # noqa: E402

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
E, HIDDEN, INTER = 3, 64, 32


def _projection(gen, rows: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    blocks = torch.randint(0, 256, (E, rows, k // 32, 16), dtype=torch.uint8, generator=gen)
    scales = torch.randint(112, 140, (E, rows, k // 32), dtype=torch.uint8, generator=gen)
    return blocks, scales


def _checkpoint(seed: int, prefix: str = "model.layers.0.mlp.experts") -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    gu_b, gu_s = _projection(gen, 2 * INTER, HIDDEN)
    dn_b, dn_s = _projection(gen, HIDDEN, INTER)
    return {f"{prefix}.gate_up_proj_blocks": gu_b, f"{prefix}.gate_up_proj_scales": gu_s,
            f"{prefix}.gate_up_proj_bias": torch.randn(E, 2 * INTER, generator=gen).bfloat16(),
            f"{prefix}.down_proj_blocks": dn_b, f"{prefix}.down_proj_scales": dn_s,
            f"{prefix}.down_proj_bias": torch.randn(E, HIDDEN, generator=gen).bfloat16()}


def _published(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """[E, rows, K] float32 by the published formula."""
    vals = torch.stack((E2M1[(blocks & 0xF).long()], E2M1[(blocks >> 4).long()]), -1).reshape(*blocks.shape[:-1], 32)
    vals = vals * torch.exp2(scales.float() - 127).unsqueeze(-1)
    return vals.reshape(*blocks.shape[:2], -1)


def test_gpt_oss_experts_match_published_layout(tmp_path):
    t = _checkpoint(0)
    path = str(tmp_path / "experts.safetensors")
    save_file(t, path)
    got = read_mxfp4_experts(read_safetensors(path), "model.layers.0.mlp.experts")
    p = "model.layers.0.mlp.experts."
    assert got.gate_up.shape == (E, 2 * INTER, HIDDEN) and got.down.shape == (E, HIDDEN, INTER)
    assert got.gate_up.format == "mxfp4" and got.gate_up_order == "interleaved"
    for q, proj in ((got.gate_up, "gate_up_proj"), (got.down, "down_proj")):
        ref = _published(t[p + proj + "_blocks"], t[p + proj + "_scales"])
        assert torch.equal(q.dequantize(torch.float32).view(torch.int32), ref.view(torch.int32))
    assert torch.equal(got.gate_up_bias, t[p + "gate_up_proj_bias"].float())
    assert got.down_bias.dtype == torch.float32


def test_gpt_oss_experts_match_transformers_dequantizer():
    mxfp4 = pytest.importorskip("transformers.integrations.mxfp4")
    t = _checkpoint(1, prefix="e")
    got = read_mxfp4_experts(t, "e")
    for q, proj in ((got.gate_up, "gate_up_proj"), (got.down, "down_proj")):
        # transformers returns the weight transposed, [E, K, rows], as its gpt-oss forward multiplies x @ W.
        theirs = mxfp4.convert_moe_packed_tensors(t[f"e.{proj}_blocks"], t[f"e.{proj}_scales"])
        ours = q.dequantize(torch.bfloat16).transpose(1, 2)
        assert torch.equal(ours.contiguous().view(torch.int16), theirs.view(torch.int16))


@pytest.mark.parametrize("edit,match", [
    (lambda t: t.pop("e.down_proj_scales"), r"no tensor 'e\.down_proj_scales'"),
    (lambda t: t.__setitem__("e.down_proj_blocks", t["e.down_proj_blocks"].reshape(E, HIDDEN, 2, 8)),
     r"8 bytes per block \(16 elements\).*group size 32"),
    (lambda t: t.__setitem__("e.gate_up_proj_scales", torch.zeros(E, 2 * INTER, 1, dtype=torch.uint8)),
     r"'e\.gate_up_proj_scales' has shape \(3, 64, 1\), expected \(3, 64, 2\)"),
    (lambda t: t.__setitem__("e.gate_up_proj_blocks", t["e.gate_up_proj_blocks"].to(torch.int32)), "is torch.int32"),
    (lambda t: t.__setitem__("e.down_proj_blocks", torch.zeros(E, HIDDEN, 16, dtype=torch.uint8)), "must be 4-D"),
    (lambda t: t.__setitem__("e.down_proj_bias", torch.zeros(E, 7)), r"'e\.down_proj_bias' has shape"),
])
def test_mxfp4_errors_name_tensor_and_fix(edit, match):
    t = _checkpoint(2, prefix="e")
    edit(t)
    with pytest.raises(InputError, match=match):
        read_mxfp4_experts(t, "e")


def test_mismatched_projections_rejected():
    t = _checkpoint(3, prefix="e")
    gen = torch.Generator().manual_seed(9)
    t["e.down_proj_blocks"], t["e.down_proj_scales"] = (x[:, :32] for x in _projection(gen, HIDDEN, INTER))
    t.pop("e.down_proj_bias")
    with pytest.raises(InputError, match=r"expected down_proj \[3, 64, 32\]"):
        read_mxfp4_experts(t, "e")


def test_gpt_oss_checkpoint_moe_module_matches_transformers_experts():
    """The checkpoint loaded into `MoEExperts` computes what transformers' own `GptOssExperts` computes with the
    weights transformers dequantizes from the same checkpoint (interleaved gate/up, biases, clamped SwiGLU).
    MXFP4 values are exact in bf16, so the two differ only in bf16 roundings of intermediate results."""
    transformers = pytest.importorskip("transformers")
    mxfp4 = pytest.importorskip("transformers.integrations.mxfp4")
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

    from bwtriton.models import MoEExperts
    hidden, inter = 128, 128
    gen = torch.Generator().manual_seed(4)
    t = {"e.gate_up_proj_blocks": torch.randint(0, 256, (E, 2 * inter, hidden // 32, 16), dtype=torch.uint8,
                                                generator=gen),
         "e.gate_up_proj_scales": torch.randint(118, 123, (E, 2 * inter, hidden // 32), dtype=torch.uint8,
                                                generator=gen),
         "e.gate_up_proj_bias": torch.randn(E, 2 * inter, generator=gen).bfloat16(),
         "e.down_proj_blocks": torch.randint(0, 256, (E, hidden, inter // 32, 16), dtype=torch.uint8, generator=gen),
         "e.down_proj_scales": torch.randint(118, 123, (E, hidden, inter // 32), dtype=torch.uint8, generator=gen),
         "e.down_proj_bias": torch.randn(E, hidden, generator=gen).bfloat16()}
    ours = MoEExperts.from_mxfp4_checkpoint(read_mxfp4_experts(t, "e"))
    cfg = transformers.GptOssConfig(hidden_size=hidden, intermediate_size=inter, num_local_experts=E,
                                    num_experts_per_tok=2)
    theirs = GptOssExperts(cfg).to(torch.bfloat16)
    with torch.no_grad():
        theirs.gate_up_proj.copy_(mxfp4.convert_moe_packed_tensors(t["e.gate_up_proj_blocks"],
                                                                   t["e.gate_up_proj_scales"]))
        theirs.down_proj.copy_(mxfp4.convert_moe_packed_tensors(t["e.down_proj_blocks"], t["e.down_proj_scales"]))
        theirs.gate_up_proj_bias.copy_(t["e.gate_up_proj_bias"])
        theirs.down_proj_bias.copy_(t["e.down_proj_bias"])
    x = torch.randn(5, hidden, generator=gen).bfloat16()
    idx = torch.tensor([[0, 1], [2, 0], [1, 2], [2, 1], [0, 2]])
    wts = torch.rand(5, 2, generator=gen).bfloat16()
    with torch.no_grad():
        a, b = ours(x, idx, wts).float(), theirs(x, idx, wts).float()
    assert (a - b).norm() / b.norm() < 2.0 ** -6
