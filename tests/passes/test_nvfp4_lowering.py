"""`lower-dot-scaled-portable`: which ops it rewrites per target, that the rewritten module compiles (sm_90a wgmma,
sm_100a keeps kind::mxf4nvf4 / kind::mxf8f6f4), and that the emitted TTIR computes exactly dequant(A) @ dequant(B).

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
from bwtriton.passes.lower_dot_scaled_portable import lower_dot_scaled, triton_lowers
from bwtriton.targets import get_target
from fixtures.kernels import nvfp4_dot_kernel


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
    assert r.reports["lower-dot-scaled-portable"]["lowered"] == 1
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16", r.asm["ptx"])


def test_mixed_bf16_x_nvfp4_is_lowered_even_on_sm100(compiled):
    # Triton 3.6 crashes on this one on every target (accelerate-matmul decomposition with UE4M3 scales).
    r = compiled["sm_100a", True]
    assert r.reports["lower-dot-scaled-portable"]["ops"][0]["action"].startswith("lowered")
    assert "tcgen05.mma.cta_group::1.kind::f16" in r.asm["ptx"]


def test_sm100_keeps_native_nvfp4(compiled):
    r = compiled["sm_100a", False]
    assert r.reports["lower-dot-scaled-portable"]["kept_native"] == 1
    assert "kind::mxf4nvf4.block_scale.scale_vec::4X" in r.asm["ptx"]


def test_native_rule_per_target(compiled):
    op = parse_dot_scaled(next(ln for ln in compiled["sm_100a", False].asm["ttir"].splitlines()
                               if "tt.dot_scaled" in ln))
    assert triton_lowers(op, get_target("sm_100a")) and triton_lowers(op, get_target("sm_120a"))
    assert not triton_lowers(op, get_target("sm_90a")) and not triton_lowers(op, get_target("sm_80"))


def test_force_option_lowers_on_sm100():
    r = bwtriton.compile(nvfp4_dot_kernel, signature=_sig(False), target="sm_100a",
                         constexprs=dict(NATIVE_TILE, LHS_BF16=False), passes=["lower-dot-scaled-portable{force=true}"])
    assert "kind::mxf4nvf4" not in r.asm["ptx"] and "kind::f16" in r.asm["ptx"]


def test_64_row_tile_is_lowered_on_sm100():
    # Triton would fall back to its (crashing) decomposition for a 64-row NVFP4 tile even on sm_100a.
    r = bwtriton.compile(nvfp4_dot_kernel, signature=_sig(False), target="sm_100a",
                         constexprs=dict(CONST, LHS_BF16=False))
    assert r.reports["lower-dot-scaled-portable"]["lowered"] == 1 and "kind::f16" in r.asm["ptx"]


# ----------------------------------------------------------------------------------------- TTIR text evaluator

_LINE = re.compile(r"^\s*(%[\w.$\-#]+) = ([\w.]+) (.*?)(?:\s+loc\(.*\))?$")
_TYPE = re.compile(r"tensor<((?:\d+x)*)(\w+)>")
_TORCH = {"i8": torch.uint8, "i16": torch.int16, "i32": torch.int32, "f16": torch.float16, "bf16": torch.bfloat16,
          "f32": torch.float32, "f8E4M3FN": torch.float8_e4m3fn, "f8E5M2": torch.float8_e5m2, "i1": torch.bool}


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
        elif op == "arith.subf":
            res = args[0] - args[1]
        elif op in ("arith.cmpi", "arith.cmpf"):
            assert re.match(r"(eq|oeq),", rest), line  # the only predicates the emitter uses
            res = args[0] == args[1]   # oeq: false where either side is NaN, as torch's ==
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
            else:  # float -> int pattern of the same width
                width = args[0].element_size() * 8
                view = {8: torch.uint8, 16: torch.int16, 32: torch.int32}[width]
                res = _uint(args[0].view(view).to(torch.int64), width)
        elif op == "tt.join":
            res = torch.stack([args[0], args[1]], dim=-1)
        elif op in ("tt.reshape", "tt.broadcast"):
            res = args[0].reshape(out_shape) if op == "tt.reshape" else args[0].expand(out_shape).clone()
        elif op == "tt.trans":
            order = [int(x) for x in re.search(r"array<i32: ([^>]*)>", rest)[1].split(",")]
            res = args[0].permute(order).contiguous()
        elif op == "tt.expand_dims":
            res = args[0].unsqueeze(int(re.search(r"axis = (\d+)", rest)[1]))
        elif op == "tt.fp_to_fp":
            res = args[0].to(_TORCH[out_elem])
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


# ------------------------------------------------------------- every form: MX, unscaled fp4, M/N packing, fp8

#: name -> (lhs format, lhs scale, lhs_k_pack, rhs format, rhs scale, rhs_k_pack); scales None / "e8m0" / "ue4m3".
FORMS = {
    # upstream test_block_scale_fp4 with pack_along_k=False (both scaled, and its with_*_scale=False variants)
    "mxfp4_mn_packed": ("e2m1", "e8m0", False, "e2m1", "e8m0", False),
    "fp4_mn_packed_unscaled": ("e2m1", None, False, "e2m1", None, False),
    "fp4_mn_packed_rhs_scaled": ("e2m1", None, False, "e2m1", "e8m0", False),
    "mxfp4_lhs_m_packed": ("e2m1", "e8m0", False, "e2m1", "e8m0", True),
    # upstream test_mxfp8_mxfp4_matmul with PACK_B_ALONG_K=False, and the other mixed sides
    "e5m2_mx_x_mxfp4_n_packed": ("e5m2", "e8m0", True, "e2m1", "e8m0", False),
    "e4m3_x_mxfp4_n_packed": ("e4m3", None, True, "e2m1", "e8m0", False),
    "bf16_x_mxfp4_n_packed": ("bf16", None, True, "e2m1", "e8m0", False),
    "fp16_x_mxfp4_n_packed": ("fp16", None, True, "e2m1", "e8m0", False),
    "mxfp4_m_packed_x_fp16": ("e2m1", "e8m0", False, "fp16", None, True),
    # fp16 x e8m0-scaled, k-packed: Triton compiles these but rounds the scale to fp16 (inf from 2^16 up)
    "fp16_x_mxfp4_k_packed": ("fp16", None, True, "e2m1", "e8m0", True),
    "e5m2_mx_x_fp16": ("e5m2", "e8m0", True, "fp16", None, True),
    # NVFP4 (UE4M3) forms
    "nvfp4_m_packed": ("e2m1", "ue4m3", False, "e2m1", "ue4m3", True),
    "e4m3_nv_x_e4m3_nv": ("e4m3", "ue4m3", True, "e4m3", "ue4m3", True),
    "fp16_x_e4m3_nv": ("fp16", None, True, "e4m3", "ue4m3", True),
}
#: expected `tt.dot` operand type per form: bf16 when it holds both sides, else fp16, else f32 for a tf32 MMA.
EXPECTED_DTYPE = {"fp16_x_mxfp4_n_packed": "f32", "mxfp4_m_packed_x_fp16": "f32", "fp16_x_e4m3_nv": "f32",
                  "fp16_x_mxfp4_k_packed": "f32", "e5m2_mx_x_fp16": "f32"}
_ELEM_TY = {"e2m1": "i8", "e4m3": "f8E4M3FN", "e5m2": "f8E5M2", "bf16": "bf16", "fp16": "f16"}
_SCALE = {"e8m0": ("i8", 32), "ue4m3": ("f8E4M3FN", 16), None: (None, 32)}


def _random_operand(fmt: str, scale: "str | None", k_pack: bool, rows: int, k: int, gen: torch.Generator,
                    code_range: tuple[int, int]):
    """One operand in rows-major form: (stored [rows', K'] as the evaluator holds it, scales or None, float64
    [rows, K] reference decoded with bwtriton.formats)."""
    from bwtriton.formats import e8m0_decode, pack_e2m1
    if fmt == "e2m1":
        codes = torch.randint(0, 16, (rows, k), dtype=torch.uint8, generator=gen)
        stored = pack_e2m1(codes) if k_pack else pack_e2m1(codes.T.contiguous()).T.contiguous()
        elems, stored = e2m1_decode(codes).double(), _uint(stored.to(torch.int64), 8)
    elif fmt in ("e4m3", "e5m2"):  # every finite code, both signs (e4m3: 0x7F is NaN; e5m2: 0x7C.. inf/NaN)
        mag = torch.randint(0, 0x7F if fmt == "e4m3" else 0x7C, (rows, k), dtype=torch.uint8, generator=gen)
        sign = torch.randint(0, 2, (rows, k), dtype=torch.uint8, generator=gen) << 7
        stored = (mag | sign).view(torch.float8_e4m3fn if fmt == "e4m3" else torch.float8_e5m2)
        elems = stored.double()
    else:
        stored = torch.randn(rows, k, generator=gen).to(torch.bfloat16 if fmt == "bf16" else torch.float16)
        elems = stored.double()
    if scale is None:
        return stored, None, elems
    group = _SCALE[scale][1]
    if scale == "e8m0":
        scales = torch.randint(code_range[0], code_range[1] + 1, (rows, k // group), dtype=torch.uint8, generator=gen)
        factor, scales_env = e8m0_decode(scales).double(), _uint(scales.to(torch.int64), 8)
    else:  # UE4M3 over its whole range incl. subnormals, never NaN (0x7F)
        scales_env = torch.randint(0, 0x7F, (rows, k // group), dtype=torch.uint8, generator=gen).view(
            torch.float8_e4m3fn)
        factor = scales_env.double()
    return stored, scales_env, elems * factor.repeat_interleave(group, dim=1)


def _form_line(form: tuple, m: int, n: int, k: int) -> str:
    """The printed `tt.dot_scaled` of one form (Triton 3.6's syntax, as in the kernels' `ttir_triton`)."""
    af, asc, akp, bf, bsc, bkp = form

    def stored_shape(fmt, k_pack, rows):  # rows-major [rows', K']
        if fmt != "e2m1":
            return rows, k
        return (rows, k // 2) if k_pack else (rows // 2, k)

    ar, ac = stored_shape(af, akp, m)
    bn, bk = stored_shape(bf, bkp, n)
    a = f"%a{' scale %sa' if asc else ''}"
    b = f"%b{' scale %sb' if bsc else ''}"
    a_ty = f"tensor<{ar}x{ac}x{_ELEM_TY[af]}>" + (f", tensor<{m}x{k // _SCALE[asc][1]}x{_SCALE[asc][0]}>" if asc else "")
    b_ty = f"tensor<{bk}x{bn}x{_ELEM_TY[bf]}>" + (f", tensor<{n}x{k // _SCALE[bsc][1]}x{_SCALE[bsc][0]}>" if bsc else "")
    attrs = ", ".join(["fastMath = false"] + (["lhs_k_pack = false"] if not akp else [])
                      + (["rhs_k_pack = false"] if not bkp else []))
    return (f"    %out = tt.dot_scaled {a}, {b}, %acc lhs = {af} rhs = {bf} {{{attrs}}} : {a_ty} * {b_ty} "
            f"-> tensor<{m}x{n}xf32>\n")


def _exact_in_tf32(t: torch.Tensor) -> bool:
    """Every value keeps all its bits in tf32 (10 explicit mantissa bits) and is zero or an fp32 normal."""
    bits = t.float().view(torch.int32)
    normal_or_zero = (t == 0) | (t.float().abs() >= 2.0 ** -126)
    return bool(((bits & 0x1FFF) == 0).all() and normal_or_zero.all())


@pytest.mark.parametrize("name", list(FORMS))
def test_every_form_dequantizes_exactly(name):
    """The emitted TTIR feeds `tt.dot` exactly the reference dequantized operands, in a type that keeps them.

    e8m0 codes cover 0..252 on fp4 (every code whose dequantized E2M1 values stay finite and, except the tf32
    forms, which keep to fp32 normals (codes >= 2), representable in bf16 down to its 2^-133 subnormals) and
    100..150 on fp8 sides (an E4M3 subnormal times 2^-127 is below bf16's range: the format edge docs/nvfp4_hopper.md
    describes). UE4M3 scales cover their whole range."""
    form = FORMS[name]
    m, n, k = 16, 8, 64
    gen = torch.Generator().manual_seed(11)
    op = parse_dot_scaled(_form_line(form, m, n, k))
    assert op is not None and not triton_lowers(op, get_target("sm_90a"))
    text = lower_dot_scaled(op, prefix="t")
    dot = next(ln for ln in text.splitlines() if " tt.dot " in ln)
    dtype = EXPECTED_DTYPE.get(name, "bf16")
    assert f"x{dtype}> * tensor<" in dot, dot

    def code_range(fmt):
        return (100, 150) if fmt != "e2m1" else ((2, 252) if dtype == "f32" else (0, 252))

    a, sa, a_ref = _random_operand(form[0], form[1], form[2], m, k, gen, code_range(form[0]))
    b, sb, b_ref = _random_operand(form[3], form[4], form[5], n, k, gen, code_range(form[3]))
    env = {"%a": a, "%b": b.T.contiguous(), "%acc": torch.zeros(m, n)}
    env.update({"%sa": sa} if sa is not None else {})
    env.update({"%sb": sb} if sb is not None else {})
    env = evaluate(text.splitlines(), env)
    a_name, b_name = re.search(r"tt\.dot (%\S+), (%\S+),", dot).groups()
    assert torch.equal(env[a_name].double(), a_ref), (env[a_name].double() - a_ref).abs().max()
    assert torch.equal(env[b_name].double(), b_ref.T), (env[b_name].double() - b_ref.T).abs().max()
    if dtype == "f32":
        assert _exact_in_tf32(env[a_name]) and _exact_in_tf32(env[b_name])
    # the dot replaces the op in place: same result name, the original accumulator (the sum itself is the MMA's;
    # with scales spanning 2^+-125 no summation order is exact, so only the operands are compared)
    assert dot.strip().startswith("%out = tt.dot") and ", %acc," in dot


def test_e8m0_code_zero_is_two_to_minus_127_and_255_is_nan():
    """The two e8m0 codes the exponent-bit construction gets wrong without a select."""
    op = parse_dot_scaled(_form_line(FORMS["mxfp4_mn_packed"], 16, 8, 64))
    text = lower_dot_scaled(op, prefix="t")
    env = {"%a": _uint(torch.full((8, 64), 0x22, dtype=torch.int64), 8),     # every element 1.0
           "%b": _uint(torch.full((64, 4), 0x22, dtype=torch.int64), 8),
           "%sa": torch.tensor([[0, 255]], dtype=torch.int64).expand(16, 2).contiguous(),
           "%sb": torch.full((8, 2), 127, dtype=torch.int64), "%acc": torch.zeros(16, 8)}
    env = evaluate(text.splitlines(), env)
    a_name = re.search(r"tt\.dot (%\S+),", next(ln for ln in text.splitlines() if " tt.dot " in ln))[1]
    a = env[a_name].float()
    assert (a[:, :32] == 2.0 ** -127).all() and a[:, 32:].isnan().all()


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


# ------------------------------------------------------------------ a user's K-looped kernel over every form

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def forms_matmul_kernel(a_ptr, sa_ptr, b_ptr, sb_ptr, c_ptr, M, N, K: tl.constexpr, stride_am, stride_ak, stride_bk, stride_bn,
                        A_FMT: tl.constexpr, B_FMT: tl.constexpr, A_SCALED: tl.constexpr, B_SCALED: tl.constexpr,
                        A_KPACK: tl.constexpr, B_KPACK: tl.constexpr, A_DIV_M: tl.constexpr, A_DIV_K: tl.constexpr,
                        B_DIV_K: tl.constexpr, B_DIV_N: tl.constexpr, GROUP: tl.constexpr, BM: tl.constexpr,
                        BN: tl.constexpr, BK: tl.constexpr):
    """C = dot_scaled(A, B) tile by tile, as upstream's block-scale tests write it: A stored [M/A_DIV_M, K/A_DIV_K],
    B stored [K/B_DIV_K, N/B_DIV_N] (fp4 halves the packed dimension), scales [rows, K/GROUP] row-major."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_am = pid_m * (BM // A_DIV_M) + tl.arange(0, BM // A_DIV_M)
    offs_bn = pid_n * (BN // B_DIV_N) + tl.arange(0, BN // B_DIV_N)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rs = tl.arange(0, BK // GROUP)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + offs_am[:, None] * stride_am + (k // A_DIV_K + tl.arange(0, BK // A_DIV_K))[None, :]
                    * stride_ak)
        b = tl.load(b_ptr + (k // B_DIV_K + tl.arange(0, BK // B_DIV_K))[:, None] * stride_bk
                    + offs_bn[None, :] * stride_bn)
        sa = None
        sb = None
        if A_SCALED:
            sa = tl.load(sa_ptr + rm[:, None] * (K // GROUP) + (k // GROUP + rs)[None, :])
        if B_SCALED:
            sb = tl.load(sb_ptr + rn[:, None] * (K // GROUP) + (k // GROUP + rs)[None, :])
        acc = tl.dot_scaled(a, sa, A_FMT, b, sb, B_FMT, acc, lhs_k_pack=A_KPACK, rhs_k_pack=B_KPACK)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


_PTR = {"e2m1": "*u8", "e4m3": "*fp8e4nv", "e5m2": "*fp8e5", "bf16": "*bf16", "fp16": "*fp16"}
_SCALE_PTR = {"e8m0": "*u8", "ue4m3": "*fp8e4nv", None: "*u8"}


def _form_constexprs(form: tuple, tile: tuple[int, int, int]) -> dict:
    af, asc, akp, bf, bsc, bkp = form
    group = 16 if "ue4m3" in (asc, bsc) else 32
    return dict(A_FMT=af, B_FMT=bf, A_SCALED=asc is not None, B_SCALED=bsc is not None, A_KPACK=akp, B_KPACK=bkp,
                A_DIV_M=2 if af == "e2m1" and not akp else 1, A_DIV_K=2 if af == "e2m1" and akp else 1,
                B_DIV_K=2 if bf == "e2m1" and bkp else 1, B_DIV_N=2 if bf == "e2m1" and not bkp else 1, GROUP=group,
                BM=tile[0], BN=tile[1], BK=tile[2])


def _compile_form(form: tuple, target: str, tile=(64, 64, 128)):
    sig = {"a_ptr": _PTR[form[0]], "sa_ptr": _SCALE_PTR[form[1]], "b_ptr": _PTR[form[3]],
           "sb_ptr": _SCALE_PTR[form[4]], "c_ptr": "*fp32", "M": "i32", "N": "i32",
           "stride_am": "i32", "stride_ak": "i32", "stride_bk": "i32", "stride_bn": "i32"}
    return bwtriton.compile(forms_matmul_kernel, signature=sig, constexprs=dict(_form_constexprs(form, tile), K=256),
                            target=target)


#: the forms Triton 3.6 fails on for sm_90a (PassManager::run failed) plus the mixed ones, one per family
SM90_COMPILE_FORMS = ["mxfp4_mn_packed", "fp4_mn_packed_unscaled", "e5m2_mx_x_mxfp4_n_packed",
                      "fp16_x_mxfp4_n_packed", "fp16_x_mxfp4_k_packed", "nvfp4_m_packed", "e4m3_nv_x_e4m3_nv"]
_WGMMA_TYPE = {"bf16": "bf16.bf16", "f16": "f16.f16", "f32": "tf32.tf32"}


@pytest.mark.parametrize("name", SM90_COMPILE_FORMS)
def test_form_compiles_to_wgmma_on_sm90(name):
    r = _compile_form(FORMS[name], "sm_90a")
    report = r.reports["lower-dot-scaled-portable"]
    assert report["lowered"] == 1 and "tt.dot_scaled" not in r.asm["ttir"]
    dtype = EXPECTED_DTYPE.get(name, "bf16")
    assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n64k\d+\.f32\.{_WGMMA_TYPE[dtype]}", r.asm["ptx"])


@pytest.mark.parametrize("tile", [(128, 128, 128), (256, 128, 128), (128, 256, 256), (128, 128, 64), (128, 64, 128)])
def test_upstream_tiles_of_mn_packed_mxfp4_compile_on_sm90(tile):
    # upstream test_block_scale_fp4's BLOCK_M/N/K list (pack_along_k=False), fp4 operands within smem limits
    r = _compile_form(FORMS["mxfp4_mn_packed"], "sm_90a", tile=tile)
    assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n{tile[1]}k16\.f32\.bf16\.bf16", r.asm["ptx"])


def test_mn_packed_mxfp4_stays_native_on_sm100():
    # The form upstream's test_block_scale_fp4(pack_along_k=False) checks for: tcgen05 kind::mxf8f6f4.
    r = _compile_form(FORMS["mxfp4_mn_packed"], "sm_100a", tile=(128, 128, 128))
    assert r.reports["lower-dot-scaled-portable"]["ops"][0]["action"] == "kept"
    assert "kind::mxf8f6f4" in r.asm["ptx"]


def test_unscaled_mn_packed_fp4_is_lowered_on_sm100():
    # Triton fails here on sm_100a too (one unscaled side has no kind::mxf8f6f4 lowering).
    r = _compile_form(FORMS["fp4_mn_packed_rhs_scaled"], "sm_100a", tile=(128, 128, 128))
    assert r.reports["lower-dot-scaled-portable"]["lowered"] == 1 and "kind::f16" in r.asm["ptx"]


def _gpu_form_case(form: tuple, m: int, n: int, k: int, codes: tuple[int, int]):
    """Device tensors laid out as forms_matmul_kernel reads them, and the float64 reference."""
    gen = torch.Generator().manual_seed(5)
    a, sa, a_ref = _random_operand(form[0], form[1], form[2], m, k, gen, codes)
    b, sb, b_ref = _random_operand(form[3], form[4], form[5], n, k, gen, codes)

    def device(t):  # the evaluator's int64 bit patterns back to bytes
        return (t.to(torch.uint8) if t.dtype == torch.int64 else t).cuda()

    b_kn = device(b).T  # stored [K', N'] as the logical transpose of rows-major [N', K'] (upstream's layout)
    return device(a), None if sa is None else device(sa), b_kn, None if sb is None else device(sb), a_ref, b_ref


GPU_FORMS = ["mxfp4_mn_packed", "fp4_mn_packed_unscaled", "mxfp4_lhs_m_packed", "e5m2_mx_x_mxfp4_n_packed",
             "bf16_x_mxfp4_n_packed", "fp16_x_mxfp4_n_packed", "fp16_x_mxfp4_k_packed", "nvfp4_m_packed"]
#: e8m0 codes per GPU case: 2^-5..2^5, except the fp16 k-packed form at 2^13..2^23, where Triton's own lowering
#: (scale rounded to fp16) would give inf
GPU_SCALE_CODES = {"fp16_x_mxfp4_k_packed": (140, 150)}


#: every GPU form on a 64x64x128 tile, and the two upstream forms also on upstream's 128x128x128 tile
GPU_CASES = [(name, (64, 64, 128)) for name in GPU_FORMS] + \
    [(name, (128, 128, 128)) for name in ("mxfp4_mn_packed", "e5m2_mx_x_mxfp4_n_packed")]


@pytest.mark.gpu
@pytest.mark.parametrize("name, tile", GPU_CASES, ids=[f"{n}-tile{t[0]}" for n, t in GPU_CASES])
def test_form_runs_correctly_on_this_gpu(name, tile):
    """The M/N-packed MXFP4 and mixed forms, launched through bwtriton's pipeline on this GPU, against the float64
    product of bwtriton.formats' dequantized operands. The operands reach the MMA exactly (CPU test above); what
    remains is fp32 accumulation: |error| <= K * 2^-23 * (|A| @ |B|), twice the worst-case bound K*u of summing K
    exact products in fp32 (u = 2^-24), the factor 2 for tensor-core sums that truncate instead of rounding."""
    from bwtriton.kernels.blockscaled import bwtriton_pipeline
    form = FORMS[name]
    m, n, k = 256, 256, 256
    a, sa, b, sb, a_ref, b_ref = _gpu_form_case(form, m, n, k, GPU_SCALE_CODES.get(name, (122, 132)))
    c = torch.empty(m, n, device="cuda")
    with bwtriton_pipeline(c.device):
        forms_matmul_kernel[(m // tile[0], n // tile[1])](a, sa, b, sb, c, m, n, k, a.stride(0), a.stride(1),
                                                           b.stride(0), b.stride(1), **_form_constexprs(form, tile))
    ref = a_ref @ b_ref.T
    bound = k * 2.0 ** -23 * (a_ref.abs() @ b_ref.abs().T) + 1e-30
    err = (c.double().cpu() - ref).abs()
    assert (err <= bound).all(), f"max error {err.max().item()}, {int((err > bound).sum())} elements over the bound"
