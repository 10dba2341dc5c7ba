"""bwtriton.kernels.matmul: input validation and config pruning (CPU), sm_100a / sm_90a compilation of every kernel
variant (CPU, no GPU needed), numerics against float64 references (GPU, `-m gpu`)."""
from __future__ import annotations

import re

import pytest
import torch

import bwtriton
from bwtriton.errors import InputError
from bwtriton.kernels import _configs
from bwtriton.kernels._configs import GemmConfig, gemm_configs, shared_bytes
from bwtriton.kernels._validate import InputChecker, tma_descriptor, tma_friendly_empty
from bwtriton.kernels.matmul import (SCALE_NONE, SCALE_TENSOR, SCALE_VECTOR, compile_spec, matmul,
                                     matmul_tma_persistent_kernel, validate_matmul_inputs)

BF16, FP16, FP32, FP8 = torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn
HAS_CUDA = torch.cuda.is_available()


# ============================================================================================== validation (CPU)
def _raises(match: str, *args, **kwargs):
    with pytest.raises(InputError, match=match):
        validate_matmul_inputs(*args, **kwargs)


def _v(a, b, out_dtype=None, a_scale=None, b_scale=None):
    return validate_matmul_inputs(a, b, out_dtype, a_scale, b_scale)


def test_rejects_non_tensor_and_wrong_rank():
    with pytest.raises(InputError, match="matmul: a must be a torch.Tensor, got list"):
        _v([[1.0]], torch.empty(8, 8, dtype=BF16))
    with pytest.raises(InputError, match="b must be 2-D, got 3-D"):
        _v(torch.empty(8, 8, dtype=BF16), torch.empty(2, 8, 8, dtype=BF16))


def test_rejects_wrong_and_mixed_dtypes():
    with pytest.raises(InputError, match="a has dtype float32, expected one of: bfloat16, float16, float8_e4m3fn"):
        _v(torch.empty(8, 8), torch.empty(8, 8))
    with pytest.raises(InputError, match="share one dtype.*a: bfloat16, b: float16"):
        _v(torch.empty(8, 8, dtype=BF16), torch.empty(8, 8, dtype=FP16))
    with pytest.raises(InputError, match="out_dtype int8 is not supported"):
        _v(torch.empty(8, 8, dtype=BF16), torch.empty(8, 8, dtype=BF16), out_dtype=torch.int8)


def test_rejects_mismatched_k():
    with pytest.raises(InputError, match=r"K \(inner dimension\) mismatch: a.shape\[1\] = 64 but b.shape\[0\] = 32"):
        _v(torch.empty(16, 64, dtype=BF16), torch.empty(32, 16, dtype=BF16))


def test_rejects_empty():
    with pytest.raises(InputError, match="a is empty"):
        _v(torch.empty(0, 64, dtype=BF16), torch.empty(64, 16, dtype=BF16))


def test_rejects_non_unit_inner_stride():
    a = torch.empty(16, 128, dtype=BF16)[:, ::2]  # [16, 64], strides (128, 2)
    with pytest.raises(InputError, match=r"a must have unit stride on its last dim, got strides \(128, 2\)"):
        _v(a, torch.empty(64, 16, dtype=BF16))
    b = torch.empty(64, 32, dtype=BF16)[:, ::2]  # neither row- nor column-major
    with pytest.raises(InputError, match="b must have unit stride.*b.contiguous"):
        _v(torch.empty(16, 64, dtype=BF16), b)


def test_rejects_misaligned_pointer():
    a = torch.empty(16 * 64 + 1, dtype=BF16)[1:].view(16, 64)  # 2-byte offset
    with pytest.raises(InputError, match=r"a.data_ptr\(\) = 0x[0-9a-f]+ is not 16-byte aligned.*a.clone\(\)"):
        _v(a, torch.empty(64, 16, dtype=BF16))


