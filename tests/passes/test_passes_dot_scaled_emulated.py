"""`tl.dot_scaled` forms lowered by `lower-dot-scaled-portable` run on the emulated B200 (CPU tensors under
`bwtriton.emu.emulated_gpu("sm_100a")`, compiled through the default sm_100a pipeline), against float64.

Two kinds of data per form:
* grid data: every dequantized value is a multiple of a power of two g (per side) with a small range, so every
  partial sum of exact products is a multiple of g_a * g_b below 2^22 * g_a * g_b and therefore exact in fp32
  whatever the summation order (`exact_in_any_order` checks this on the data itself, with 2 bits of margin for
  tensor-core alignment): the result must equal the float64 reference bit for bit;
* wide data (random codes over the formats' range, e8m0 2^-5..2^5): fp32 accumulation of exact products, error
  <= (terms * K) * 2^-23 * (|A| @ |B|), where terms is the number of term pairs the hi/lo split adds (on
  sm_100a one dot over terms * K exact products in fp32: K * 2^-24 per K products relative to the absolute sum,
  doubled for truncating adders).
A split form with both sides split also runs at a 128x128 tile, where its chained lowering would not fit TMEM.
"""
from __future__ import annotations

import pytest
import torch

from bwtriton.formats import e2m1_decode, e8m0_decode, pack_e2m1
from test_nvfp4_lowering import _random_operand, _uint
from test_passes_dot_scaled_forms import form_constexprs, form_id, forms_kernel

pytestmark = [pytest.mark.emulated]

#: scaled bf16/fp16 sides (UE4M3: hi/lo split; e8m0) against each kind of partner, both orders, mixed scales
EMULATED_FORMS = [
    ("bf16", "ue4m3", True, "e2m1", "ue4m3", True),     # gemlite's NVFP4 form with a real activation scale
    ("fp16", "ue4m3", True, "fp16", "ue4m3", True),     # both sides split: one dot over 4 term pairs
    ("e2m1", "ue4m3", True, "bf16", "ue4m3", True),     # rhs split (transposed route)
    ("bf16", "ue4m3", True, "fp16", None, True),        # unscaled fp16 split against a split side
    ("e2m1", "e8m0", False, "bf16", "ue4m3", True),     # M-packed MXFP4 x split bf16
    ("fp16", "e8m0", True, "e4m3", None, True),         # fp16 x e8m0: tf32
    ("bf16", "e8m0", True, "e2m1", "e8m0", True),      # left to Triton: its fp4 upcast (scoped a<14> registers)
    ("e4m3", "ue4m3", True, "bf16", "e8m0", True),      # mixed scale kinds
]


def _id(form) -> "str | None":
    return None if isinstance(form, type(pytest.param(()))) else form_id(form)


def _lowest_bit_exponent(x: torch.Tensor) -> int:
    """min over the nonzero values of the exponent of their lowest set bit."""
    nz = x[x != 0].double()
    mant, exp = torch.frexp(nz)
    ints = (mant.abs() * 2.0 ** 53).to(torch.int64)
    tz = torch.zeros_like(ints)
    for bit in range(53):
        tz = torch.where((ints >> bit) & 1 == 0, tz + (tz == bit).to(torch.int64), tz)
    return int((exp - 53 + tz).min())


def exact_in_any_order(a_ref: torch.Tensor, b_ref: torch.Tensor, margin_bits: int = 2) -> bool:
    """Every partial sum of the products a[m, k] * b[n, k] is exact in fp32: all are multiples of g_a * g_b and
    the absolute sums stay below 2^(24 - margin) of that."""
    g = 2.0 ** (_lowest_bit_exponent(a_ref) + _lowest_bit_exponent(b_ref))
    bound = (a_ref.abs() @ b_ref.abs().T).max().item()
    return bound <= 2.0 ** (24 - margin_bits) * g


