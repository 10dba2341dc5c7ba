"""The CUDA-device remap of the emulated B200 (bwtriton/emu/integration/device_remap.py): code written for a GPU
(`device="cuda"`, `.cuda()`, `torch.cuda.*`) runs unmodified on CPU tensors, and everything is put back on exit."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import triton.testing

import bwtriton.emu as emu
from bwtriton.emu.integration import device_remap
from bwtriton.errors import InputError

pytestmark = pytest.mark.emulated


def real_device(t: torch.Tensor) -> torch.device:
    """The device torch itself holds the tensor on, bypassing the remap's answer."""
    with torch._C.DisableTorchFunction():
        return t.device


@pytest.mark.parametrize("make", [
    lambda d: torch.empty(5, device=d), lambda d: torch.zeros(5, device=d), lambda d: torch.ones(5, device=d),
    lambda d: torch.randn(5, device=d), lambda d: torch.full((5,), 2.0, device=d),
    lambda d: torch.arange(5, device=d), lambda d: torch.tensor([1.0, 2.0], device=d),
    lambda d: torch.empty_strided((2, 2), (1, 2), device=d), lambda d: torch.ones(2).new_zeros(3, device=d),
], ids=["empty", "zeros", "ones", "randn", "full", "arange", "tensor", "empty_strided", "new_zeros"])
@pytest.mark.parametrize("dev", ["cuda", "cuda:0", torch.device("cuda"), 0], ids=["str", "str0", "device", "int"])
def test_factories_on_cuda_give_emulated_cpu_tensors(make, dev):
    with emu.emulated_gpu("sm_100a"):
        t = make(dev)
        assert t.device == torch.device("cuda", 0) and t.is_cuda and not t.is_cpu and t.get_device() == 0
        assert real_device(t).type == "cpu"
        assert device_remap.is_emulated_cuda(t)
    assert t.device.type == "cpu"  # outside the context the tensor is what it always was


def test_moves_copy_like_host_device_transfers():
    host = torch.arange(4.0)
    with emu.emulated_gpu("sm_100a"):
        moved = [host.cuda(), host.cuda(0), host.to("cuda"), host.to(device="cuda"),
                 host.to(torch.device("cuda:0"), torch.float16), host.to("cuda", non_blocking=True)]
        for m in moved:
            assert m.device.type == "cuda" and real_device(m).type == "cpu"
            assert m.data_ptr() != host.data_ptr()  # a host -> device move is a copy
        assert moved[4].dtype == torch.float16
        dev = moved[0]
        assert dev.cuda() is dev and dev.to("cuda") is dev  # already on the device: no copy, as on a GPU
        back = dev.cpu()
        assert back.device == torch.device("cpu") and back.data_ptr() != dev.data_ptr()
        assert dev.to("cpu").device.type == "cpu" and dev.to(host).device.type == "cpu"
        assert host.to(dev).device.type == "cuda"
        dev[0] = 100.0
        assert host[0] == 0.0 and back[0] == 0.0
        assert not host.is_cuda and host.device.type == "cpu"  # unmarked CPU tensors stay CPU tensors


def test_results_follow_their_inputs_device():
    with emu.emulated_gpu("sm_100a"):
        x = torch.randn(4, 4, device="cuda")
        derived = [x + 1, x.view(16), torch.empty_like(x), x.t().contiguous(), torch.matmul(x, x), x.sum(),
                   torch.zeros(2, device=x.device), x.float().half(), torch.split(x, 2)[1], x.data]
        assert all(d.device.type == "cuda" for d in derived)
        assert torch.zeros_like(x, device="cpu").device.type == "cpu"
        assert (torch.randn(3) * 2).device.type == "cpu"  # no CUDA input: stays on the host
        y = x.clone()
        y.add_(1)
        torch.testing.assert_close(y.cpu(), x.cpu() + 1)