def test_rejects_unaligned_row_pitch():
    # K = 12 bf16 = 24 bytes per row of A: TMA needs 16-byte multiples.
    with pytest.raises(InputError, match="a dim 0 has stride 12 elements = 24 bytes, not a multiple of 16 bytes"):
        _v(torch.empty(16, 12, dtype=BF16), torch.empty(12, 16, dtype=BF16))
    # Column-major B is checked as B^T (its rows are the K dim): K = 24 fp8 bytes is not a 16-byte multiple.
    with pytest.raises(InputError, match=r"b.t\(\) dim 0 has stride 24 elements"):
        _v(torch.empty(1, 24, dtype=FP8), torch.empty(16, 24, dtype=FP8).t())


def test_column_major_b_is_accepted_structurally():
    # A valid column-major B gets as far as the device check.
    with pytest.raises(InputError, match="a is on device 'cpu'.*a.cuda"):
        _v(torch.empty(16, 64, dtype=FP8), torch.empty(32, 64, dtype=FP8).t())


def test_accepts_scales_on_half_inputs_rejects_bad_scale_shapes():
    a, b = torch.empty(16, 64, dtype=FP8), torch.empty(32, 64, dtype=FP8).t()
    # fp32 scales on bf16 inputs (nvfp4_matmul's dequant path) pass the structural checks: next is the device
    with pytest.raises(InputError, match="a is on device 'cpu'"):
        _v(a.to(BF16), b.to(BF16), a_scale=torch.ones(()))
    with pytest.raises(InputError, match=r"a_scale has shape \(32,\)"):
        _v(a.to(BF16), b.to(BF16), a_scale=torch.ones(32))
    with pytest.raises(InputError, match=r"a_scale has shape \(32,\), which matches no supported scale layout "
                                         r"\(per-tensor: \[\]; per-row: \[16\]\)"):
        _v(a, b, a_scale=torch.ones(32))
    with pytest.raises(InputError, match=r"b_scale has shape \(16,\).*per-column: \[32\]"):
        _v(a, b, b_scale=torch.ones(16))  # per-row size given as a column scale
    with pytest.raises(InputError, match="a_scale has dtype bfloat16, expected one of: float32"):
        _v(a, b, a_scale=torch.ones((), dtype=BF16))
    with pytest.raises(InputError, match=r"a_scale \(per-row, shape \(16,\)\) must be contiguous"):
        _v(a, b, a_scale=torch.ones(16, 2)[:, 0])


def test_rejects_cpu_and_meta_devices_last():
    a, b = torch.empty(16, 64, dtype=BF16), torch.empty(64, 32, dtype=BF16)
    with pytest.raises(InputError, match="a is on device 'cpu', but this kernel runs on a CUDA GPU"):
        _v(a, b)
    with pytest.raises(InputError, match="a is on device 'meta'"):
        _v(a.to("meta"), b.to("meta"))
    with pytest.raises(InputError, match="a is on device 'cpu'"):
        matmul(a, b)  # the public entry point validates before touching the GPU


def test_scale_layout_classification():
    check = InputChecker("t")
    layouts = {"per-tensor": (), "per-row": (16,)}
    assert check.scale("s", None, layouts) is None
    for shape in [(), (1,), (1, 1)]:
        assert check.scale("s", torch.ones(shape), layouts) == "per-tensor"
    for shape in [(16,), (16, 1), (1, 16)]:
        assert check.scale("s", torch.ones(shape), layouts) == "per-row"


def test_tma_helpers_pad_and_normalise_strides():
    c = tma_friendly_empty(5, 13, BF16, "cpu")  # 26 bytes per row -> padded to 32
    assert c.shape == (5, 13) and c.stride() == (16, 1)
    assert tma_friendly_empty(5, 16, BF16, "cpu").is_contiguous()
    row = torch.empty(1, 40, dtype=BF16)  # a size-1 dim whose stride torch leaves at 40 (80 bytes: aligned)
    weird = row.as_strided((1, 40), (3, 1))  # stride of the size-1 dim is arbitrary (6 bytes)
    desc = tma_descriptor(weird, [1, 32])
    assert desc.strides[1] == 1 and (desc.strides[0] * 2) % 16 == 0 and desc.strides[0] >= 40


