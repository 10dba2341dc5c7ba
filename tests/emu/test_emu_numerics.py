"""sm_100a numerics through the CPU emulator: Triton 3.6's own PTX for tl.dot (fp16/bf16/fp8/tf32; int8 lowers to mma.sync),
tl.dot_scaled (MXFP4/NVFP4/MXFP8, pointer and TMA + 5-D scale/tcgen05.cp paths), warp-specialized TMA,
Gluon tcgen05 (one MMA, scaled, two_ctas) and tutorial-style kernels (03 bias epilogue, 06 attention, 09 persistent /
warp-specialized / device descriptors, 10 mixed mxfp8 x mxfp4 with fp4-padded TMA) must match float64 torch
references within format tolerance (tolerances: `emu_cases.out_tolerance` -- output rounding + fp32 accumulation
order). All run under the default "latest" schedule, so they are also the unmutated controls of the strict model."""
from __future__ import annotations

import pytest
import torch

import bwtriton.emu as emu
import emu_cases as ec

pytestmark = pytest.mark.emulated

CASES = {
    "example_matmul_fp16": lambda: ec.case_example_matmul("fp16"),
    "example_matmul_bf16": lambda: ec.case_example_matmul("bf16"),
    "dot_fp16_m64": lambda: ec.case_matmul("fp16", bm=64, bn=64),
    "dot_bf16_n256_8warps": lambda: ec.case_matmul("bf16", "fp32", N=256, bn=256, num_warps=8, num_stages=2),
    "dot_fp8e4m3": lambda: ec.case_matmul("fp8e4nv", "fp16", K=256, bk=128),
    "dot_fp8e5m2": lambda: ec.case_matmul("fp8e5", "fp16", K=256, bk=128),
    "dot_tf32": lambda: ec.case_matmul("fp32", "fp32", bk=32, prec="tf32"),
    "dot_int8_mma_sync": lambda: ec.case_matmul("i8", "i32", K=256, bk=128),
    "dot_scaled_mxfp4": lambda: ec.case_dot_scaled("e2m1", "e2m1", "u8", 32, 256),
    "dot_scaled_nvfp4": lambda: ec.case_dot_scaled("e2m1", "e2m1", "fp8e4nv", 16, 256),
    "dot_scaled_mxfp8": lambda: ec.case_dot_scaled("e4m3", "e4m3", "u8", 32, 128, K=256),
    "dot_scaled_e4m3_e2m1": lambda: ec.case_dot_scaled("e4m3", "e2m1", "u8", 32, 128, K=256),
    "example_fp4_nvfp4": lambda: ec.case_fp4_example("fp8e4nv"),
    "example_fp4_mxfp4": lambda: ec.case_fp4_example("u8"),
    "tma_5d_scales_nvfp4": lambda: ec.case_block_scaled_tma(16),
    "tma_5d_scales_mxfp4": lambda: ec.case_block_scaled_tma(32),
    "ws_tma_matmul": lambda: ec.case_ws_matmul(),
    "gluon_one_mma": lambda: ec.case_gluon_one_mma(),
    "gluon_scaled_nvfp4": lambda: ec.case_gluon_scaled("nvfp4"),
    "gluon_scaled_mxfp4": lambda: ec.case_gluon_scaled("mxfp4"),
    "gluon_two_ctas_m256": lambda: ec.case_gluon_two_ctas(256),
    "gluon_two_ctas_m128": lambda: ec.case_gluon_two_ctas(128),
    "tma_pipelined_matmul": lambda: ec.case_tma_matmul(),
    "t03_bias_leaky_unaligned": lambda: ec.case_bias_matmul(),
    "t06_attention_fwd": lambda: ec.case_attn_fwd(),
    "t09_persistent_tma": lambda: ec.case_persistent_tma(),
    "t09_persistent_warp_specialized": lambda: ec.case_persistent_tma(ws=True),
    "t09_descriptor_persistent": lambda: ec.case_persistent_tma(device_desc=True),
    "t10_mixed_mxfp8_mxfp4_fp4_padded_tma": lambda: ec.case_mixed_scaled_tma(),
    "dot_scaled_fp4_packed_along_n_mn_major": lambda: ec.case_dot_scaled_mn_packed(),
    "dot_tf32_32x32_mma_sync_m16n8k8": lambda: ec.case_matmul("fp32", "fp32", M=64, N=64, K=64, bm=32, bn=32, bk=32,
                                                               prec="tf32"),
    "dot_fp16_32x32_mma_sync": lambda: ec.case_matmul("fp16", "fp32", M=64, N=64, K=64, bm=32, bn=32, bk=32),
    "lhs_in_tmem_fp16_m64": lambda: ec.case_lhs_in_tmem("fp16", 64),
    "lhs_in_tmem_tf32_m64": lambda: ec.case_lhs_in_tmem("fp32", 64),
    "lhs_in_tmem_fp16_m128": lambda: ec.case_lhs_in_tmem("fp16", 128),
}


def run_case(case: ec.EmuCase) -> tuple[float, float, emu.EmulationStats]:
    args, out, ref, tol = case.make()
    stats = emu.run(case.kernel, case.grid, *args)
    return float((out.double() - ref).abs().max()), tol, stats


@pytest.mark.parametrize("name", list(CASES))
def test_emulated_numerics_match_torch(name):
    case = CASES[name]()
    args, out, ref, tol = case.make()
    before = out.clone()
    emu.run(case.kernel, case.grid, *args)
    assert not torch.equal(out, before), "the kernel wrote nothing"
    err = float((out.double() - ref).abs().max())
    assert err <= tol, f"{name}: max abs error {err} > tolerance {tol}"