def grid_operand(fmt: str, scale: "str | None", k_pack: bool, rows: int, k: int, gen: torch.Generator):
    """Like `_random_operand` (same layouts), with codes from a narrow grid: e2m1 all codes, e4m3/e5m2 0 or
    [1, 4), bf16 k/8 and fp16 k/16 (|k| < 32), e8m0 2^-1..2^1, UE4M3 1..1.875."""
    def pick(values, shape):
        idx = torch.randint(0, len(values), shape, generator=gen)
        return torch.tensor(values, dtype=torch.int64)[idx]

    sign = (torch.randint(0, 2, (rows, k), generator=gen) * 2 - 1)
    if fmt == "e2m1":
        codes = torch.randint(0, 16, (rows, k), dtype=torch.uint8, generator=gen)
        stored = pack_e2m1(codes) if k_pack else pack_e2m1(codes.T.contiguous()).T.contiguous()
        stored, elems = _uint(stored.to(torch.int64), 8), e2m1_decode(codes).double()
    elif fmt in ("e4m3", "e5m2"):
        mags = [0] + (list(range(56, 72)) if fmt == "e4m3" else list(range(60, 68)))
        codes = (pick(mags, (rows, k)) | ((sign < 0).to(torch.int64) << 7)).to(torch.uint8)
        stored = codes.view(torch.float8_e4m3fn if fmt == "e4m3" else torch.float8_e5m2)
        elems = stored.double()
    else:
        top, div, dtype = (32, 8, torch.bfloat16) if fmt == "bf16" else (32, 16, torch.float16)
        stored = (torch.randint(-top + 1, top, (rows, k), generator=gen).double() / div).to(dtype)
        elems = stored.double()
    if scale is None:
        return stored, None, elems
    group = 16 if scale == "ue4m3" else 32
    if scale == "e8m0":
        codes = torch.randint(126, 129, (rows, k // group), dtype=torch.uint8, generator=gen)
        factor, scales = e8m0_decode(codes).double(), _uint(codes.to(torch.int64), 8)
    else:
        scales = torch.randint(0x38, 0x40, (rows, k // group), dtype=torch.uint8, generator=gen).view(
            torch.float8_e4m3fn)
        factor = scales.double()
    return stored, scales, elems * factor.repeat_interleave(group, dim=1)


def launch_form(form: tuple, operands, m: int, n: int, k: int, tile: tuple[int, int, int],
                device: str) -> torch.Tensor:
    """Run forms_kernel on rows-major operands from `grid_operand` / `_random_operand` (on `device`)."""
    a, sa, b, sb = operands

    def dev(t):  # evaluator-style int64 bit patterns back to bytes
        return None if t is None else (t.to(torch.uint8) if t.dtype == torch.int64 else t).contiguous().to(device)

    a, sa, sb = dev(a), dev(sa), dev(sb)
    b_kn = dev(b).T  # stored [K', N'] as the logical transpose of rows-major [N', K'] (upstream's layout)
    c = torch.empty(m, n, device=device)
    forms_kernel[(m // tile[0], n // tile[1])](a, sa, b_kn, sb, c, m, n, k, a.stride(0), a.stride(1),
                                               b_kn.stride(0), b_kn.stride(1), **form_constexprs(form, tile))
    return c


def split_terms(form: tuple) -> int:
    from bwtriton.mlir.dot_scaled import parse_dot_scaled
    from bwtriton.passes.lower_dot_scaled_portable.lower_dot_scaled_portable import dot_plan
    from test_nvfp4_lowering import _form_line
    plan = dot_plan(parse_dot_scaled(_form_line(form, 64, 64, 64)))
    return plan.terms[0] * plan.terms[1]


M = N = 64
K = 64
TILE = (64, 64, 32)


@pytest.mark.parametrize("form", EMULATED_FORMS, ids=[_id(f) for f in EMULATED_FORMS])
def test_emulated_grid_data_is_bit_exact(form, emulated_b200):
    gen = torch.Generator().manual_seed(sum(map(ord, form_id(form))))
    a, sa, a_ref = grid_operand(*form[:3], M, K, gen)
    b, sb, b_ref = grid_operand(*form[3:], N, K, gen)
    assert exact_in_any_order(a_ref, b_ref)
    c = launch_form(form, (a, sa, b, sb), M, N, K, TILE, "cpu")
    ref = a_ref @ b_ref.T
    assert torch.equal(c.double(), ref), (c.double() - ref).abs().max()


@pytest.mark.parametrize("form", EMULATED_FORMS[:4], ids=[_id(f) for f in EMULATED_FORMS[:4]])
def test_emulated_wide_data_within_fp32_accumulation_bound(form, emulated_b200):
    gen = torch.Generator().manual_seed(5)
    a, sa, a_ref = _random_operand(*form[:3], M, K, gen, (122, 132))
    b, sb, b_ref = _random_operand(*form[3:], N, K, gen, (122, 132))
    c = launch_form(form, (a, sa, b, sb), M, N, K, TILE, "cpu")
    ref = a_ref @ b_ref.T
    bound = split_terms(form) * K * 2.0 ** -23 * (a_ref.abs() @ b_ref.abs().T) + 1e-30
    err = (c.double() - ref).abs()
    assert (err <= bound).all(), f"max error {err.max().item()}, {int((err > bound).sum())} over the bound"


@pytest.mark.parametrize("form", [("bf16", "ue4m3", True, "bf16", "ue4m3", True)], ids=form_id)
def test_emulated_split_2x2_form_at_a_128x128_tile_is_bit_exact(form, emulated_b200):
    gen = torch.Generator().manual_seed(11)
    m = n = 128
    k = 64  # at K = 128 the grid data's sums leave fp32's exact range (the precondition fails)
    a, sa, a_ref = grid_operand(*form[:3], m, k, gen)
    b, sb, b_ref = grid_operand(*form[3:], n, k, gen)
    assert exact_in_any_order(a_ref, b_ref)
    c = launch_form(form, (a, sa, b, sb), m, n, k, (128, 128, 32), "cpu")
    ref = a_ref @ b_ref.T
    assert torch.equal(c.double(), ref), (c.double() - ref).abs().max()
