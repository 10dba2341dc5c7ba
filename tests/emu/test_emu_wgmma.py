"""The emulated H200 (sm_90a): Hopper's warpgroup MMA on Triton 3.6's own sm_90a PTX.

Triton's lowering is the judge of the fragment and descriptor layouts: each tl.dot below compiles to a
wgmma.mma_async form (checked on the PTX, so a fallback to mma.sync cannot pass) and must match a float64 torch
reference within the format's tolerance (`emu_cases.out_tolerance`). The layout kernel covers A in registers and
A / B in shared memory in both majors (the imm-trans operands). The negative tests remove a wait, take a warp out
of the warpgroup, or move the module to sm_100a, and name the error each must raise."""
from __future__ import annotations

import re

import pytest
import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

import bwtriton.emu as emu
import emu_cases as ec
from bwtriton.emu.errors import AsyncOverwriteError, EmulationError
from bwtriton.ptx.descriptors import decode_smem_desc, wgmma_desc_as_tcgen05

pytestmark = pytest.mark.emulated

SM90 = GPUTarget("cuda", 90, 32)


def _forms(ptx: str) -> set[str]:
    return set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.\S+", ptx))


@pytest.mark.parametrize("in_ty,out_ty,kw,form", [
    ("fp16", "fp32", {}, "m64n128k16.f32.f16.f16"),
    ("bf16", "fp32", dict(N=256, bn=256, num_warps=8, num_stages=2), "m64n256k16.f32.bf16.bf16"),
    ("fp8e4nv", "fp16", dict(K=256, bk=128), "m64n128k32.f32.e4m3.e4m3"),
    ("fp8e5", "fp16", dict(K=256, bk=128), "m64n128k32.f32.e5m2.e5m2"),
    ("fp32", "fp32", dict(bk=32, prec="tf32"), "m64n128k8.f32.tf32.tf32"),
    ("i8", "i32", dict(K=256, bk=128), "m64n128k32.s32.s8.s8"),
    ("bf16", "bf16", dict(bm=64, bn=64), "m64n64k16.f32.bf16.bf16"),
])
def test_triton_sm90_dot_matches_torch(in_ty, out_ty, kw, form):
    case = ec.case_matmul(in_ty, out_ty, target=SM90, **kw)
    assert _forms(case.kernel.asm["ptx"]) == {f"wgmma.mma_async.sync.aligned.{form}"}
    args, out, ref, tol = case.make()
    emu.run(case.kernel, case.grid, *args)
    err = float((out.double() - ref).abs().max())
    assert err <= tol, f"max abs error {err} > tolerance {tol}"
    if in_ty == "i8":
        assert torch.equal(out.long(), ref.long())


@triton.jit
def _dot_layouts(a_ptr, b_ptr, c_ptr, SAM: tl.constexpr, SAK: tl.constexpr, SBK: tl.constexpr, SBN: tl.constexpr,
                 M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, A_IN_REGS: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * SAM + rk[None, :] * SAK)
    if A_IN_REGS:  # computed in registers: Triton passes A to wgmma from registers
        a = (a.to(tl.float32) * 2.0).to(a_ptr.dtype.element_ty)
    b = tl.load(b_ptr + rk[:, None] * SBK + rn[None, :] * SBN)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))


def _compile_layouts(a_mn_major: bool, b_k_major: bool, a_in_regs: bool, size: int = 64):
    c = dict(SAM=1 if a_mn_major else size, SAK=size if a_mn_major else 1, SBK=1 if b_k_major else size,
             SBN=size if b_k_major else 1, M=size, N=size, K=size, A_IN_REGS=a_in_regs)
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", **{k: "constexpr" for k in c}}
    return triton.compile(triton.compiler.ASTSource(fn=_dot_layouts, signature=sig, constexprs=c), target=SM90,
                          options={"num_warps": 4})


