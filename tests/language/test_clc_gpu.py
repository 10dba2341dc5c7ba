"""CLC kernels on a real GPU. On the H200 (sm_90a, no CLC) the same sources run the static persistent schedule;
on a Blackwell GPU they would steal. Skipped without CUDA ("needs a CUDA GPU")."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu


def _target():
    from bwtriton.targets import target_for_capability
    major, minor = torch.cuda.get_device_capability()
    return target_for_capability(major * 10 + minor)


def test_schedule_probe_static_or_clc():
    from bwtriton.kernels.clc_schedule import clc_schedule_kernel
    from bwtriton.language import clc
    tiles = 1000
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid, use_clc = clc.launch_grid(tiles, _target(), sms)
    owner = torch.zeros(tiles, dtype=torch.int32, device="cuda")
    visits = torch.zeros(tiles, dtype=torch.int32, device="cuda")
    clc_schedule_kernel[(grid,)](owner, visits, tiles, USE_CLC=use_clc, NUM_CTAS=1)
    torch.cuda.synchronize()
    assert visits.cpu().tolist() == [1] * tiles
    if not use_clc:  # static persistent: program p takes tiles p, p + grid, ...
        assert (owner.cpu() - 1).tolist() == [t % grid for t in range(tiles)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_clc_matmul_matches_torch(dtype):
    from bwtriton.kernels.clc_matmul import clc_matmul
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(1000, 384, device="cuda", dtype=dtype, generator=g)
    b = torch.randn(384, 520, device="cuda", dtype=dtype, generator=g)
    c = clc_matmul(a, b)
    # fp32 accumulation, one rounding of the result: one ulp of the output format
    rtol = 2 ** -7 if dtype == torch.bfloat16 else 2 ** -10
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=rtol, atol=2e-2)


def test_ragged_grouped_matmul_matches_torch():
    from bwtriton.kernels.grouped_matmul import grouped_matmul, reference
    group_rows = [2048, 128, 0, 4096, 77]
    g = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randn(sum(group_rows), 256, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(len(group_rows), 256, 192, device="cuda", dtype=torch.bfloat16, generator=g)
    c = grouped_matmul(a, b, group_rows)
    torch.testing.assert_close(c.double(), reference(a, b, group_rows), rtol=2 ** -7, atol=2e-2)