# ==================================================================================================== configs
@pytest.mark.parametrize("capability", [90, 100, 120, 80])
@pytest.mark.parametrize("in_bytes,out_bytes", [(2, 2), (1, 2), (2, 4)])
def test_configs_fit_shared_memory(capability, in_bytes, out_bytes):
    cfgs = gemm_configs(capability, in_bytes, out_bytes)
    limit = _configs.MAX_SHARED_BYTES[capability // 10]
    assert cfgs, "at least one config"
    for c in cfgs:
        assert shared_bytes(c, in_bytes, out_bytes) <= limit
        assert max(c.block_m, c.block_n, c.block_k) <= 256  # TMA box dims are at most 256
        assert c.block_n % c.epilogue_split == 0


def test_configs_are_pruned_by_shared_memory():
    huge = GemmConfig(256, 256, 128, 6, 8)
    assert shared_bytes(huge, 2, 2) > _configs.MAX_SHARED_BYTES[9]
    assert not _configs.fits(huge, 2, 2, 90)
    # consumer Blackwell (99 KiB) keeps fewer configs than Hopper for the same operand type
    assert all(_configs.fits(c, 2, 2, 120) for c in gemm_configs(120, 2, 2))


def test_shape_pruning_keeps_small_tiles_for_small_problems():
    cfgs = [GemmConfig(128, 256, 64, 3, 8), GemmConfig(128, 128, 64, 4, 8)]
    assert _configs.prune_for_shape(cfgs, 4096, 100, 4096) == [cfgs[1]]
    assert _configs.prune_for_shape(cfgs, 8192, 8192, 8192) == cfgs


# ============================================================================== offline compilation (CPU)
# (name, target, config, compile_spec kwargs, expected PTX MMA regex)
_F16_KIND = r"tcgen05\.mma\.cta_group::1\.kind::f16\b"
_F8_KIND = r"tcgen05\.mma\.cta_group::1\.kind::f8f6f4\b"


def _bw(i, in_bytes=2):
    return gemm_configs(100, in_bytes, 2)[i]


def _variants():
    v = []
    for i, cfg in enumerate(gemm_configs(100, 2, 2)):
        v.append((f"sm100-bf16-cfg{i}", "sm_100a", cfg, dict(in_dtype=BF16), _F16_KIND))
    v += [
        ("sm100-bf16-rowmajorB", "sm_100a", _bw(0), dict(in_dtype=BF16, b_kmajor=False), _F16_KIND),
        ("sm100-fp16-out-fp32", "sm_100a", gemm_configs(100, 2, 4)[0], dict(in_dtype=FP16, out_dtype=FP32),
         _F16_KIND),
        ("sm100-fp8-noscale", "sm_100a", _bw(0, 1), dict(in_dtype=FP8), _F8_KIND),
        ("sm100-fp8-tensor", "sm_100a", _bw(0, 1),
         dict(in_dtype=FP8, a_scale=SCALE_TENSOR, b_scale=SCALE_TENSOR), _F8_KIND),
        ("sm100-fp8-rowcol", "sm_100a", _bw(0, 1),
         dict(in_dtype=FP8, a_scale=SCALE_VECTOR, b_scale=SCALE_VECTOR), _F8_KIND),
        ("sm100-fp8-rowmajorB", "sm_100a", _bw(0, 1), dict(in_dtype=FP8, b_kmajor=False), _F8_KIND),
    ]
    # Every config the H200 may autotune over must compile for sm_90a (catches a broken config offline).
    for i, cfg in enumerate(gemm_configs(90, 2, 2)):
        v.append((f"sm90-bf16-cfg{i}", "sm_90a", cfg, dict(in_dtype=BF16), r"wgmma\.mma_async\.\S*\.bf16\.bf16"))
    for i, cfg in enumerate(gemm_configs(90, 1, 2)):
        v.append((f"sm90-fp8-cfg{i}", "sm_90a", cfg,
                  dict(in_dtype=FP8, a_scale=SCALE_VECTOR, b_scale=SCALE_VECTOR), r"wgmma\.mma_async\.\S*\.e4m3\.e4m3"))
    return v


VARIANTS = _variants()


@pytest.fixture(scope="module", params=VARIANTS, ids=[v[0] for v in VARIANTS])
def compiled(request):
    name, target, cfg, kwargs, kind = request.param
    return request.param, bwtriton.compile(matmul_tma_persistent_kernel, target=target, **compile_spec(cfg, **kwargs))


def test_variant_emits_intended_mma(compiled):
    (name, target, cfg, kwargs, kind), result = compiled
    ptx = result.asm["ptx"]
    mmas = re.findall(r"^\s*(?:@%p\d+\s+)?(tcgen05\.mma\S*|wgmma\.mma_async\S*)", ptx, re.M)
    assert mmas, f"{name}: no MMA instruction in the PTX"
    assert all(re.match(kind, m) for m in mmas), f"{name}: unexpected MMA kinds {sorted(set(mmas))}"
    assert f".target {target}" in ptx


def test_variant_uses_tma_and_fits_estimate(compiled):
    (name, target, cfg, kwargs, kind), result = compiled
    ptx = result.asm["ptx"]
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global", ptx), "operands not loaded by TMA"
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta", ptx), "output not stored by TMA"
    in_bytes = 1 if kwargs["in_dtype"] == FP8 else 2
    out_bytes = 4 if kwargs.get("out_dtype") == FP32 else 2
    # The pruning estimate must be an upper bound of what Triton actually allocates, or pruning is unsafe.
    assert result.metadata["shared"] <= shared_bytes(cfg, in_bytes, out_bytes)


def test_variant_structure(compiled):
    (name, target, cfg, kwargs, kind), result = compiled
    ttgir = result.asm["ttgir"]
    if target == "sm_100a":
        assert "ttng.tc_gen5_mma" in ttgir and "ttng.tmem_alloc" in ttgir
        # warp-specialised configs really are: producer/MMA/epilogue partitions in the TTGIR
        assert ("ttg.warp_specialize" in ttgir) == cfg.warp_specialize, name
    else:
        assert "ttng.warp_group_dot" in ttgir
    # Operands move by TMA only: plain global loads exist exactly when there are scales to read (at least one
    # per scale; warp specialisation may clone them into several partitions).
    loads = len(re.findall(r"\btt\.load\b", ttgir))
    modes = (kwargs.get("a_scale", SCALE_NONE), kwargs.get("b_scale", SCALE_NONE))
    expected = sum(1 for m in modes if m != SCALE_NONE)
    assert (loads >= expected) and (loads > 0) == (expected > 0), f"{name}: {loads} tt.load ops for {modes}"


# ================================================================================================ GPU numerics
def _unit_roundoff(dtype: torch.dtype) -> float:
    return {BF16: 2.0 ** -8, FP16: 2.0 ** -11, FP32: 2.0 ** -24}[dtype]


def _assert_close(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale_rows=None, scale_cols=None,
                  acc_u: float = 2.0 ** -24, fro_extra: float = 0.0):
    """|c - ref| <= u_out |ref| + 2 K u_acc (|A| |B|) elementwise, ref in float64.

    u_out: rounding of the fp32 accumulator to the output type (half an ulp = unit roundoff, relative).
    2 K u_acc (|A||B|): worst-case error of summing K exact products in fp32 (tensor cores may truncate rather
    than round, hence the factor 2). Scales are exact fp32 multiplies of the fp32 sum (one more u_acc).
    """
    a64, b64 = a.double(), b.double()
    ref = a64 @ b64
    absprod = a64.abs() @ b64.abs()
    if scale_rows is not None:
        ref, absprod = ref * scale_rows, absprod * scale_rows
    if scale_cols is not None:
        ref, absprod = ref * scale_cols, absprod * scale_cols
    k = a.shape[1]
    bound = _unit_roundoff(c.dtype) * ref.abs() + (2 * k + 4) * acc_u * absprod + 1e-30
    err = (c.double() - ref).abs()
    worst = (err / bound).max().item()
    idx = torch.nonzero(err == err.max())[0].tolist()
    assert worst <= 1.0, (f"error exceeds the format bound by {worst:.2f}x; worst element {idx}: got "
                          f"{c[idx[0], idx[1]].item()}, want {ref[idx[0], idx[1]].item()}")
    if fro_extra:
        fro = (torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref)).item()
        assert fro <= _unit_roundoff(c.dtype) + fro_extra, f"relative Frobenius error {fro:.3e}"


