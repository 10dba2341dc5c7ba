"""The emulated driver on every supported Triton release: the launcher and PTX conventions that changed between
3.6 and 3.9 (compat/launcher.py, docs/emulator.md "Triton versions"), each pinned by a kernel that fails when the
emulator gets that convention wrong."""
from __future__ import annotations

import gc
import sys

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

import bwtriton.emu as emu  # noqa: E402
from bwtriton.compat.launcher import descriptor_passes_tf32_flag, profile_allocator_is_set  # noqa: E402
from bwtriton.emu.driver import emulated_gpu  # noqa: E402
from bwtriton.emu.integration.launcher import EmulatedLauncher, bind_arguments  # noqa: E402

pytestmark = [pytest.mark.emulated]

# A parameter's 32-bit param-space address made generic with cvta.param (the form Triton 3.9's LLVM uses for
# tensor maps): the kernel reads parameter 1 back through that generic address and stores it.
_CVTA_PARAM_PTX = """
.version 8.7
.target sm_100a
.address_size 64
.visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [k_param_0];
  mov.b32 %r1, k_param_1;
  cvt.u64.u32 %rd2, %r1;
  cvta.param.u64 %rd3, %rd2;
  ld.u64 %rd4, [%rd3];
  cvta.to.global.u64 %rd5, %rd1;
  st.global.u64 [%rd5], %rd4;
  ret;
}
"""


def test_cvta_param_of_a_32_bit_param_address_reads_that_parameter():
    out = torch.zeros(1, dtype=torch.int64)
    emu.run(_CVTA_PARAM_PTX, (1, 1, 1), out, 0x1234_5678_9ABC, num_warps=1)
    assert out.item() == 0x1234_5678_9ABC


@triton.jit
def _tma_scale(in_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    pm, pn = tl.program_id(0) * BM, tl.program_id(1) * BN
    out_desc.store([pm, pn], in_desc.load([pm, pn]) * 3)


@pytest.mark.parametrize("target", ["sm_100a", "sm_90a"])
def test_host_descriptor_kernel_of_the_installed_triton_runs_exactly(target):
    """Whatever form the installed Triton's PTX takes a tensor map's address in, TMA load and store find it."""
    x = torch.randn(128, 96, dtype=torch.float16)
    y = torch.full_like(x, float("nan"))
    with emulated_gpu(target):
        k = _tma_scale[(2, 3)](TensorDescriptor.from_tensor(x, [64, 32]), TensorDescriptor.from_tensor(y, [64, 32]),
                               BM=64, BN=32)
    assert "cp.async.bulk.tensor.2d" in k.asm["ptx"]
    assert torch.equal(y, x * 3)  # x * 3 in fp16 is exact here on both sides: the same rounding of one product


def _tritons_decomposition(desc) -> list:
    """What Triton's own launcher passes for a descriptor that was not lowered to TMA."""
    try:
        from triton.backends.driver import decompose_descriptor  # 3.8+
        return list(decompose_descriptor(desc))
    except ImportError:
        from triton.backends.nvidia.driver import make_tensordesc_arg  # 3.6 - 3.7
        return list(make_tensordesc_arg(desc, None))


@pytest.mark.parametrize("tf32", [False, True])
def test_non_tma_descriptor_leaves_match_tritons_launcher(tf32):
    x = torch.randn(16, 8)
    fields = {"round_f32_to_tf32": tf32} if descriptor_passes_tf32_flag() else {}
    if tf32 and not fields:
        pytest.skip("this Triton's TensorDescriptor has no round_f32_to_tf32")
    desc = TensorDescriptor(x, list(x.shape), list(x.stride()), [8, 8], padding="nan", **fields)
    ours = bind_arguments({"d": "tensordesc<fp32[8, 8]>"}, (desc,), None)
    theirs = _tritons_decomposition(desc)
    assert len(ours) == len(theirs)
    assert ours[0] is x
    assert [int(getattr(v, "bits", v)) for v in ours[1:]] == [int(v) for v in theirs[1:]]


@triton.jit
def _add_one(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)


def test_kernel_collected_after_emulation_never_reaches_the_real_driver(monkeypatch):
    """Triton 3.8+ unloads a CompiledKernel's module through the then-active driver when it is collected; the
    emulated driver hands out no module, so nothing is unloaded after the emulation ended."""
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", lambda hook: unraisable.append(repr(hook.exc_value)))
    x = torch.zeros(32)

    @triton.jit
    def fresh(x_ptr, BLOCK: tl.constexpr):  # a kernel of its own, so this test holds the only reference
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 2)

    with emulated_gpu():
        k = fresh[(1,)](x, BLOCK=32)
        k2 = _add_one[(1,)](x, BLOCK=32)
    assert torch.equal(x, torch.full((32,), 3.0))
    assert k.module is None and k2.module is None
    fresh.device_caches.clear()
    del k, fresh
    gc.collect()
    assert unraisable == []


