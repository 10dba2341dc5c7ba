"""Emulated twins of tests/examples/test_gpu_examples.py: the same example kernels, launched the ordinary way
(`kernel[grid](...)`) on the emulated B200 with CPU tensors, compiled for sm_100a through bwtriton's pipeline, and
checked against float64 torch with the runners' tolerances (`bwtriton.examples.runners._check`). Smaller problems
than the GPU tests (emulation is ~10^5 warp-instructions/s) but every tile path the GPU test takes."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from bwtriton.examples.runners import _check  # noqa: E402

pytestmark = [pytest.mark.emulated, pytest.mark.usefixtures("emulated_b200_module")]



@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float8_e4m3fn"])
def test_matmul_example_matches_torch(dtype):
    from bwtriton.examples.matmul import matmul_kernel
    dt = getattr(torch, dtype)
    m, n, k = 256, 128, 256
    block_k = 128 if dt.itemsize == 1 else 64
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen).to(dt)
    b = torch.randn(k, n, generator=gen).to(dt)
    out_dtype = torch.float16 if dt.itemsize == 1 else dt
    c = torch.empty(m, n, dtype=out_dtype)
    kernel = matmul_kernel[(m // 128, n // 128)](a, b, c, m, n, k, a.stride(0), 1, b.stride(0), 1, c.stride(0), 1,
                                                 BLOCK_M=128, BLOCK_N=128, BLOCK_K=block_k)
    assert "tcgen05.mma" in kernel.asm["ptx"]
    # operands exact in fp32, fp32 accumulation, one rounding to the output type: 2 ulps of it (runners.py)
    ulp = 2.0 ** -8 if out_dtype == torch.bfloat16 else 2.0 ** -11
    assert _check(c, a.double() @ b.double(), 2 * ulp, f"matmul {dtype}").startswith("ok")


@pytest.mark.parametrize("kind", ["nvfp4", "mxfp4"])
def test_fp4_dot_scaled_example_matches_torch(kind):
    from bwtriton.examples.scaled import fp4_scaled_matmul_kernel
    from bwtriton.formats import quantize_mxfp4, quantize_nvfp4
    m, n, k = 128, 128, 256
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(m, k, generator=gen), torch.randn(n, k, generator=gen)
    aq, bq = (quantize_nvfp4(x), quantize_nvfp4(w)) if kind == "nvfp4" else (quantize_mxfp4(x), quantize_mxfp4(w))
    a_s, b_s = (aq.scales, bq.scales) if kind == "nvfp4" else (aq.scales_u8, bq.scales_u8)
    c = torch.empty(m, n, dtype=torch.float32)
    kernel = fp4_scaled_matmul_kernel[(m // 128, n // 128)](
        aq.data, bq.data, a_s, b_s, c, m, n, k, aq.data.stride(0), bq.data.stride(0), c.stride(0),
        a_s.stride(0), b_s.stride(0), VEC=aq.block_size, BLOCK_M=128, BLOCK_N=128, BLOCK_K=128)
    assert "kind::mxf4" in kernel.asm["ptx"]  # the native block-scaled tcgen05 MMA, not a dequantize fallback

    def deq(q):  # block scales only: the kernel does not apply NVFP4's global scale
        return q.dequantize(torch.float64) / (q.global_scale.double() if q.global_scale is not None else 1)
    # dequantized products are exact; fp32 accumulation over K=256 stays far below 1e-5 of max|ref|
    assert _check(c, deq(aq) @ deq(bq).T, 1e-5, f"dot_scaled {kind}").startswith("ok")


def test_launches_go_through_our_pipeline():
    from bwtriton.examples.matmul import matmul_kernel
    a = torch.randn(128, 64, dtype=torch.float16)
    b = torch.randn(64, 128, dtype=torch.float16)
    c = torch.empty(128, 128, dtype=torch.float16)
    kernel = matmul_kernel[(1, 1)](a, b, c, 128, 128, 64, a.stride(0), 1, b.stride(0), 1, c.stride(0), 1,
                                   BLOCK_M=128, BLOCK_N=128, BLOCK_K=64)
    # our stages: `bw<stage>` before the arch rename, `<stage>_triton` (Triton's own text) after it
    assert any(st.startswith("bw") or st.endswith("_triton") for st in kernel.asm), list(kernel.asm)
    assert "bwtriton" in kernel.metadata._asdict() and kernel.metadata.target.arch == 100
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2 ** -10, atol=1e-2)