def test_matmul_multi_cta_grid_bf16():
    """4 CTAs (2x2 grid), K loop of 4 iterations through the 3-stage cp.async pipeline."""
    err, tol, stats = run_case(ec.case_example_matmul("bf16", M=256, N=256, K=256, seed=3))
    assert stats.ctas == 4
    assert err <= tol


def test_256x256x512_bf16_gemm():
    """A 256x256x512 bf16 GEMM (BLOCK 128x128x64 -> 4 CTAs, 8 K steps). Its speed is a row of
    benchmarks/emulator.py: time is never asserted here."""
    case = ec.case_example_matmul("bf16", M=256, N=256, K=512, seed=1)
    args, out, ref, tol = case.make()
    stats = emu.run(case.kernel, case.grid, *args)
    assert stats.ctas == 4
    assert float((out.double() - ref).abs().max()) <= tol


def test_opcode_census_every_instruction_has_semantics():
    """Every instruction in the sm_100a PTX of the census kernels (tutorial 03/06/09/10 shapes, tl.dot in every
    precision, dot_scaled, Gluon tcgen05) decodes in the emulator: no UnsupportedInstructionError."""
    from bwtriton.emu.integration.run import kernel_image as load_image
    from bwtriton.ptx import parse_ptx
    seen: dict[str, set] = {}
    for name, compile_fn in ec.census_kernels().items():
        ptx = compile_fn().asm["ptx"]
        load_image(ptx)  # raises UnsupportedInstructionError naming the PTX line
        seen[name] = {i.full_opcode for i in parse_ptx(ptx).entries[0].instructions}
    # the forms the issue names are really in the census
    assert any(op.startswith("add.f32x2") for op in seen["03 bias matmul"])
    assert any(op.startswith("tensormap.replace") for op in seen["09 descriptor persistent"])
    assert any("kind::mxf8f6f4" in op for op in seen["10 block-scaled mixed mxfp8 x mxfp4 (fp4-padded TMA)"])
    assert any(op.startswith("tcgen05.cp") for op in seen["10 block-scaled nvfp4 (TMA, tcgen05.cp)"])


@pytest.mark.parametrize("bn", [128, 256])
def test_1024x512x256_bf16_gemm(bn):
    """The 1024x512x256 bf16 tl.dot GEMM upstream's tests use, with 128x128 and 128x256 tiles (32 / 16 CTAs).
    Its speed (goal <= 5 s) is a row of benchmarks/emulator.py: time is never asserted here."""
    case = ec.case_matmul("bf16", M=1024, N=512, K=256, bm=128, bn=bn, bk=64)
    args, out, ref, tol = case.make()
    stats = emu.run(case.kernel, case.grid, *args)
    assert stats.ctas == (1024 // 128) * (512 // bn)
    assert float((out.double() - ref).abs().max()) <= tol


def test_lhs_in_tmem_cases_really_read_a_from_tmem():
    """The promotion is an env knob: make sure the compiled MMA takes A from TMEM (`[taddr]`, not a descriptor)."""
    import re
    for in_ty, bm in (("fp16", 64), ("fp32", 64)):
        ptx = ec.case_lhs_in_tmem(in_ty, bm).kernel.asm["ptx"]
        assert re.search(r"tcgen05\.mma\.cta_group::1\.kind::\w+ \[ %r\d+ \+ 0 \], \[ %r\d+ \+ 0 \]", ptx), in_ty


def test_f16_fma_rounds_once_to_f16():
    """`fma.rn.f16` (gemlite's 4-bit GEMV dequantisation): the exact a*b+c rounded once to f16."""
    import triton
    import triton.language as tl

    @triton.jit
    def fma16(a, b, c, out, B: tl.constexpr):
        i = tl.arange(0, B)
        tl.store(out + i, tl.fma(tl.load(a + i), tl.load(b + i), tl.load(c + i)))

    torch.manual_seed(0)
    a, b, c = (torch.randn(128).half() for _ in range(3))
    out = torch.empty(128).half()
    with emu.emulated_gpu("sm_100a"):
        h = fma16[(1,)](a, b, c, out, B=128)
    assert "fma.rn.f16" in h.asm["ptx"]
    assert torch.equal(out, (a.double() * b.double() + c.double()).half())


def test_inline_asm_with_parameterized_scoped_registers():
    """Inline asm declaring `.reg .b32 a<3>;` (names without %) runs: gemlite's MXFP4 GEMM unpacks e2m1 so."""
    import triton
    import triton.language as tl

    @triton.jit
    def nibble_sum(x, out, B: tl.constexpr):
        i = tl.arange(0, B)
        v = tl.inline_asm_elementwise(
            "{\n.reg .b32 a<3>;\nand.b32 a0, $1, 15;\nshr.u32 a1, $1, 4;\nand.b32 a1, a1, 15;\n"
            "add.u32 a2, a0, a1;\nmov.b32 $0, a2;\n}", "=r,r", [tl.load(x + i)], dtype=tl.int32, is_pure=True,
            pack=1)
        tl.store(out + i, v)

    x = torch.randint(0, 256, (64,), dtype=torch.int32)
    out = torch.empty(64, dtype=torch.int32)
    with emu.emulated_gpu("sm_100a"):
        nibble_sum[(1,)](x, out, B=64)
    assert torch.equal(out, (x & 15) + ((x >> 4) & 15))
