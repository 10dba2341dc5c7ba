"""sm_100a numerics through the CPU emulator: Triton 3.6's own PTX for tl.dot (fp16/bf16/fp8/tf32; int8 lowers to mma.sync),
tl.dot_scaled (MXFP4/NVFP4/MXFP8, pointer and TMA + 5-D scale/tcgen05.cp paths), warp-specialized TMA,
Gluon tcgen05 (one MMA, scaled, two_ctas) must match float64 torch references within format tolerance
(tolerances: `emu_cases.out_tolerance` -- output rounding + fp32 accumulation order)."""
from __future__ import annotations

import time

import pytest
import torch

import bwtriton.emu as emu
import emu_cases as ec

pytestmark = pytest.mark.emu

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


def test_speed_256x256x512_bf16_gemm():
    """Issue target: a 256x256x512 bf16 GEMM (BLOCK 128x128x64 -> 4 CTAs) emulates in < 10 s."""
    case = ec.case_example_matmul("bf16", M=256, N=256, K=512, seed=1)
    args, out, ref, tol = case.make()
    t0 = time.perf_counter()
    stats = emu.run(case.kernel, case.grid, *args)
    elapsed = time.perf_counter() - t0
    print(f"\n256x256x512 bf16: {stats}")
    assert float((out.double() - ref).abs().max()) <= tol
    assert elapsed < 10.0, f"took {elapsed:.1f} s"