class _Meta:
    name = "k"
    num_ctas = 1
    global_scratch_size = 0
    profile_scratch_size = 64
    profile_scratch_align = 8


def test_profile_scratch_without_an_allocator_is_what_the_installed_triton_does():
    from triton.runtime import _allocation
    launcher = EmulatedLauncher(object(), _Meta())
    _allocation.set_profile_allocator(None)
    if profile_allocator_is_set():  # releases without a default: Triton's own "no allocator" error
        with pytest.raises(RuntimeError, match="set_allocator"):
            launcher._scratch("profile", 4, 0)
    else:  # the driver's default scratch: grid * num_ctas * size bytes
        assert launcher._scratch("profile", 4, 0).numel() == 4 * 64


@triton.jit
def _desc_to_ptr(desc, out_ptr, BM: tl.constexpr, BN: tl.constexpr):
    rm, rn = tl.arange(0, BM), tl.arange(0, BN)
    tl.store(out_ptr + rm[:, None] * BN + rn[None, :], desc.load([0, 0]))


# f32 bit patterns -> what a TFLOAT32 tensor map loads (nearest-even at 10 mantissa bits; bit 13 is the tf32 lsb)
_TF32_CASES = {
    0x3F801000: 0x3F800000,  # a tie with an even lsb: down
    0x3F803000: 0x3F804000,  # a tie with an odd lsb: up
    0x3F801001: 0x3F802000,  # just above a tie: up
    0xBF801FFF: 0xBF802000,  # negative, above the tie: up in magnitude
    0x3FFFF000: 0x40000000,  # a tie that carries into the exponent
    0x7F800000: 0x7F800000,  # Inf unchanged
    0x7FC00001: 0x7FC00001,  # NaN payload unchanged
    0x3F802000: 0x3F802000,  # already tf32
}


def test_round_f32_to_tf32_descriptor_rounds_what_tma_loads():
    if not descriptor_passes_tf32_flag():
        pytest.skip("this Triton's TensorDescriptor has no round_f32_to_tf32")
    bits = torch.zeros(16, 16, dtype=torch.int32)
    src = torch.tensor([b - (1 << 32) if b >= 1 << 31 else b for b in _TF32_CASES], dtype=torch.int32)
    want = torch.tensor([b - (1 << 32) if b >= 1 << 31 else b for b in _TF32_CASES.values()], dtype=torch.int32)
    bits.view(-1)[:len(src)] = src
    x = bits.view(torch.float32)
    out = torch.zeros(16, 16)
    with emulated_gpu():
        _desc_to_ptr[(1,)](TensorDescriptor.from_tensor(x, [16, 16], round_f32_to_tf32=True), out, BM=16, BN=16)
    got = out.view(torch.int32).view(-1)
    assert got[:len(want)].tolist() == want.tolist()
    assert torch.equal(got[len(want):], torch.zeros(256 - len(want), dtype=torch.int32))
