"""`tl.dot_scaled` forms with scaled bf16/fp16 sides on this GPU (Hopper: what Triton 3.6 alone cannot compile),
through bwtriton's pipeline, against float64: the emulated tests' two kinds of data (grid data, 128x128x64 in
64x64x64 tiles: bit-exact whatever the fp32 summation order; wide data, 256x256x256 in 64x64x128 tiles: the
fp32-accumulation bound), and plain Triton's outcome on the gemlite form."""
from __future__ import annotations

import pytest
import torch

from test_nvfp4_lowering import _random_operand
from test_passes_dot_scaled_emulated import (EMULATED_FORMS, exact_in_any_order, grid_operand, launch_form,
                                             split_terms)
from test_passes_dot_scaled_forms import form_id

pytestmark = pytest.mark.gpu

#: the emulated forms (Triton's own bf16 x e8m0 decomposition included) and two more UE4M3-scaled fp16 mixes
GPU_FORMS = [f.values[0] if hasattr(f, "values") else f for f in EMULATED_FORMS] + [
    ("fp16", "ue4m3", True, "e2m1", "e8m0", False),
    ("e5m2", None, True, "fp16", "ue4m3", True),
]
M = N = K = 256
TILE = (64, 64, 128)


@pytest.mark.parametrize("form", GPU_FORMS, ids=[form_id(f) for f in GPU_FORMS])
def test_grid_data_is_bit_exact_on_this_gpu(form):
    from bwtriton.kernels.blockscaled import bwtriton_pipeline
    gen = torch.Generator().manual_seed(sum(map(ord, form_id(form))))
    # 128x128x64 (four CTAs): at 256x256 or K = 256 the grid data's sums can outgrow the exact-in-fp32 budget
    a, sa, a_ref = grid_operand(*form[:3], 128, 64, gen)
    b, sb, b_ref = grid_operand(*form[3:], 128, 64, gen)
    assert exact_in_any_order(a_ref, b_ref)
    with bwtriton_pipeline(torch.device("cuda")):
        c = launch_form(form, (a, sa, b, sb), 128, 128, 64, (64, 64, 64), "cuda")
    ref = a_ref @ b_ref.T
    assert torch.equal(c.double().cpu(), ref), (c.double().cpu() - ref).abs().max()


@pytest.mark.parametrize("form", GPU_FORMS, ids=[form_id(f) for f in GPU_FORMS])
def test_wide_data_within_fp32_accumulation_bound_on_this_gpu(form):
    from bwtriton.kernels.blockscaled import bwtriton_pipeline
    gen = torch.Generator().manual_seed(5)
    a, sa, a_ref = _random_operand(*form[:3], M, K, gen, (122, 132))
    b, sb, b_ref = _random_operand(*form[3:], N, K, gen, (122, 132))
    with bwtriton_pipeline(torch.device("cuda")):
        c = launch_form(form, (a, sa, b, sb), M, N, K, TILE, "cuda")
    ref = a_ref @ b_ref.T
    bound = split_terms(form) * K * 2.0 ** -23 * (a_ref.abs() @ b_ref.abs().T) + 1e-30
    err = (c.double().cpu() - ref).abs()
    assert (err <= bound).all(), f"max error {err.max().item()}, {int((err > bound).sum())} over the bound"


def test_plain_triton_cannot_compile_the_gemlite_form_on_this_gpu():
    """bf16 x UE4M3 scale against NVFP4: a form the frontend accepts, that Triton 3.6's own pipeline stops on."""
    form = ("bf16", "ue4m3", True, "e2m1", "ue4m3", True)
    gen = torch.Generator().manual_seed(1)
    a, sa, _ = grid_operand(*form[:3], 64, 64, gen)
    b, sb, _ = grid_operand(*form[3:], 64, 64, gen)
    from test_passes_dot_scaled_forms import forms_kernel
    forms_kernel.device_caches.clear()  # drop binaries the pipeline tests compiled for the same specialisation
    with pytest.raises(Exception, match="PassManager::run failed"):
        launch_form(form, (a, sa, b, sb), 64, 64, 64, (64, 64, 64), "cuda")
    forms_kernel.device_caches.clear()