def test_modules_parameters_and_pinned_memory():
    with emu.emulated_gpu("sm_100a"):
        lin = torch.nn.Linear(4, 3).cuda()
        assert lin.weight.device.type == "cuda" and isinstance(lin.weight, torch.nn.Parameter)
        assert lin(torch.ones(2, 4, device="cuda")).device.type == "cuda"
        assert torch.nn.Linear(2, 2, device="cuda").bias.device.type == "cuda"
        assert torch.nn.Parameter(torch.ones(2, device="cuda")).device.type == "cuda"
        pinned = torch.empty(3, pin_memory=True).pin_memory()
        assert not pinned.is_pinned() and pinned.device.type == "cpu"
        x = torch.ones(2, device="cuda")
        x.record_stream(torch.cuda.current_stream())
        torch.set_default_device("cuda")
        assert torch.empty(2).device.type == "cuda" and torch.arange(3).device.type == "cuda"
        torch.set_default_device("cpu")
        assert torch.empty(2).device.type == "cpu"
        torch.set_default_device("cuda")  # left set: leaving the context must put the default back
    assert torch.empty(2).device.type == "cpu"


def test_torch_cuda_entry_points_answer_for_one_b200():
    with emu.emulated_gpu("sm_100a"):
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1 and torch.cuda.current_device() == 0
        torch.cuda.set_device(0)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        props = torch.cuda.get_device_properties(0)
        assert (props.major, props.minor, props.multi_processor_count) == (10, 0, 148)
        assert props.total_memory == 192 * 2 ** 30 and props.shared_memory_per_block_optin == 232448
        assert torch.cuda.mem_get_info() == (192 * 2 ** 30, 192 * 2 ** 30)
        assert torch.cuda.memory_allocated() == 0 and torch.cuda.max_memory_allocated() == 0
        torch.cuda.reset_peak_memory_stats()
        s = torch.cuda.Stream()
        assert s.cuda_stream == 0 and s.query() and torch.cuda.current_stream() == s
        with torch.cuda.stream(s):
            s.wait_stream(torch.cuda.default_stream())
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        sum(range(20000))
        end.record()
        end.synchronize()
        assert start.elapsed_time(end) > 0
        with pytest.raises(InputError, match="record"):
            torch.cuda.Event().elapsed_time(end)
        torch.cuda.manual_seed(7)
        a = torch.randn(4, device="cuda")
        torch.cuda.manual_seed_all(7)
        torch.testing.assert_close(torch.randn(4, device="cuda"), a, rtol=0, atol=0)
        with torch.cuda.nvtx.range("region"):
            torch.cuda.nvtx.range_push("x")
            torch.cuda.nvtx.range_pop()
        assert torch.cuda.is_bf16_supported()


@pytest.mark.parametrize("call, what", [
    (lambda: torch.cuda.CUDAGraph(), "CUDAGraph"),
    (lambda: torch.cuda.graph(None), "graph capture"),
    (lambda: torch.cuda.make_graphed_callables(None, None), "make_graphed_callables"),
    (lambda: torch.distributed.init_process_group("nccl"), "NCCL"),
    (lambda: torch.distributed.init_process_group(), "NCCL"),
    (lambda: torch.empty(2, device="cuda:1"), "only GPU"),
    (lambda: torch.ones(2).to("cuda:3"), "only GPU"),
    (lambda: torch.cuda.Event(interprocess=True), "IPC"),
])
def test_what_cannot_be_emulated_says_so(call, what):
    with emu.emulated_gpu("sm_100a"):
        with pytest.raises(InputError, match=what) as info:
            call()
    assert "emulat" in str(info.value) or "cuda:0" in str(info.value)


LIBRARY = textwrap.dedent('''
    """A library written for a GPU: allocates on "cuda" at import, autotunes, launches a Triton kernel."""
    import torch
    import triton
    import triton.language as tl

    TABLE = torch.arange(16, dtype=torch.float32, device="cuda") * 0.5 - 3.0
    assert torch.cuda.is_available() and TABLE.is_cuda

    @triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
    @triton.jit
    def _lookup_scale(idx_ptr, table_ptr, w_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        idx = tl.load(idx_ptr + offs, mask=mask, other=0)
        val = tl.load(table_ptr + idx, mask=mask) * tl.load(w_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, val, mask=mask)

    def lookup_scale(idx, w):
        assert idx.is_cuda and idx.device.type == "cuda", "expects CUDA tensors"
        out = torch.empty(idx.shape, dtype=torch.float32, device=idx.device)
        with torch.cuda.device(idx.device.index):
            _lookup_scale[lambda meta: (triton.cdiv(idx.numel(), meta["BLOCK"]),)](
                idx, TABLE, w, out, idx.numel())
        torch.cuda.synchronize()
        return out
''')


