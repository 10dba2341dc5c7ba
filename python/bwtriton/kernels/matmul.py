"""`matmul`: a persistent TMA GEMM for bf16/fp16 and scaled fp8 (e4m3), autotuned per GPU family.

One Triton kernel serves every variant; constexpr switches pick the B layout and the scale modes:

* sm_90 (Hopper): TMA loads into a multi-stage shared-memory ring feeding async `wgmma`; persistent CTAs walk
  output tiles in grouped order (GROUP_M tiles down M before moving along N, so B tiles stay in L2).
* sm_100a (Blackwell): the same source lowers to `tcgen05.mma` (`kind::f16` / `kind::f8f6f4`) with the
  accumulator in TMEM, warp-specialised into TMA-producer, MMA and epilogue partitions.

The epilogue applies fp8 scales in fp32 (per-tensor scalars or per-row / per-column vectors), casts, and
stores through TMA in column slices so that smem for the output stays small. Tails in M, N and K need no masks:
TMA zero-fills out-of-bounds loads and clips out-of-bounds stores.
"""
from __future__ import annotations

from typing import Callable

import torch
import triton
import triton.language as tl

from ..targets import B200_SM_COUNT
from ._configs import GemmConfig, gemm_configs, prune_for_shape
from ._device import device_capability, sm_count
from ._launcher import CachedLauncher, run_entry
from ._tiles import grouped_tile_coords
from ._validate import (OUT_DTYPES, InputChecker, dtype_name, rebased_descriptor, tma_descriptor,
                        tma_friendly_empty)

# Scale modes (constexpr A_SCALE / B_SCALE).
SCALE_NONE, SCALE_TENSOR, SCALE_VECTOR = 0, 1, 2

FP8_E4M3 = torch.float8_e4m3fn
_HALF_DTYPES = (torch.bfloat16, torch.float16)
_IN_DTYPES = _HALF_DTYPES + (FP8_E4M3,)


@triton.jit
def matmul_tma_persistent_kernel(
        a_desc, b_desc, c_desc, a_scale_ptr, b_scale_ptr, M, N, K,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
        NUM_SMS: tl.constexpr, B_KMAJOR: tl.constexpr, A_SCALE: tl.constexpr, B_SCALE: tl.constexpr,
        EPILOGUE_SPLIT: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, FLATTEN: tl.constexpr):
    """C[M, N] = (A[M, K] @ B[K, N]) * a_scale * b_scale with fp32 accumulation.

    a_desc: TMA descriptor of A [M, K], block [BLOCK_M, BLOCK_K].
    b_desc: of B^T [N, K] (block [BLOCK_N, BLOCK_K]) when B_KMAJOR, else of B [K, N] (block [BLOCK_K, BLOCK_N]).
    c_desc: of C [M, N], block [BLOCK_M, BLOCK_N // EPILOGUE_SPLIT].
    A_SCALE: 0 none, 1 one fp32 scalar at a_scale_ptr, 2 an fp32 vector of M row scales.
    B_SCALE: 0 none, 1 one fp32 scalar, 2 an fp32 vector of N column scales.
    """
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n
    out_ty: tl.constexpr = c_desc.dtype
    SUB_N: tl.constexpr = BLOCK_N // EPILOGUE_SPLIT

    # Per-tensor scales are loaded once per CTA, not per tile.
    scalar_scale = 1.0
    if A_SCALE == 1:
        scalar_scale = scalar_scale * tl.load(a_scale_ptr)
    if B_SCALE == 1:
        scalar_scale = scalar_scale * tl.load(b_scale_ptr)

    for tile_id in tl.range(start, num_tiles, NUM_SMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = grouped_tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            a = a_desc.load([off_m, off_k])
            if B_KMAJOR:
                b = b_desc.load([off_n, off_k])
                acc = tl.dot(a, b.T, acc)
            else:
                b = b_desc.load([off_k, off_n])
                acc = tl.dot(a, b, acc)

        if A_SCALE == 1 or B_SCALE == 1:
            acc = acc * scalar_scale
        if A_SCALE == 2:
            rows = off_m + tl.arange(0, BLOCK_M)
            acc = acc * tl.load(a_scale_ptr + rows, mask=rows < M, other=0.0)[:, None]
        if B_SCALE == 2:
            cols = off_n + tl.arange(0, BLOCK_N)
            acc = acc * tl.load(b_scale_ptr + cols, mask=cols < N, other=0.0)[None, :]

        if EPILOGUE_SPLIT == 2:
            # Two column halves: the second half's conversion overlaps the first half's TMA store.
            halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, SUB_N)), (0, 2, 1))
            acc0, acc1 = tl.split(halves)
            c_desc.store([off_m, off_n], acc0.to(out_ty))
            c_desc.store([off_m, off_n + SUB_N], acc1.to(out_ty))
        else:
            c_desc.store([off_m, off_n], acc.to(out_ty))