def _fp8_tolerances(k: int) -> dict:
    """fp8 x fp8 products are exact in fp32 (4+4 significand bits). On sm_90 Triton lets wgmma accumulate with
    reduced precision ("fast accumulation", about 14 significand bits kept per k32 accumulation step), so the
    accumulation term is 2^-14 per 32 products (acc_u = 2^-14 / 32 per product) and the Frobenius error may grow
    to (K/32) * 2^-14; elsewhere accumulation is plain fp32."""
    if _cuda_cap() // 10 == 9:
        return dict(acc_u=2.0 ** -14 / 32, fro_extra=(k / 32) * 2.0 ** -14)
    return dict(acc_u=2.0 ** -24, fro_extra=2.0 ** -20)


def _first_config(dtype: torch.dtype, out_dtype: torch.dtype = BF16) -> GemmConfig:
    return gemm_configs(_cuda_cap(), 1 if dtype == FP8 else 2, 4 if out_dtype == FP32 else 2)[0]


def _cuda_cap() -> int:
    major, minor = torch.cuda.get_device_capability()
    return major * 10 + minor


def _rand(shape, dtype, gen):
    return torch.randn(shape, device="cuda", generator=gen).to(dtype)


def _make_b(k, n, dtype, col_major, gen):
    return _rand((n, k), dtype, gen).t() if col_major else _rand((k, n), dtype, gen)


