"""The torch quantizers give the same bits on CUDA as on CPU (they are plain elementwise float32 math)."""
import pytest
import torch

from bwtriton.formats import quantize_mxfp4, quantize_mxfp8, quantize_nvfp4

QUANTIZERS = {"nvfp4": quantize_nvfp4, "mxfp4": quantize_mxfp4, "mxfp8_e4m3": quantize_mxfp8,
              "mxfp8_e5m2": lambda x: quantize_mxfp8(x, torch.float8_e5m2)}


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", list(QUANTIZERS))
def test_cuda_matches_cpu(fmt):
    torch.manual_seed(0)
    x = torch.randn(300, 256) * torch.logspace(-5, 5, 300)[:, None]
    x[:, :32] = 0
    cpu, gpu = QUANTIZERS[fmt](x), QUANTIZERS[fmt](x.cuda())
    assert gpu.data.is_cuda and gpu.scales.is_cuda
    assert torch.equal(gpu.data.view(torch.uint8).cpu(), cpu.data.view(torch.uint8))
    assert torch.equal(gpu.scales_u8.cpu(), cpu.scales_u8)
    assert torch.equal(gpu.to_blocked().scales_u8.cpu(), cpu.to_blocked().scales_u8)
    assert torch.equal(gpu.dequantize().cpu(), cpu.dequantize())
    if fmt == "nvfp4":
        assert gpu.global_scale.item() == cpu.global_scale.item()


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", list(QUANTIZERS))
def test_cuda_matches_cpu_on_bf16_activations(fmt):
    """bf16 inputs put many block maxima times S_enc / 6 exactly on E4M3 rounding ties (448 * amax_block / amax
    of two 8-bit significands), where one rounding more or less in the scale arithmetic flips the scale code."""
    torch.manual_seed(23)
    x = torch.randn(8, 4096)
    x = (x * (3.9375 / x.abs().max())).to(torch.bfloat16).float()  # S_enc = 682.6667: S_enc / 6 is not S_enc * (1/6)
    cpu, gpu = QUANTIZERS[fmt](x), QUANTIZERS[fmt](x.cuda())
    assert torch.equal(gpu.scales_u8.cpu(), cpu.scales_u8)
    assert torch.equal(gpu.data.view(torch.uint8).cpu(), cpu.data.view(torch.uint8))
