"""On a GPU: the example kernels launched through `bwtriton.enable()` match torch, and the launch really went
through our pipeline (our inserted stages are in the compiled kernel)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu


@pytest.fixture
def enabled():
    import bwtriton
    with bwtriton.enable():
        yield


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float8_e4m3fn"])
def test_matmul_example_matches_torch(enabled, dtype):
    from bwtriton.examples.runners import run_matmul
    assert run_matmul(getattr(torch, dtype), block_k=128 if "float8" in dtype else 64).startswith("ok")


@pytest.mark.parametrize("kind", ["nvfp4", "mxfp4"])
def test_fp4_dot_scaled_example_matches_torch(enabled, kind):
    """NVFP4 dot_scaled crashes upstream Triton 3.6 on Hopper; through bwtriton it runs and is exact."""
    from bwtriton.examples.runners import run_fp4_scaled
    assert run_fp4_scaled(kind).startswith("ok")


def test_enable_inserts_our_stages_into_live_launches(enabled):
    import triton
    from bwtriton.examples.matmul import matmul_kernel
    a = torch.randn(128, 64, device="cuda", dtype=torch.float16)
    b = torch.randn(64, 128, device="cuda", dtype=torch.float16)
    c = torch.empty(128, 128, device="cuda", dtype=torch.float16)
    kernel = matmul_kernel[(1, 1)](a, b, c, 128, 128, 64, a.stride(0), 1, b.stride(0), 1, c.stride(0), 1,
                                   BLOCK_M=128, BLOCK_N=128, BLOCK_K=64)
    assert any(stage.endswith("_triton") for stage in kernel.asm), list(kernel.asm)
    assert "bwtriton" in kernel.metadata._asdict()
    torch.testing.assert_close(c.float(), (a.float() @ b.float()), rtol=2 ** -10, atol=1e-2)
    del triton


def test_demo_runs_and_checks_on_the_gpu(capsys):
    from bwtriton.demo import run_demo
    assert run_demo() == 0
    out = capsys.readouterr().out
    assert "running on" in out and out.count(" ok (") == 4 and "FAILED" not in out and "compile-only" in out