@pytest.fixture(scope="module")
def gen():
    return torch.Generator(device="cuda").manual_seed(1234) if HAS_CUDA else None


HALF_SHAPES = [(256, 512, 384), (300, 520, 136), (1, 264, 512), (17, 40, 8), (1000, 776, 4096)]


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [BF16, FP16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("col_major", [False, True], ids=["Brow", "Bcol"])
@pytest.mark.parametrize("shape", HALF_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gpu_half_matmul(dtype, col_major, shape, gen):
    m, n, k = shape
    a, b = _rand((m, k), dtype, gen), _make_b(k, n, dtype, col_major, gen)
    # The first candidate config is forced (one compile per variant keeps the suite fast); the largest shape
    # goes through autotuning, and test_gpu_every_config_is_correct covers the other candidates.
    c = matmul(a, b, config=None if k >= 4096 else _first_config(dtype))
    assert c.dtype == dtype and c.shape == (m, n)
    _assert_close(c, a, b)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("cfg_index", range(8))
@pytest.mark.parametrize("dtype", [BF16, FP8], ids=["bf16", "fp8"])
def test_gpu_every_config_is_correct(cfg_index, dtype, gen):
    """Each config autotuning may pick on this GPU, forced, on a shape with tails in M, N and K."""
    cfgs = gemm_configs(_cuda_cap(), 1 if dtype == FP8 else 2, 2)
    if cfg_index >= len(cfgs):
        pytest.skip(f"only {len(cfgs)} configs for this GPU")
    m, n, k = 520, 771, 1040
    a, b = _rand((m, k), dtype, gen), _make_b(k, n, dtype, True, gen)
    if dtype == FP8:
        sa, sb = torch.rand(m, device="cuda", generator=gen) + 0.5, torch.rand(n, device="cuda", generator=gen) + 0.5
        c = matmul(a, b, a_scale=sa, b_scale=sb, config=cfgs[cfg_index])
        _assert_close(c, a, b, sa.double()[:, None], sb.double()[None, :], **_fp8_tolerances(k))
    else:
        c = matmul(a, b, config=cfgs[cfg_index])
        _assert_close(c, a, b)
    assert c.shape == (m, n) and c.stride(1) == 1  # N=771: a column view of a 16-byte padded buffer


def _fp8_cases():
    cases = [pytest.param(BF16, sc, cm, False, id=f"bf16-{sc}-{'Bcol' if cm else 'Brow'}")
             for sc in ("none", "tensor", "rowcol", "row-tensor", "tensor-col2d") for cm in (True, False)]
    return cases + [pytest.param(FP16, "rowcol", True, False, id="fp16-rowcol-Bcol"),
                    pytest.param(FP32, "tensor", True, False, id="fp32-tensor-Bcol"),
                    pytest.param(BF16, "rowcol", True, True, id="bf16-rowcol-Bcol-autotuned")]


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("out_dtype,scales,col_major,tuned", _fp8_cases())
def test_gpu_fp8_matmul(out_dtype, scales, col_major, tuned, gen):
    # N is a tail for every tile width; row-major fp8 B needs N % 16 == 0 (16-byte row pitch), B^T only K % 16.
    m, n, k = 384, 264 if col_major else 272, 2048
    a, b = _rand((m, k), FP8, gen), _make_b(k, n, FP8, col_major, gen)
    rows = torch.rand(m, device="cuda", generator=gen) + 0.5
    cols = torch.rand(n, device="cuda", generator=gen) + 0.5
    scalar_a, scalar_b = torch.tensor(0.75, device="cuda"), torch.tensor([1.5], device="cuda")
    sa, sb = {"none": (None, None), "tensor": (scalar_a, scalar_b), "rowcol": (rows, cols),
              "row-tensor": (rows[:, None], scalar_b), "tensor-col2d": (scalar_a, cols[None, :])}[scales]
    cfg = None if tuned else _first_config(FP8, out_dtype)
    c = matmul(a, b, out_dtype=out_dtype, a_scale=sa, b_scale=sb, config=cfg)
    assert c.dtype == out_dtype
    ref_rows = None if sa is None else sa.double().reshape(-1, 1)
    ref_cols = None if sb is None else sb.double().reshape(1, -1)
    _assert_close(c, a, b, ref_rows, ref_cols, **_fp8_tolerances(k))


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_gpu_strided_a_and_autotune_records_config(gen):
    from bwtriton.kernels import tuned_config
    big = _rand((640, 1024 + 64), BF16, gen)
    a = big[:, 32:32 + 1024]  # row pitch 1088 elements, base offset 64 bytes: both TMA-legal
    b = _rand((1024, 512), BF16, gen)
    c = matmul(a, b, out_dtype=FP32)
    _assert_close(c, a, b)
    assert tuned_config(a, b, out_dtype=FP32) in gemm_configs(_cuda_cap(), 2, 4)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_gpu_matches_cublas_bf16(gen):
    """Cross-check against the vendor GEMM on a large square problem (both fp32-accumulate, bf16 output)."""
    a, b = _rand((2048, 2048), BF16, gen), _rand((2048, 2048), BF16, gen)
    ours, theirs = matmul(a, b).float(), torch.matmul(a, b).float()
    # each side is within u_bf16 of the exact value; their difference within ~2 ulps
    assert ((ours - theirs).abs() <= 2 * 2.0 ** -8 * theirs.abs() + 1e-3).all()