def test_an_unmodified_gpu_library_imports_autotunes_and_launches(tmp_path):
    path = tmp_path / "gpu_only_lib.py"
    path.write_text(LIBRARY)
    torch.manual_seed(0)
    idx_host = torch.randint(0, 16, (300,), dtype=torch.int32)
    w_host = torch.randn(300)
    with emu.emulated_gpu("sm_100a"):
        spec = importlib.util.spec_from_file_location("gpu_only_lib", path)
        lib = importlib.util.module_from_spec(spec)
        sys.modules["gpu_only_lib"] = lib
        try:
            spec.loader.exec_module(lib)
            out = lib.lookup_scale(idx_host.cuda(), w_host.to("cuda"))
            assert out.device.type == "cuda"
            out = out.cpu()
            assert lib._lookup_scale.best_config.kwargs["BLOCK"] in (64, 128)  # autotuned on the emulator
        finally:
            del sys.modules["gpu_only_lib"]
    expected = (idx_host.double() * 0.5 - 3.0) * w_host.double()
    torch.testing.assert_close(out.double(), expected, rtol=1e-6, atol=1e-6)  # fp32 product of exact table


def test_do_bench_and_do_bench_cudagraph_time_the_emulator():
    with emu.emulated_gpu("sm_100a"):
        x = torch.ones(64, device="cuda")
        assert triton.testing.do_bench(lambda: x.add_(1), rep=1, warmup=1) > 0
        assert triton.testing.do_bench_cudagraph(lambda: x.add_(1), rep=1) > 0


def test_everything_is_restored_after_the_context():
    names = ["Stream", "Event", "current_stream", "mem_get_info", "get_device_properties", "CUDAGraph",
             "manual_seed", "synchronize", "is_available"]
    before = {n: getattr(torch.cuda, n) for n in names}
    bench_cg, param_new = triton.testing.do_bench_cudagraph, torch.nn.Parameter.__dict__["__new__"]
    init_pg, set_default = torch.distributed.init_process_group, torch.set_default_device
    modes = torch._C._len_torch_function_stack()
    with emu.emulated_gpu("sm_100a"):
        assert torch.cuda.Stream is not before["Stream"]
        assert torch._C._len_torch_function_stack() == modes + 1
        x = torch.ones(2, device="cuda")
        with emu.emulated_gpu("sm_100a"):  # nested: the inner exit leaves the outer remap working
            pass
        assert torch.zeros(1, device="cuda").is_cuda
    assert {n: getattr(torch.cuda, n) for n in names} == before
    assert triton.testing.do_bench_cudagraph is bench_cg and torch.nn.Parameter.__dict__["__new__"] is param_new
    assert torch.distributed.init_process_group is init_pg and torch.set_default_device is set_default
    assert torch._C._len_torch_function_stack() == modes
    assert x.device.type == "cpu" and not x.is_cuda
    if not torch.cuda.is_available():  # a CPU build of torch refuses CUDA again
        with pytest.raises((AssertionError, RuntimeError)):
            torch.empty(1, device="cuda")


def test_remap_can_be_turned_off(monkeypatch):
    monkeypatch.setenv(device_remap.ENV_VAR, "0")
    with emu.emulated_gpu("sm_100a"):
        x = torch.ones(2)
        assert x.device.type == "cpu" and torch.cuda.Stream is not device_remap.EmulatedStream
        assert torch._C._len_torch_function_stack() == 0


GPU_TEST_FILE = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl

    SCALE = torch.full((1,), 3.0, device="cuda")  # module-level CUDA allocation, before any test runs

    @triton.jit
    def scale_kernel(x_ptr, s_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) * tl.load(s_ptr))

    def test_cuda_code_unchanged():
        x = torch.arange(64, dtype=torch.float32).cuda()
        out = torch.empty_like(x)
        scale_kernel[(1,)](x, SCALE, out, BLOCK=64)
        torch.cuda.synchronize()
        assert out.is_cuda
        torch.testing.assert_close(out.cpu(), torch.arange(64, dtype=torch.float32) * 3.0)
''')


def test_pytest_plugin_remaps_a_gpu_test_file(tmp_path):
    (tmp_path / "test_gpu_style.py").write_text(GPU_TEST_FILE)
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in ("BWTRITON_EMULATE", device_remap.ENV_VAR)}
    env["PYTHONPATH"] = str(root / "python")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                           "bwtriton.emu.pytest_plugin", "--emulate", "sm_100a", "--rootdir", str(tmp_path),
                           str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert "1 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