# ------------------------------------------------------------------------------------------------ validation
_check = InputChecker("matmul")


def _scale_mode(layout: str | None) -> int:
    return {None: SCALE_NONE, "per-tensor": SCALE_TENSOR}.get(layout, SCALE_VECTOR)


def validate_matmul_inputs(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype | None,
                           a_scale: torch.Tensor | None, b_scale: torch.Tensor | None) -> dict:
    """Check `matmul`'s arguments; returns the resolved launch facts or raises InputError.

    Structural checks (dims, dtypes, K, strides, alignment, scale shapes) come before the device check, so all
    of them can be exercised with CPU tensors.
    """
    _check.tensor("a", a, ndim=2, dtypes=_IN_DTYPES,
                  dtype_hint="cast with a.to(torch.bfloat16) or quantize to torch.float8_e4m3fn")
    _check.tensor("b", b, ndim=2, dtypes=_IN_DTYPES,
                  dtype_hint="cast with b.to(torch.bfloat16) or quantize to torch.float8_e4m3fn")
    _check.same_dtype({"a": a, "b": b})
    (m, k), (k2, n) = a.shape, b.shape
    _check.dims_match("K (inner dimension)", k, "a.shape[1]", k2, "b.shape[0]")
    for name, t in (("a", a), ("b", b)):
        _check.nonempty(name, t)
    is_fp8 = a.dtype == FP8_E4M3
    if out_dtype is None:
        out_dtype = torch.bfloat16 if is_fp8 else a.dtype
    if out_dtype not in OUT_DTYPES:
        raise _check.fail(f"out_dtype {dtype_name(out_dtype)} is not supported; use one of "
                          f"{', '.join(dtype_name(d) for d in OUT_DTYPES)}")

    # A must be row-major. B may be row-major [K, N] or column-major (B^T contiguous, as torch._scaled_mm
    # wants): the latter is read K-major, which fp8 wgmma requires without a transpose in shared memory.
    _check.tma_compatible("a", a)
    b_kmajor = b.stride(0) == 1 and (b.stride(1) != 1 or n == 1)
    if b_kmajor:
        _check.tma_compatible("b.t()", b.t())
    else:
        _check.tma_compatible("b", b)

    a_layout = _check.scale("a_scale", a_scale, {"per-tensor": (), "per-row": (m,)})
    b_layout = _check.scale("b_scale", b_scale, {"per-tensor": (), "per-column": (n,)})
    device = _check.on_cuda({"a": a, "b": b, "a_scale": a_scale, "b_scale": b_scale})
    return dict(m=m, n=n, k=k, out_dtype=out_dtype, b_kmajor=b_kmajor, device=device,
                a_scale_mode=_scale_mode(a_layout), b_scale_mode=_scale_mode(b_layout))


def _tensor_key(t: "torch.Tensor | None") -> tuple:
    if t is None:
        return ()
    return (t.dtype, t.device, t.shape, t.stride(), t.data_ptr() % 16)  # torch.Size hashes as the tuple


