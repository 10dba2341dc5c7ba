"""`lower-nvfp4-portable`: which ops it rewrites per target, that the rewritten module compiles (sm_90a wgmma,
sm_100a keeps kind::mxf4nvf4), and that the emitted TTIR computes exactly dequant(A) @ dequant(B).

The numerics check on CPU runs the *emitted TTIR text* through a small evaluator of the ops it may contain
(written here from the MLIR op semantics, independent of the emitter), on random E2M1 codes and UE4M3 scales.
The dequantized products are exact, so the expected result is the float64 product of `bwtriton.formats`'
dequantized operands up to fp32-accumulation-free float64 evaluation: the comparison is exact equality.
On the GPU the same pass runs inside real kernels (test_kernels_blockscaled on the H200 and below).
"""
from __future__ import annotations

import re

import pytest
import torch

import bwtriton
from bwtriton.formats import e2m1_decode, unpack_e2m1
from bwtriton.mlir.dot_scaled import parse_dot_scaled
from bwtriton.passes.lower_nvfp4_portable import lower_dot_scaled, natively_supported
from bwtriton.targets import get_target

import triton
import triton.language as tl


@triton.jit
def nvfp4_dot_kernel(a_ptr, as_ptr, b_ptr, bs_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                     LHS_BF16: tl.constexpr):
    """One-tile user kernel: C = dot_scaled(A, B^T) with NVFP4 B [BN, BK/2] and NVFP4 or bf16 A."""
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rkh = tl.arange(0, BK // 2)
    rks = tl.arange(0, BK // 16)
    b = tl.load(b_ptr + rn[:, None] * (BK // 2) + rkh[None, :])
    sb = tl.load(bs_ptr + rn[:, None] * (BK // 16) + rks[None, :])
    if LHS_BF16:
        rk = tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
        acc = tl.dot_scaled(a, None, "bf16", b.T, sb, "e2m1")
    else:
        a = tl.load(a_ptr + rm[:, None] * (BK // 2) + rkh[None, :])
        sa = tl.load(as_ptr + rm[:, None] * (BK // 16) + rks[None, :])
        acc = tl.dot_scaled(a, sa, "e2m1", b.T, sb, "e2m1")
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def _sig(lhs_bf16: bool) -> dict:
    return {"a_ptr": "*bf16" if lhs_bf16 else "*u8", "as_ptr": "*fp8e4nv", "b_ptr": "*u8", "bs_ptr": "*fp8e4nv",
            "c_ptr": "*fp32"}


CONST = {"BM": 64, "BN": 64, "BK": 128}
NATIVE_TILE = {"BM": 128, "BN": 64, "BK": 128}  # sm_100a's native NVFP4 MMA needs a 128-row tile


@pytest.fixture(scope="module")
def compiled():
    """Each (target, lhs) case compiled once."""
    out = {}
    for target, lhs_bf16 in (("sm_90a", False), ("sm_90a", True), ("sm_100a", False), ("sm_100a", True)):
        tile = NATIVE_TILE if target == "sm_100a" and not lhs_bf16 else CONST
        out[target, lhs_bf16] = bwtriton.compile(nvfp4_dot_kernel, signature=_sig(lhs_bf16), target=target,
                                                 constexprs=dict(tile, LHS_BF16=lhs_bf16))
    return out


def test_sm90_rewrites_nvfp4_into_wgmma(compiled):
    r = compiled["sm_90a", False]
    assert "tt.dot_scaled" in r.asm["ttir_triton"]
    assert "tt.dot_scaled" not in r.asm["ttir"] and re.search(r"tt\.dot .*tensor<64x128xbf16> \* "
                                                                  r"tensor<128x64xbf16>", r.asm["ttir"])
    assert r.reports["lower-nvfp4-portable"]["lowered"] == 1
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16", r.asm["ptx"])


def test_mixed_bf16_x_nvfp4_is_lowered_even_on_sm100(compiled):
    # Triton 3.6 crashes on this one on every target (accelerate-matmul decomposition with UE4M3 scales).
    r = compiled["sm_100a", True]
    assert r.reports["lower-nvfp4-portable"]["ops"][0]["action"].startswith("lowered")
    assert "tcgen05.mma.cta_group::1.kind::f16" in r.asm["ptx"]


def test_sm100_keeps_native_nvfp4(compiled):
    r = compiled["sm_100a", False]
    assert r.reports["lower-nvfp4-portable"]["kept_native"] == 1
    assert "kind::mxf4nvf4.block_scale.scale_vec::4X" in r.asm["ptx"]


def test_native_rule_per_target(compiled):
    op = parse_dot_scaled(next(ln for ln in compiled["sm_100a", False].asm["ttir"].splitlines()
                               if "tt.dot_scaled" in ln))
    assert natively_supported(op, get_target("sm_100a")) and natively_supported(op, get_target("sm_120a"))
    assert not natively_supported(op, get_target("sm_90a")) and not natively_supported(op, get_target("sm_80"))


def test_force_option_lowers_on_sm100():
    r = bwtriton.compile(nvfp4_dot_kernel, signature=_sig(False), target="sm_100a",
                         constexprs=dict(NATIVE_TILE, LHS_BF16=False), passes=["lower-nvfp4-portable{force=true}"])
    assert "kind::mxf4nvf4" not in r.asm["ptx"] and "kind::f16" in r.asm["ptx"]


def test_64_row_tile_is_lowered_on_sm100():
    # Triton would fall back to its (crashing) decomposition for a 64-row NVFP4 tile even on sm_100a.
    r = bwtriton.compile(nvfp4_dot_kernel, signature=_sig(False), target="sm_100a",
                         constexprs=dict(CONST, LHS_BF16=False))
    assert r.reports["lower-nvfp4-portable"]["lowered"] == 1 and "kind::f16" in r.asm["ptx"]


# ----------------------------------------------------------------------------------------- TTIR text evaluator

_LINE = re.compile(r"^\s*(%[\w.$\-#]+) = ([\w.]+) (.*?)(?:\s+loc\(.*\))?$")
_TYPE = re.compile(r"tensor<((?:\d+x)*)(\w+)>")
_TORCH = {"i8": torch.uint8, "i16": torch.int16, "i32": torch.int32, "f16": torch.float16, "bf16": torch.bfloat16,
          "f32": torch.float32, "f8E4M3FN": torch.float8_e4m3fn, "i1": torch.bool}


def _types(text: str):
    return [(tuple(int(d) for d in m[0].split("x") if d), m[1]) for m in _TYPE.findall(text)]


def _uint(t: torch.Tensor, bits: int) -> torch.Tensor:
    return t.to(torch.int64) & ((1 << bits) - 1)


def evaluate(lines: list[str], env: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Evaluate emitted TTIR lines. Integers are kept as int64 of their unsigned bit pattern; floats as their
    torch dtype (f32 math in float32, dot in float64)."""
    bits = {"i8": 8, "i16": 16, "i32": 32}
    for line in lines:
        m = _LINE.match(line.rstrip())
        assert m, line
        name, op, rest = m.groups()
        ops = re.findall(r"%[\w.$\-#]+", rest.split(" : ")[0])
        types = _types(rest.split(" : ", 1)[1])
        args = [env[o] for o in ops]
        out_shape, out_elem = types[-1]
        if op == "arith.constant":
            value = re.search(r"dense<([^>]*)>", rest)[1]
            if value.startswith("0x"):
                v = torch.tensor(int(value, 16), dtype=torch.int32).view(torch.float32)
                res = torch.full(out_shape, v.item(), dtype=torch.float32)
            elif out_elem in bits:
                res = torch.full(out_shape, int(value), dtype=torch.int64)
            else:
                res = torch.full(out_shape, float(value), dtype=_TORCH[out_elem])
        elif op in ("arith.andi", "arith.ori"):
            res = (args[0] & args[1]) if op == "arith.andi" else (args[0] | args[1])
        elif op == "arith.shli":
            res = _uint(args[0] << args[1], bits[out_elem])
        elif op == "arith.shrui":
            res = args[0] >> args[1]
        elif op == "arith.extui":
            res = args[0]
        elif op in ("arith.extf", "arith.truncf"):
            res = args[0].to(_TORCH[out_elem])
        elif op == "arith.mulf":
            res = args[0] * args[1]
        elif op == "arith.cmpi":
            res = args[0] == args[1]
        elif op == "arith.select":
            res = torch.where(args[0], args[1], args[2])
        elif op == "tt.bitcast":
            src_elem = types[0][1]
            if src_elem in bits:  # int pattern -> float view
                narrow = {8: torch.uint8, 16: torch.int16, 32: torch.int32}[bits[src_elem]]
                raw = args[0].to(torch.int64)
                if bits[src_elem] < 64:
                    raw = torch.where(raw >= 2 ** (bits[src_elem] - 1), raw - 2 ** bits[src_elem], raw) \
                        if narrow is not torch.uint8 else raw
                res = raw.to(narrow).view(_TORCH[out_elem]) if out_elem not in bits else args[0]
            else:  # float -> int pattern
                res = _uint(args[0].view(torch.uint8).to(torch.int64), 8)
        elif op == "tt.join":
            res = torch.stack([args[0], args[1]], dim=-1)
        elif op in ("tt.reshape", "tt.broadcast"):
            res = args[0].reshape(out_shape) if op == "tt.reshape" else args[0].expand(out_shape).clone()
        elif op == "tt.trans":
            order = [int(x) for x in re.search(r"array<i32: ([^>]*)>", rest)[1].split(",")]
            res = args[0].permute(order).contiguous()
        elif op == "tt.expand_dims":
            res = args[0].unsqueeze(int(re.search(r"axis = (\d+)", rest)[1]))
        elif op == "tt.dot":
            res = args[0].double() @ args[1].double() + args[2].double()
        else:
            raise AssertionError(f"evaluator does not know {op}")
        assert tuple(res.shape) == out_shape, (line, res.shape)
        env[name] = res
    return env


def _line(m: int, n: int, k: int, lhs: str) -> str:
    """A tt.dot_scaled line in Triton 3.6's printed form (see the `ttir` of the kernels above)."""
    if lhs == "bf16":
        a = f"%a, %b scale %sb, %acc lhs = bf16 rhs = e2m1 {{fastMath = false}} : tensor<{m}x{k}xbf16>"
    else:
        a = (f"%a scale %sa, %b scale %sb, %acc lhs = e2m1 rhs = e2m1 {{fastMath = false}} : tensor<{m}x{k // 2}xi8>, "
             f"tensor<{m}x{k // 16}xf8E4M3FN>")
    return (f"    %out = tt.dot_scaled {a} * tensor<{k // 2}x{n}xi8>, tensor<{n}x{k // 16}xf8E4M3FN> "
            f"-> tensor<{m}x{n}xf32> loc(#loc7)\n")


def _random_nvfp4(rows: int, k: int, gen: torch.Generator):
    packed = torch.randint(0, 256, (rows, k // 2), dtype=torch.uint8, generator=gen)
    # UE4M3 scales over the whole range incl. subnormals (codes 1..7) and the top (0x7E = 448); never NaN (0x7F).
    scales = torch.randint(0, 0x7F, (rows, k // 16), dtype=torch.uint8, generator=gen)
    value = e2m1_decode(unpack_e2m1(packed)).double().reshape(rows, k // 16, 16) * \
        scales.view(torch.float8_e4m3fn).double()[..., None]
    return packed, scales, value.reshape(rows, k)


@pytest.mark.parametrize("lhs", ["e2m1", "bf16"])
def test_emitted_ttir_computes_exact_dequantized_product(lhs):
    m, n, k = 16, 8, 64
    gen = torch.Generator().manual_seed(7)
    op = parse_dot_scaled(_line(m, n, k, lhs))
    assert op is not None and op.loc == "loc(#loc7)"
    text = lower_dot_scaled(op, prefix="t")
    assert "tt.dot_scaled" not in text and text.count("tt.dot ") == 1
    b_packed, b_scales, b_ref = _random_nvfp4(n, k, gen)
    env = {"%b": _uint(b_packed.T.contiguous().to(torch.int64), 8), "%sb": b_scales.view(torch.float8_e4m3fn),
           "%acc": torch.zeros(m, n)}
    if lhs == "bf16":
        a = torch.randn(m, k, generator=gen).to(torch.bfloat16)
        env["%a"], a_ref = a, a.double()
    else:
        a_packed, a_scales, a_ref = _random_nvfp4(m, k, gen)
        env["%a"], env["%sa"] = _uint(a_packed.to(torch.int64), 8), a_scales.view(torch.float8_e4m3fn)
    out = evaluate(text.splitlines(), env)["%out"]
    expected = a_ref @ b_ref.T
    assert torch.equal(out, expected), (out - expected).abs().max()


def test_parse_rejects_other_ops():
    assert parse_dot_scaled("    %x = tt.dot %a, %b, %c : tensor<16x16xbf16> * tensor<16x16xbf16> -> "
                            "tensor<16x16xf32>") is None


# ------------------------------------------------------------------------------------------------ GPU numerics

@pytest.mark.gpu
@pytest.mark.parametrize("lhs_bf16", [False, True])
def test_user_kernel_runs_correctly_on_this_gpu(lhs_bf16):
    """A user's tl.dot_scaled NVFP4 kernel, launched through bwtriton's pipeline (on the H200 Triton alone
    cannot compile it), against the float64 product of the dequantized inputs."""
    from bwtriton.formats import quantize_nvfp4
    from bwtriton.kernels.blockscaled import bwtriton_pipeline
    torch.manual_seed(0)
    b_q = quantize_nvfp4(torch.randn(64, 128, device="cuda"))
    if lhs_bf16:
        a = torch.randn(64, 128, device="cuda").to(torch.bfloat16)
        a_args, a_ref = (a, b_q.scales), a.double()
    else:
        a_q = quantize_nvfp4(torch.randn(64, 128, device="cuda"))
        a_args, a_ref = (a_q.data, a_q.scales), a_q.dequantize(torch.float64) / a_q.global_scale.double()
    c = torch.empty(64, 64, device="cuda")
    with bwtriton_pipeline(c.device):
        nvfp4_dot_kernel[(1,)](a_args[0], a_args[1], b_q.data, b_q.scales, c, **CONST, LHS_BF16=lhs_bf16)
    b_ref = b_q.dequantize(torch.float64) / b_q.global_scale.double()
    ref = (a_ref @ b_ref.T).cpu()
    bound = 128 * 2.0 ** -23 * (a_ref.abs() @ b_ref.abs().T).cpu() + 1e-30
    assert ((c.double().cpu() - ref).abs() <= bound).all()
