"""In-kernel quantize/dequantize helpers (`bwtriton.language`) are bit-exact with the torch quantizers.

Three ways to run the same checks:
* under TRITON_INTERPRET=1 on CPU: the interpreter must be switched on before `triton.jit` decorates anything, so
  the checks run in a subprocess (`python tests/language/test_language_quant.py`), once per module;
* on a CUDA GPU (`@pytest.mark.gpu`), comparing against the torch quantizer run on CPU;
* compiled for sm_100a (and sm_90) with `triton.compile` to show the helpers lower without the sm_100a-only cvt.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os

import pytest
from fixtures.interpreter import interpret_module
import torch

BM, BK = 32, 64  # tile; inputs below are [64, 128] -> a 2x2 grid of tiles


# ----------------------------------------------------------------------------------------------- inputs
def _e4m3_midpoints() -> torch.Tensor:
    """Every positive finite E4M3 value and every midpoint between neighbours (RNE ties), as float32."""
    vals = torch.arange(0, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    return torch.cat([vals, (vals[1:] + vals[:-1]) / 2])


def make_case(name: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    x = torch.randn(64, 128, generator=g)
    if name == "normal":
        return x * torch.logspace(-4, 4, 64)[:, None]
    if name == "bf16":
        return x.bfloat16()
    if name == "e2m1_ties":
        # amax 6 per block -> NVFP4 (global_scale 1) and MXFP4 both scale by exactly 1, so these hit E2M1 ties.
        ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.1, 5.5, 6.0, 0.0, 2.0, 3.0, 4.0, 1.5])
        row = torch.cat([torch.tensor([6.0]), ties, -ties, torch.tensor([-0.0])])  # 32 values
        return row.repeat(64, 4)
    if name == "fp8_ties":
        # amax in [256, 512) -> MXFP8-E4M3 scale exactly 1, so every E4M3 value and tie is hit, subnormals included.
        mids = _e4m3_midpoints()
        x = torch.zeros(64, 128)
        flat = torch.cat([mids, -mids])
        for blk in range(64 * 4):
            chunk = flat[(blk * 31) % flat.numel():][:31]
            x.view(-1, 32)[blk, : 1 + chunk.numel()] = torch.cat([torch.tensor([300.0]), chunk])
        return x
    if name == "tiny_scales":
        # One loud row sets the global scale; the rest get UE4M3-subnormal block scales.
        x = x * 1e-3
        x[7] *= 1e6
        return x
    if name == "zeros":
        x[::3] = 0
        x[:, 32:64] = 0
        return x
    if name == "nonfinite":
        x[1, 3], x[2, 40], x[5, 100] = float("nan"), float("inf"), -float("inf")
        return x
    raise KeyError(name)


NVFP4_CASES = ["normal", "bf16", "e2m1_ties", "tiny_scales", "zeros"]
MX_CASES = ["normal", "bf16", "e2m1_ties", "fp8_ties", "zeros", "nonfinite"]


# ----------------------------------------------------------------------------------------------- kernels
@functools.lru_cache(maxsize=None)
def kernels():
    """Build the test kernels lazily, so that the interpreter subprocess can set TRITON_INTERPRET first."""
    # Module globals, not locals: @triton.jit (and the interpreter) resolve names through the function's globals.
    global triton, tl, bl
    import triton
    import triton.language as tl

    from bwtriton import language as bl

    @triton.jit
    def nvfp4_roundtrip(x_ptr, s_enc_ptr, q_ptr, sc_ptr, deq_ptr, qdq_ptr, K, BM: tl.constexpr, BK: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
        k0 = tl.program_id(1) * BK
        x = tl.load(x_ptr + rm * K + k0 + tl.arange(0, BK)[None, :])
        s_enc = tl.load(s_enc_ptr)
        q, s = bl.quantize_nvfp4_tile(x, s_enc)
        tl.store(q_ptr + rm * (K // 2) + k0 // 2 + tl.arange(0, BK // 2)[None, :], q)
        tl.store(sc_ptr + rm * (K // 16) + k0 // 16 + tl.arange(0, BK // 16)[None, :], s)
        deq = bl.dequantize_nvfp4_tile(q, s, tl.math.div_rn(1.0, s_enc))
        tl.store(deq_ptr + rm * K + k0 + tl.arange(0, BK)[None, :], deq)
        tl.store(qdq_ptr + rm * K + k0 + tl.arange(0, BK)[None, :], bl.quant_dequant_nvfp4_tile(x, s_enc))

    @triton.jit
    def e2m1_values(x_ptr, round_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(round_ptr + offs, bl.e2m1_round(tl.load(x_ptr + offs)))

    @triton.jit
    def mx_roundtrip(x_ptr, q_ptr, sc_ptr, deq_ptr, K, BM: tl.constexpr, BK: tl.constexpr, FP4: tl.constexpr,
                     E5M2: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
        k0 = tl.program_id(1) * BK
        x = tl.load(x_ptr + rm * K + k0 + tl.arange(0, BK)[None, :])
        if FP4:
            q, s = bl.quantize_mxfp4_tile(x)
            tl.store(q_ptr + rm * (K // 2) + k0 // 2 + tl.arange(0, BK // 2)[None, :], q)
            deq = bl.dequantize_mxfp4_tile(q, s)
        else:
            q, s = bl.quantize_mxfp8_tile(x, E5M2)
            tl.store(q_ptr + rm * K + k0 + tl.arange(0, BK)[None, :], q.to(tl.uint8, bitcast=True))
            deq = bl.dequantize_mxfp8_tile(q, s)
        tl.store(sc_ptr + rm * (K // 32) + k0 // 32 + tl.arange(0, BK // 32)[None, :], s)
        tl.store(deq_ptr + rm * K + k0 + tl.arange(0, BK)[None, :], deq)

    @triton.jit
    def unswizzle_5d(blocked_ptr, out_ptr, BM: tl.constexpr, NKB: tl.constexpr):
        """Triton block-scaled tutorial: load (BM//128, NKB//4, 32, 4, 4), trans(0, 3, 2, 1, 4), reshape."""
        offs = tl.arange(0, BM * NKB)
        s = tl.load(blocked_ptr + offs)
        s = tl.reshape(s, (BM // 128, NKB // 4, 32, 4, 4)).trans(0, 3, 2, 1, 4).reshape(BM, NKB)
        tl.store(out_ptr + tl.arange(0, BM)[:, None] * NKB + tl.arange(0, NKB)[None, :], s)

    return nvfp4_roundtrip, mx_roundtrip, unswizzle_5d, e2m1_values


# ----------------------------------------------------------------------------------------------- checks
def _diff(name, got, want):
    got, want = got.cpu(), want.cpu()
    if got.dtype.is_floating_point:  # compare bits, so -0 vs +0 counts; any NaN matches any NaN
        both_nan = torch.isnan(got) & torch.isnan(want)
        mismatch = (got.view(torch.int32) != want.view(torch.int32)) & ~both_nan
    else:
        mismatch = got != want
    bad = mismatch.nonzero()
    return None if bad.numel() == 0 else f"{name}: {bad.shape[0]} mismatches, first at {bad[0].tolist()}"


def check_nvfp4(case: str, device: str) -> str | None:
    from bwtriton.formats import quantize_nvfp4
    nvfp4_roundtrip, _, _, _ = kernels()
    x = make_case(case)
    ref = quantize_nvfp4(x, global_scale=1.0 if case == "e2m1_ties" else None)
    M, K = x.shape
    xd = x.to(device)
    q = torch.empty(M, K // 2, dtype=torch.uint8, device=device)
    sc = torch.empty(M, K // 16, dtype=torch.float8_e4m3fn, device=device)
    deq = torch.empty(M, K, dtype=torch.float32, device=device)
    qdq = torch.empty(M, K, dtype=torch.float32, device=device)
    nvfp4_roundtrip[(M // BM, K // BK)](xd, ref.global_encode_scale.reshape(1).to(device), q, sc, deq, qdq, K, BM,
                                        BK)
    unscaled = dataclasses.replace(ref, global_scale=torch.tensor(1.0))  # e2m1 * scale, the global scale left out
    errs = [_diff("data", q, ref.data), _diff("scales", sc.view(torch.uint8), ref.scales_u8),
            _diff("dequant", deq, ref.dequantize()), _diff("quant_dequant", qdq, unscaled.dequantize())]
    return "; ".join(e for e in errs if e) or None


def check_mx(case: str, fmt: str, device: str) -> str | None:
    from bwtriton.formats import quantize_mxfp4, quantize_mxfp8
    _, mx_roundtrip, _, _ = kernels()
    x = make_case(case)
    fp4, e5 = fmt == "mxfp4", fmt == "mxfp8_e5m2"
    ref = quantize_mxfp4(x) if fp4 else quantize_mxfp8(x, torch.float8_e5m2 if e5 else torch.float8_e4m3fn)
    M, K = x.shape
    q = torch.empty(M, K // 2 if fp4 else K, dtype=torch.uint8, device=device)
    sc = torch.empty(M, K // 32, dtype=torch.uint8, device=device)
    deq = torch.empty(M, K, dtype=torch.float32, device=device)
    mx_roundtrip[(M // BM, K // BK)](x.to(device), q, sc, deq, K, BM, BK, fp4, e5)
    errs = [_diff("data", q, ref.data.view(torch.uint8)), _diff("scales", sc, ref.scales_u8),
            _diff("dequant", deq, ref.dequantize())]
    return "; ".join(e for e in errs if e) or None


def e2m1_inputs() -> torch.Tensor:
    """Every bf16 bit pattern as float32 (both signs, zeros, subnormals, Inf, NaN), and the float32 neighbours of
    every E2M1 rounding threshold and grid value (one ulp either side)."""
    from bwtriton.formats.e2m1 import E2M1_THRESHOLDS, E2M1_VALUES
    every_bf16 = torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    edges = torch.tensor([t for t, _ in E2M1_THRESHOLDS] + list(E2M1_VALUES[1:]) + [7.0, 8.0, 12.0])
    near = torch.cat([edges, torch.nextafter(edges, torch.zeros_like(edges)),
                      torch.nextafter(edges, torch.full_like(edges, 100.0))])
    x = torch.cat([every_bf16, near, -near])
    return torch.cat([x, torch.zeros(-x.numel() % 1024)])


def check_e2m1_round(device: str) -> str | None:
    """e2m1_round(x) against the torch codec's value of x (`formats.e2m1`), bits compared: -0 and NaN included."""
    from bwtriton.formats.e2m1 import e2m1_decode, e2m1_encode
    _, _, _, e2m1_values = kernels()
    x = e2m1_inputs()
    out = torch.empty_like(x, device=device)
    e2m1_values[(x.numel() // 1024,)](x.to(device), out, 1024)
    return _diff("e2m1_round", out, e2m1_decode(e2m1_encode(x)))


def check_unswizzle(device: str) -> str | None:
    from bwtriton.formats import to_blocked_scales
    _, _, unswizzle_5d, _ = kernels()
    rows, nkb = 256, 8
    plain = torch.arange(rows * nkb, dtype=torch.int32).reshape(rows, nkb)
    out = torch.empty_like(plain, device=device)
    unswizzle_5d[(1,)](to_blocked_scales(plain).to(device), out, rows, nkb)
    return _diff("unswizzled", out, plain)


def all_checks(device: str) -> dict:
    results = {f"nvfp4-{c}": check_nvfp4(c, device) for c in NVFP4_CASES}
    for fmt in ("mxfp4", "mxfp8_e4m3", "mxfp8_e5m2"):
        results.update({f"{fmt}-{c}": check_mx(c, fmt, device) for c in MX_CASES})
    results["unswizzle_5d"] = check_unswizzle(device)
    results["e2m1_round"] = check_e2m1_round(device)
    return results


ALL_NAMES = ([f"nvfp4-{c}" for c in NVFP4_CASES]
             + [f"{f}-{c}" for f in ("mxfp4", "mxfp8_e4m3", "mxfp8_e5m2") for c in MX_CASES] + ["unswizzle_5d", "e2m1_round"])


# ----------------------------------------------------------------------------------------------- interpreter (CPU)
@pytest.fixture(scope="module")
def interpreter_results():
    return interpret_module(__file__)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_bit_exact_under_interpreter(interpreter_results, name):
    assert interpreter_results[name] is None, interpreter_results[name]


# ----------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("case", NVFP4_CASES)
def test_nvfp4_bit_exact_gpu(case):
    assert check_nvfp4(case, "cuda") is None


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8_e4m3", "mxfp8_e5m2"])
@pytest.mark.parametrize("case", MX_CASES)
def test_mx_bit_exact_gpu(fmt, case):
    assert check_mx(case, fmt, "cuda") is None


@pytest.mark.gpu
def test_unswizzle_5d_gpu():
    assert check_unswizzle("cuda") is None


@pytest.mark.gpu
def test_e2m1_round_bit_exact_gpu():
    assert check_e2m1_round("cuda") is None


# ----------------------------------------------------------------------------------------------- compile-only
@pytest.fixture(scope="module")
def compiled():
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("compile test needs the real compiler, not the interpreter")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    nvfp4_roundtrip, mx_roundtrip, _, _ = kernels()
    out = {}
    for arch in (100, 90):
        target = GPUTarget("cuda", arch, 32)
        src = ASTSource(fn=nvfp4_roundtrip, signature={"x_ptr": "*bf16", "s_enc_ptr": "*fp32", "q_ptr": "*u8",
                                                       "sc_ptr": "*fp8e4nv", "deq_ptr": "*fp32", "qdq_ptr": "*fp32",
                                                       "K": "i32",
                                                       "BM": "constexpr", "BK": "constexpr"},
                        constexprs={"BM": 128, "BK": 64})
        out[("nvfp4", arch)] = triton.compile(src, target=target)
        src = ASTSource(fn=mx_roundtrip, signature={"x_ptr": "*fp32", "q_ptr": "*u8", "sc_ptr": "*u8",
                                                    "deq_ptr": "*fp32", "K": "i32", "BM": "constexpr",
                                                    "BK": "constexpr", "FP4": "constexpr", "E5M2": "constexpr"},
                        constexprs={"BM": 128, "BK": 128, "FP4": False, "E5M2": False})
        out[("mxfp8", arch)] = triton.compile(src, target=target)
    return out


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp8"])
@pytest.mark.parametrize("arch", [100, 90])
def test_helpers_lower_to_ptx(compiled, fmt, arch):
    kernel = compiled[(fmt, arch)]
    ptx = kernel.asm["ptx"]
    assert f".target sm_{arch}a" in ptx and kernel.asm["cubin"]
    # Portable arithmetic: no sm_100a-only FP4 cvt, no approximate division (that would break bit-exactness).
    assert "e2m1x2" not in ptx and "div.full" not in ptx and "div.approx" not in ptx
    if fmt == "nvfp4":
        assert "div.rn.f32" in ptx


if __name__ == "__main__":
    print(json.dumps(all_checks("cpu")))