#: Validated launch facts per argument signature (shapes, strides, dtypes, devices, 16-byte alignment): a call
#: whose arguments look like an earlier valid call's skips the checks (~20 us of Python) and reuses its facts.
_FACTS: dict[tuple, dict] = {}


def _facts(a, b, out_dtype, a_scale, b_scale) -> dict:
    try:  # _tensor_key inlined for a and b, which are always there (two calls less per matmul)
        key = ((a.dtype, a.device, a.shape, a.stride(), a.data_ptr() % 16),
               (b.dtype, b.device, b.shape, b.stride(), b.data_ptr() % 16), out_dtype,
               () if a_scale is None else _tensor_key(a_scale), () if b_scale is None else _tensor_key(b_scale))
    except (AttributeError, TypeError):  # not tensors: let the checks name the problem
        return validate_matmul_inputs(a, b, out_dtype, a_scale, b_scale)
    facts = _FACTS.get(key)
    if facts is None:
        facts = validate_matmul_inputs(a, b, out_dtype, a_scale, b_scale)
        facts["key"] = key
        if len(_FACTS) < 4096:  # bounded: a caller with ever-new shapes must not grow it without limit
            _FACTS[key] = facts
    return facts


# -------------------------------------------------------------------------------------------------- launch
def _descriptors(a, b, c, b_kmajor: bool, cfg: GemmConfig):
    a_desc = tma_descriptor(a, [cfg.block_m, cfg.block_k])
    if b_kmajor:
        b_desc = tma_descriptor(b.t(), [cfg.block_n, cfg.block_k])
    else:
        b_desc = tma_descriptor(b, [cfg.block_k, cfg.block_n])
    c_desc = tma_descriptor(c, [cfg.block_m, cfg.block_n // cfg.epilogue_split])
    return a_desc, b_desc, c_desc


_LAUNCHER = CachedLauncher(matmul_tma_persistent_kernel, pipeline=False)


def _launch(a, b, c, a_scale, b_scale, facts: dict, cfg: GemmConfig) -> tuple:
    m, n, k = facts["m"], facts["n"], facts["k"]
    num_sms = sm_count(facts["device"])
    tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n)
    # NUM_SMS (the tile-loop stride) stays the SM count even when fewer tiles than SMs launch fewer programs:
    # each program then owns one tile, and the kernel is not recompiled for every small shape.
    grid = (max(1, min(num_sms, tiles)),)
    a_desc, b_desc, c_desc = _descriptors(a, b, c, facts["b_kmajor"], cfg)
    # The facts key already names shapes, strides, dtypes and scale modes; c's strides follow from (m, n, dtype).
    return _LAUNCHER.launch((facts.get("key"), cfg), grid, facts["device"],
                            (a_desc, b_desc, c_desc, a_scale, b_scale, m, n, k),
                                   dict(NUM_SMS=num_sms, B_KMAJOR=facts["b_kmajor"], A_SCALE=facts["a_scale_mode"],
                                 B_SCALE=facts["b_scale_mode"], **cfg.kernel_kwargs()))


# Best config per (device capability, dtypes, layout, scale modes, shape bucket).
_TUNED: dict[tuple, GemmConfig] = {}
#: Timings (ms) of every config tried, per tuning key; the benchmark prints the winner from here.
TUNING_LOG: dict[tuple, dict[str, float]] = {}


def _shape_bucket(m: int, n: int, k: int) -> tuple:
    """Shapes that round to the same powers of two share a tuned config (keeps autotuning to once per bucket)."""
    return tuple(1 << max(0, (x - 1).bit_length()) for x in (m, n, k))


def _tuning_key(a, facts: dict) -> tuple:
    cap = device_capability(facts["device"])
    return (cap, a.dtype, facts["out_dtype"], facts["b_kmajor"], facts["a_scale_mode"], facts["b_scale_mode"],
            _shape_bucket(facts["m"], facts["n"], facts["k"]))


def _candidates(a, facts: dict) -> list[GemmConfig]:
    cap = device_capability(facts["device"])
    cfgs = gemm_configs(cap, a.element_size(), facts["out_dtype"].itemsize)
    return prune_for_shape(cfgs, facts["m"], facts["n"], facts["k"])


def _autotune(run: Callable[[GemmConfig], None], cands: list[GemmConfig], key: tuple) -> GemmConfig:
    """Time each candidate (short warmup/rep so first use of a shape stays quick); return the fastest.

    A candidate that fails to compile or launch (e.g. runs out of resources) is skipped; if all fail, the first
    one's error is raised.
    """
    if len(cands) == 1:
        return cands[0]
    timings: dict[GemmConfig, float] = {}
    first_error: Exception | None = None
    for cfg in cands:
        try:
            run(cfg)  # compile + warm up
            timings[cfg] = triton.testing.do_bench(lambda: run(cfg), warmup=5, rep=25)
        except Exception as exc:  # noqa: BLE001 - a bad candidate must not make the GEMM unusable
            first_error = first_error or exc
    if not timings:
        raise first_error  # type: ignore[misc]
    TUNING_LOG[key] = {c.short(): t for c, t in timings.items()}
    return min(timings, key=timings.get)


def matmul(a: torch.Tensor, b: torch.Tensor, *, out_dtype: torch.dtype | None = None,
           a_scale: torch.Tensor | None = None, b_scale: torch.Tensor | None = None,
           config: GemmConfig | None = None) -> torch.Tensor:
    """C = A @ B on the GPU (fp32 accumulation), returning a new [M, N] tensor.

    * bf16/fp16: `a` [M, K] row-major, `b` [K, N] row-major or column-major; output dtype = input dtype unless
      `out_dtype` (bf16, fp16 or fp32) is given.
    * fp8 e4m3 (`torch.float8_e4m3fn`): optional fp32 `a_scale` (scalar tensor, or [M] per-row) and `b_scale`
      (scalar, or [N] per-column); C = (A @ B) * a_scale * b_scale; output bf16 by default. Column-major `b`
      (`b = w.t()` for a row-major [N, K] `w`, as `torch._scaled_mm` takes it) is the fast layout.
    * The same fp32 scales are accepted for bf16/fp16 inputs (applied to the fp32 accumulator before the cast):
      `nvfp4_matmul`'s dequantize-then-bf16-GEMM path passes its global-scale product as `a_scale`.

    Rows of `a` and `b` must span a multiple of 16 bytes (TMA row pitch: K % 8 == 0 for bf16, K % 16 == 0 for
    fp8; likewise N for row-major `b`); M, N, K need not be multiples of the tile. When N * out-itemsize is not a
    multiple of 16 the result is a column slice of a padded buffer (unit inner stride, not `is_contiguous()`).
    `config` forces one `GemmConfig` instead of autotuning. Bad inputs raise `bwtriton.errors.InputError`.
    """
    facts = _facts(a, b, out_dtype, a_scale, b_scale)
    if config is None and "plan" in facts:
        return facts["plan"](a, b, a_scale, b_scale)
    c = tma_friendly_empty(facts["m"], facts["n"], facts["out_dtype"], a.device)

    def run(cfg: GemmConfig) -> tuple:
        return _launch(a, b, c, a_scale, b_scale, facts, cfg)

    if config is not None:
        run(config)
        return c
    key = _tuning_key(a, facts)
    tuned = _TUNED.get(key)
    if tuned is None:
        tuned = _TUNED[key] = _autotune(run, _candidates(a, facts), key)
    entry = run(tuned)
    if "key" in facts:  # cached facts: later calls with this signature replay the launch
        facts["plan"] = _plan(facts, tuned, entry, a, c)
    return c


def _plan(facts: dict, cfg: GemmConfig, entry: tuple, a: torch.Tensor, c: torch.Tensor) -> Callable:
    """A replay of `matmul` for one validated argument signature and its tuned config: allocate C, build the three
    descriptors (pointers change between calls), launch the compiled kernel. `a` and `c` are the first call's:
    the key fixes their layouts, so their descriptors are templates that each call rebases."""
    m, n, k, out_dtype, device, b_kmajor = (facts[x] for x in ("m", "n", "k", "out_dtype", "device", "b_kmajor"))
    tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n)
    grid = (max(1, min(sm_count(device), tiles)), 1, 1)

    b_block = [cfg.block_n, cfg.block_k] if b_kmajor else [cfg.block_k, cfg.block_n]
    a_desc = tma_descriptor(a, [cfg.block_m, cfg.block_k])
    c_desc = tma_descriptor(c, [cfg.block_m, cfg.block_n // cfg.epilogue_split])
    a_desc.base = c_desc.base = None  # templates: they must not keep the first call's tensors alive
    last_b: list = [None, None]  # (b, its descriptor): a weight passed again reuses its descriptor

    def plan(a, b, a_scale, b_scale) -> torch.Tensor:
        c = tma_friendly_empty(m, n, out_dtype, device)
        if b is not last_b[0]:
            last_b[:] = [b, tma_descriptor(b.t() if b_kmajor else b, b_block)]
        run_entry(entry, grid, device, (rebased_descriptor(a_desc, a), last_b[1], rebased_descriptor(c_desc, c),
                                        a_scale, b_scale, m, n, k))
        return c
    return plan


def tuned_config(a: torch.Tensor, b: torch.Tensor, **kwargs) -> GemmConfig | None:
    """The config `matmul(a, b, **kwargs)` would use now (None before the first call tunes it)."""
    facts = validate_matmul_inputs(a, b, kwargs.get("out_dtype"), kwargs.get("a_scale"), kwargs.get("b_scale"))
    return _TUNED.get(_tuning_key(a, facts))


# ------------------------------------------------------------------------------------ offline compilation
_TRITON_DTYPE = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", FP8_E4M3: "fp8e4nv"}


def compile_spec(cfg: GemmConfig, in_dtype: torch.dtype = torch.bfloat16, out_dtype: torch.dtype | None = None,
                 *, b_kmajor: bool = True, a_scale: int = SCALE_NONE, b_scale: int = SCALE_NONE,
                 num_sms: int = B200_SM_COUNT) -> dict:
    """Arguments for `bwtriton.compile(matmul_tma_persistent_kernel, **spec)`: compile a variant without a GPU.

    Returns signature, constexprs, num_warps and num_stages (target is left to the caller).
    """
    out_dtype = out_dtype or (torch.bfloat16 if in_dtype == FP8_E4M3 else in_dtype)
    ti, to = _TRITON_DTYPE[in_dtype], _TRITON_DTYPE[out_dtype]
    b_block = [cfg.block_n, cfg.block_k] if b_kmajor else [cfg.block_k, cfg.block_n]
    sig = {"a_desc": f"tensordesc<{ti}[{cfg.block_m}, {cfg.block_k}]>",
           "b_desc": f"tensordesc<{ti}[{b_block[0]}, {b_block[1]}]>",
           "c_desc": f"tensordesc<{to}[{cfg.block_m}, {cfg.block_n // cfg.epilogue_split}]>",
           "M": "i32", "N": "i32", "K": "i32"}
    constexprs = {k: v for k, v in cfg.kernel_kwargs().items() if k not in ("num_warps", "num_stages")}
    constexprs.update(NUM_SMS=num_sms, B_KMAJOR=b_kmajor, A_SCALE=a_scale, B_SCALE=b_scale)
    for name, mode in (("a_scale_ptr", a_scale), ("b_scale_ptr", b_scale)):
        if mode == SCALE_NONE:
            constexprs[name] = None
        else:
            sig[name] = "*fp32"
    return dict(signature=sig, constexprs=constexprs, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