@pytest.mark.parametrize("a_in_regs", [False, True])
@pytest.mark.parametrize("a_mn_major,b_k_major", [(False, False), (False, True), (True, False), (True, True)])
def test_operand_majors_and_register_a(a_mn_major, b_k_major, a_in_regs):
    kern = _compile_layouts(a_mn_major, b_k_major, a_in_regs)
    mma = next(ln for ln in kern.asm["ptx"].splitlines() if "wgmma.mma_async" in ln)
    imms = [int(v) for v in re.findall(r",\s*(-?\d+)", mma.split("}")[-1])]
    # the trans immediates are the instruction's last one (B) or two (A in shared memory, then B); 1 = MN-major
    trans = imms[-1:] if a_in_regs else imms[-2:]
    assert ("{%r" in mma.split("}", 1)[1]) == a_in_regs
    assert trans == ([] if a_in_regs else [int(a_mn_major)]) + [int(not b_k_major)]
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(64, 64, generator=g).half(), torch.randn(64, 64, generator=g).half()
    out = torch.zeros(64, 64)
    emu.run(kern, (1,), a.T.contiguous() if a_mn_major else a, b.T.contiguous() if b_k_major else b, out)
    ref = (a.double() * (2 if a_in_regs else 1)) @ b.double()
    assert float((out.double() - ref).abs().max()) <= ec.out_tolerance(ref, "fp32", 64)


def test_wgmma_descriptor_names_the_tcgen05_layout():
    """Triton's first B descriptor of a 128B-swizzled bf16 tile (0x4000004000000002): start 0x20 (x16), SBO 1024
    bytes, layout type 1 = 128B; the same fields in tcgen05's bit positions."""
    d = decode_smem_desc(wgmma_desc_as_tcgen05(0x4000004000000002))
    assert (d.start_address, d.lbo, d.sbo, d.swizzle) == (32, 0, 1024, "128B")
    assert decode_smem_desc(wgmma_desc_as_tcgen05(3 << 62 | 5)).swizzle == "32B"
    assert decode_smem_desc(wgmma_desc_as_tcgen05(0 << 62 | 5)).swizzle == "none"


@pytest.fixture(scope="module")
def pipelined():
    case = ec.case_matmul("fp16", "fp32", K=512, target=SM90)
    return case, case.kernel.asm["ptx"]


def _run_ptx(case, text: str, num_warps: int = 4) -> float:
    args, out, ref, _ = case.make()
    emu.run(text, case.grid, *args, num_warps=num_warps, shared=case.kernel.metadata.shared)
    return float((out.double() - ref).abs().max())


def test_a_stage_refilled_before_its_wgmma_retires_is_an_overwrite(pipelined):
    case, ptx = pipelined
    assert _run_ptx(case, ptx) <= 1e-3  # the unmutated kernel: the control
    loose = re.sub(r"(wgmma\.wait_group\.sync\.aligned\s+)1\b", r"\g<1>3", ptx, count=1)
    assert loose != ptx
    with pytest.raises(AsyncOverwriteError, match=r"cp\.async .* overwrites shared memory .* the wgmma\.mma_async "
                                                  r"at PTX line \d+ .* never observed.*wgmma\.wait_group"):
        _run_ptx(case, loose)


def test_a_warpgroup_short_of_four_warps_is_refused(pipelined):
    case, ptx = pipelined
    two = re.sub(r"\.reqntid \d+", "", ptx)
    with pytest.raises(EmulationError, match=r"needs a whole warpgroup \(4 warps\).*2 warps in the CTA"):
        _run_ptx(case, two, num_warps=2)


def test_wgmma_under_an_sm100_target_is_refused(pipelined):
    case, ptx = pipelined
    bad = ptx.replace(".target sm_90a", ".target sm_100a")
    first = next(i for i, ln in enumerate(bad.split("\n"), 1) if re.match(r"\s*wgmma\.", ln))
    with pytest.raises(EmulationError, match=rf"PTX line {first}: wgmma\.\w+ under `\.target sm_100a`"):
        _run_ptx(case, bad)
