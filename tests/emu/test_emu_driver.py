"""The emulated B200 as a Triton driver: ordinary `@triton.jit` launches with CPU tensors compile for sm_100a
with Triton's own specialisation and run in the emulator; what it reports and restores; launch-side errors."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from bwtriton.emu import driver as emu_driver  # noqa: E402
from bwtriton.emu.driver import emulated_gpu  # noqa: E402
from bwtriton.emu.errors import UnsupportedInstructionError  # noqa: E402
from bwtriton.emu.integration.launcher import bind_arguments, encode_float, encode_int  # noqa: E402

pytestmark = [pytest.mark.emulated]
ROOT = Path(__file__).resolve().parents[2]


@triton.jit
def _axpy(x_ptr, y_ptr, out_ptr, n, alpha, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs * stride, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, alpha * x + y, mask=m)


@triton.jit
def _maybe_bias(x_ptr, bias_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    if bias_ptr is not None:
        x += tl.load(bias_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x, mask=m)


@triton.jit
def _dot(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], tl.dot(a, b))


@triton.jit
def _tma_copy(in_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    pm, pn = tl.program_id(0) * BM, tl.program_id(1) * BN
    out_desc.store([pm, pn], in_desc.load([pm, pn]) * 2)


@triton.jit
def _device_desc_copy(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    src = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    dst = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    pm, pn = tl.program_id(0) * BM, tl.program_id(1) * BN
    dst.store([pm, pn], src.load([pm, pn]) + 1)


# --- what the driver reports ------------------------------------------------------------------------------
@pytest.mark.parametrize("target,arch", [("sm_100a", 100), ("sm_103a", 103)])
def test_driver_reports_a_blackwell_gpu_and_restores_everything(target, arch):
    before = (torch.cuda.is_available, torch.cuda.get_device_capability, triton.runtime.driver._active)
    with emulated_gpu(target) as drv:
        active = triton.runtime.driver.active
        assert active is drv
        t = active.get_current_target()
        assert (t.backend, t.arch, t.warp_size) == ("cuda", arch, 32)
        props = active.utils.get_device_properties(active.get_current_device())
        assert props["multiprocessor_count"] == 148 and props["max_shared_mem"] == 232448
        assert props["max_shared_mem_per_sm"] == 228 * 1024 and props["tmem_columns"] == 512
        assert torch.cuda.is_available() is True
        assert torch.cuda.get_device_capability() == divmod(arch, 10)
        assert active.get_active_torch_device() == torch.device("cpu")
    assert (torch.cuda.is_available, torch.cuda.get_device_capability, triton.runtime.driver._active) == before


def test_targets_without_an_emulated_gpu_are_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match="sm_100a, sm_103a, sm_90a, not sm_80"):
        with emulated_gpu("sm_80"):
            pass
    with pytest.raises(ValueError, match="BWTRITON_EMULATE=sm_120a"):
        emu_driver.target_from_env("sm_120a")
    assert emu_driver.target_from_env("sm_90a") == "sm_90a"


# --- launches ----------------------------------------------------------------------------------------------
def test_jit_launch_uses_tritons_specialisation_and_writes_cpu_tensors():
    x, y = torch.randn(2048), torch.randn(1024)
    out2, out1 = torch.zeros(1024), torch.zeros(1000)
    with emulated_gpu("sm_100a"):
        k2 = _axpy[(4,)](x, y, out2, 1024, 0.5, 2, BLOCK=256)
        k1 = _axpy[(4,)](x, y, out1, 1000, 0.5, 1, BLOCK=256)
    torch.testing.assert_close(out2, 0.5 * x[::2] + y, rtol=0, atol=1e-6)
    torch.testing.assert_close(out1, 0.5 * x[:1000] + y[:1000], rtol=0, atol=1e-6)
    assert k2.metadata.target.arch == 100
    sig = k2.src.signature
    assert sig["x_ptr"] == "*fp32" and sig["n"] == "i32" and sig["alpha"] == "fp32" and sig["stride"] == "i32"
    assert k1.src.signature["stride"] == "constexpr"  # an int equal to 1 is specialised as a constant

    def divisible(k):
        return {k.src.fn.arg_names[p[0]] for p, a in k.src.attrs.items() if ["tt.divisibility", 16] in a}
    assert {"x_ptr", "y_ptr", "out_ptr", "n"} <= divisible(k2)  # torch's CPU allocations are 64-byte aligned
    assert "n" not in divisible(k1)  # 1000 % 16 != 0


def test_none_argument_is_a_constexpr_and_both_variants_run():
    x, bias = torch.randn(64), torch.randn(64)
    out1, out2 = torch.empty(64), torch.empty(64)
    with emulated_gpu():
        k_none = _maybe_bias[(1,)](x, None, out1, 64, BLOCK=64)
        _maybe_bias[(1,)](x, bias, out2, 64, BLOCK=64)
    assert k_none.src.signature["bias_ptr"] == "constexpr"
    assert torch.equal(out1, x) and torch.equal(out2, x + bias)


def test_tl_dot_runs_on_tcgen05_and_matches_torch():
    a = torch.randn(128, 64, dtype=torch.float16)
    b = torch.randn(64, 128, dtype=torch.float16)
    c = torch.empty(128, 128, dtype=torch.float32)
    with emulated_gpu():
        k = _dot[(1,)](a, b, c, BM=128, BN=128, BK=64)
    assert "tcgen05.mma" in k.asm["ptx"]
    # fp16 products are exact in fp32; only the fp32 accumulation order differs from torch's
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-4)


def test_host_tensor_descriptor_goes_through_tma():
    from triton.tools.tensor_descriptor import TensorDescriptor
    x = torch.randn(256, 128, dtype=torch.float16)
    y = torch.zeros_like(x)
    with emulated_gpu():
        k = _tma_copy[(2, 2)](TensorDescriptor.from_tensor(x, [128, 64]), TensorDescriptor.from_tensor(y, [128, 64]),
                              BM=128, BN=64)
    assert "cp.async.bulk.tensor" in k.asm["ptx"]
    assert torch.equal(y, x * 2)


def test_device_side_descriptor_without_allocator_is_tritons_error():
    from triton.runtime import _allocation  # the precondition: no allocator (an imported library may set one)
    x = torch.randn(128, 64)
    token = _allocation._allocator.set(_allocation._NULL_ALLOCATOR)
    try:
        with emulated_gpu():
            with pytest.raises(RuntimeError, match="set_allocator"):
                _device_desc_copy[(1, 1)](x, torch.zeros_like(x), 128, 64, BM=64, BN=64)
    finally:
        _allocation._allocator.reset(token)


def test_device_side_descriptor_uses_the_set_allocator():
    x = torch.randn(128, 64)
    y = torch.zeros_like(x)
    calls = []

    def alloc(size, align, stream):
        calls.append((size, align))
        return torch.empty(size, dtype=torch.int8)

    with emulated_gpu():
        triton.set_allocator(alloc)
        try:
            _device_desc_copy[(2, 1)](x, y, 128, 64, BM=64, BN=64)
        finally:
            from triton.runtime._allocation import NullAllocator
            triton.set_allocator(NullAllocator())
    assert calls and calls[0][0] >= 2 * 2 * 128  # two 128-byte tensor maps per program, two programs
    assert torch.equal(y, x + 1)


def test_launch_hooks_and_empty_grid():
    from triton import knobs
    x, y, out = torch.randn(8), torch.randn(8), torch.full((8,), 7.0)
    seen = []
    with emulated_gpu(), knobs.runtime.scope():
        knobs.runtime.launch_enter_hook = lambda md: seen.append("enter")
        knobs.runtime.launch_exit_hook = lambda md: seen.append("exit")
        _axpy[(0,)](x, y, out, 8, 1.0, 1, BLOCK=8)
        assert torch.equal(out, torch.full((8,), 7.0)) and seen == []  # nothing launched
        _axpy[(1,)](x, y, out, 8, 1.0, 1, BLOCK=8)
    assert seen == ["enter", "exit"] and torch.equal(out, x + y)


# --- launch-side errors ------------------------------------------------------------------------------------
def test_wrong_argument_count_fails_like_triton():
    x = torch.randn(8)
    with emulated_gpu():
        with pytest.raises(TypeError, match="missing 1 required positional argument: 'stride'"):
            _axpy[(1,)](x, x, x, 8, 1.0, BLOCK=8)
        with pytest.raises(TypeError):
            _axpy[(1,)](x, x, x, 8, 1.0, 1, 5, BLOCK=8)


def test_non_cpu_tensor_names_the_argument():
    x = torch.randn(8)
    with emulated_gpu():
        with pytest.raises(ValueError, match=r"argument y_ptr.*meta.*device='cpu'"):
            _axpy[(1,)](x, torch.empty(8, device="meta"), x, 8, 1.0, 1, BLOCK=8)


def test_binding_checks_types_counts_and_ranges():
    sig = {"p": "*fp32", "n": "i32", "f": "fp16", "C": "constexpr"}
    t = torch.zeros(4)
    vals = bind_arguments(sig, (t, 3, 1.5, 64), None)
    assert vals[0] is t and vals[1].bits == 3 and len(vals) == 3
    assert vals[2].bits == int(torch.tensor(1.5, dtype=torch.float16).view(torch.int16))
    with pytest.raises(TypeError, match="takes 4 arguments"):
        bind_arguments(sig, (t, 3, 1.5), None)
    with pytest.raises(OverflowError, match="i32"):
        bind_arguments(sig, (t, 2 ** 31, 1.5, 64), None)
    with pytest.raises(TypeError, match="argument n: expected an integer"):
        bind_arguments(sig, (t, "3", 1.5, 64), None)
    with pytest.raises(TypeError, match="raw integer address"):
        bind_arguments(sig, (1234, 3, 1.5, 64), None)
    assert encode_int("i32", -1, "x").bits == 2 ** 64 - 1  # sign-extended; the runner keeps the slot's bytes
    # bf16 scalars are truncated as Triton's C launcher does: 1 + 2^-8 + 2^-9 would round up to 0x3F81
    assert encode_float("bf16", 1.0 + 2 ** -8 + 2 ** -9, "x").bits == 0x3F80


def test_benchmarker_and_autotune_run_on_the_emulator():
    @triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
    @triton.jit
    def tuned_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

    x, y, out = torch.randn(256), torch.randn(256), torch.empty(256)
    with emulated_gpu():
        tuned_add[lambda meta: (triton.cdiv(256, meta["BLOCK"]),)](x, y, out, 256)
        assert tuned_add.best_config.kwargs["BLOCK"] in (64, 128)
        assert torch.equal(out, x + y)
        out2 = torch.empty(256)
        ms = triton.testing.do_bench(lambda: _axpy[(4,)](x, y, out2, 256, 2.0, 1, BLOCK=64), warmup=1, rep=1)
    assert ms > 0 and torch.equal(out2, 2.0 * x + y)


def test_env_var_activates_on_import_and_bad_values_are_clear():
    code = ("import bwtriton, torch, triton; t = triton.runtime.driver.active.get_current_target(); "
            "print(t.arch, torch.cuda.get_device_capability())")
    env = dict(os.environ, BWTRITON_EMULATE="sm_100a", PYTHONPATH=str(ROOT / "python"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["100", "(10,", "0)"]
    env["BWTRITON_EMULATE"] = "sm_90"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "unknown target 'sm_90'" in out.stderr


def test_gluon_launch_runs_tcgen05_on_the_emulated_gpu():
    from fixtures import kernels as ptx_corpus  # the corpus' Gluon one-MMA kernel (tests/fixtures/kernels.py)
    _gl, one_mma, _, _ = ptx_corpus._gluon_kernels()
    a = torch.randn(128, 64, dtype=torch.float16)
    b = torch.randn(128, 64, dtype=torch.float16)  # B^T stored [N, K]
    c = torch.zeros(128, 128)
    with emulated_gpu():
        k = one_mma[(1,)](a, b, c, M=128, N=128, K=64, num_warps=4)
    assert "tcgen05.mma" in k.asm["ptx"] and "tcgen05.ld" in k.asm["ptx"]
    torch.testing.assert_close(c, a.float() @ b.float().T, rtol=1e-5, atol=1e-4)


@triton.jit
def _overread(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)  # unmasked: reads past the end of x when n < BLOCK
    tl.store(out_ptr + offs, x, mask=offs < n)


@triton.jit
def _overwrite(out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, offs.to(tl.float32))  # unmasked: writes past the end when out is shorter


def test_reads_a_little_past_a_tensor_behave_like_a_gpu_and_strict_bounds_fault(monkeypatch):
    from bwtriton.emu.errors import MemoryFaultError
    x, out = torch.randn(40), torch.zeros(40)
    with emulated_gpu():
        _overread[(1,)](x, out, 40, BLOCK=64)
        assert torch.equal(out, x)  # the over-read lanes are masked off at the store, as on the GPU
        monkeypatch.setenv("BWTRITON_EMU_STRICT_BOUNDS", "1")
        with pytest.raises(MemoryFaultError, match="outside every launch buffer"):
            _overread[(1,)](x, out, 40, BLOCK=64)


def test_a_store_past_a_tensor_is_a_fault():
    from bwtriton.emu.errors import MemoryFaultError
    out = torch.zeros(40)
    with emulated_gpu():
        with pytest.raises(MemoryFaultError, match=r"wrote past the end of launch buffer .*\(160 bytes\)"):
            _overwrite[(1,)](out, BLOCK=64)
    assert torch.equal(out, torch.arange(40, dtype=torch.float32))  # in-bounds stores landed


def test_a_bad_pass_selection_leaves_nothing_patched():
    from bwtriton.errors import UnknownPassError
    before = (torch.cuda.is_available, triton.runtime.driver._active)
    with pytest.raises(UnknownPassError):
        with emulated_gpu("sm_100a", passes="no-such-pass"):
            pass
    assert (torch.cuda.is_available, triton.runtime.driver._active) == before
    assert emu_driver.active_driver() is None
