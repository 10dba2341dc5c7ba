"""Host overhead rows: wall time per call of each bwtriton entry point and of its torch peer, on problems small
enough that the GPU never holds the loop back, so the number is what Python, validation and the launch cost.
Goal: <= 20 us per call for matmul, nvfp4_decode_matmul and nvfp4_linear.
"""
from __future__ import annotations

import collections
import contextlib
import os
import sys
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _timing import host_us  # noqa: E402

#: Per-call goal for the bwtriton rows (us).
HOST_TARGET_US = 20.0


def _cases() -> list[tuple[str, Callable, str, Callable]]:
    """(our name, our call, peer name, peer call) on GPU-cheap problems."""
    import torch

    from bwtriton.formats import quantize_nvfp4
    from bwtriton.kernels import matmul, nvfp4_decode_matmul, nvfp4_linear, nvfp4_matmul
    torch.manual_seed(0)
    a = torch.randn(128, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(128, 128, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(256, 256, device="cuda")
    w_q, w_bf16 = quantize_nvfp4(w), w.to(torch.bfloat16)
    x1 = torch.randn(1, 256, device="cuda", dtype=torch.bfloat16)
    x16 = torch.randn(16, 256, device="cuda", dtype=torch.bfloat16)
    a_q = quantize_nvfp4(torch.randn(128, 256, device="cuda"))
    gs = float(x16.float().abs().max()) / 2688
    from bwtriton.nn import NVFP4Linear
    dense = torch.nn.Linear(256, 256, bias=False, device="cuda", dtype=torch.bfloat16).requires_grad_(False)
    layer = NVFP4Linear.from_linear(dense, x_global_scale=gs)
    return [
        ("matmul bf16 128^3", lambda: matmul(a, b), "torch.matmul", lambda: torch.matmul(a, b)),
        ("nvfp4_decode_matmul M=1 N=K=256", lambda: nvfp4_decode_matmul(x1, w_q), "torch.matmul bf16",
         lambda: torch.matmul(x1, w_bf16.T)),
        ("nvfp4_linear M=16 N=K=256 (calibrated x scale)", lambda: nvfp4_linear(x16, w_q, x_global_scale=gs),
         "torch.nn.functional.linear bf16", lambda: torch.nn.functional.linear(x16, w_bf16)),
        ("nvfp4_linear M=16 N=K=256 (x scale from amax)", lambda: nvfp4_linear(x16, w_q),
         "torch.nn.functional.linear bf16", lambda: torch.nn.functional.linear(x16, w_bf16)),
        ("NVFP4Linear M=16 N=K=256 forward (eager)", lambda: layer(x16), "torch.nn.Linear bf16 forward",
         lambda: dense(x16)),
        ("nvfp4_matmul 128x256x256", lambda: nvfp4_matmul(a_q, w_q), "torch.matmul bf16",
         lambda: torch.matmul(a_q.dequantize(torch.bfloat16), w_bf16.T)),
    ]


def host_rows(calls: int = 2000) -> list[dict]:
    """Measure every case; one dict per case with 'us_ours', 'us_peer' and whether ours meets the goal."""
    rows = []
    for name, ours, peer_name, peer in _cases():
        try:
            us_ours, us_peer = host_us(ours, calls=calls), host_us(peer, calls=calls)
            rows.append({"case": name, "us_ours": us_ours, "peer_name": peer_name, "us_peer": us_peer,
                         "target_us": HOST_TARGET_US if "nvfp4_matmul" not in name else None})
        except Exception as exc:  # noqa: BLE001 - one broken entry point must not hide the others
            rows.append({"case": name, "error": f"{type(exc).__name__}: {exc}"[:160]})
        print(f"host overhead {name}: {rows[-1].get('us_ours', float('nan')):.1f} us/call "
              f"(peer {rows[-1].get('us_peer', float('nan')):.1f})", flush=True)
    return rows


def host_markdown(rows: list[dict]) -> str:
    """The host rows as a markdown table."""
    out = ["| entry point | us/call ours | peer | us/call peer | goal |", "|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['case']} | ERROR | | | {r['error']} |")
            continue
        goal = "-" if r["target_us"] is None else \
            f"<={r['target_us']:g} {'ok' if r['us_ours'] <= r['target_us'] else 'MISS'}"
        out.append(f"| {r['case']} | {r['us_ours']:.1f} | {r['peer_name']} | {r['us_peer']:.1f} | {goal} |")
    return "\n".join(out) + "\n"


def host_parts(calls: int = 2000) -> list[tuple[str, float]]:
    """On a GPU: microseconds per call of the pieces of a replayed decode / linear call (M = 1 / 16, N = K = 256),
    each in its own loop, beside torch's own allocation and F.linear: where the host time of a call goes."""
    import importlib

    import torch

    from bwtriton.formats import quantize_nvfp4
    from bwtriton.kernels import nvfp4_decode_matmul, nvfp4_linear
    from bwtriton.torch_ops import quantized_nvfp4
    launcher = importlib.import_module("bwtriton.kernels._launcher")
    decode = importlib.import_module("bwtriton.kernels.decode")
    w = torch.randn(256, 256, device="cuda")
    w_q, w_bf16 = quantize_nvfp4(w), w.to(torch.bfloat16)
    x1 = torch.randn(1, 256, device="cuda", dtype=torch.bfloat16)
    x16 = torch.randn(16, 256, device="cuda", dtype=torch.bfloat16)
    gs = float(x16.float().abs().max()) / 2688
    nvfp4_decode_matmul(x1, w_q)
    cfg = decode.tuned_decode_config(1, 256, 256, device_index=x1.device.index)
    out, entry = decode._decode("t", x1, w_q, cfg, torch.bfloat16, x1.device)
    replay = decode.make_replay(w_q, cfg, entry, 1, torch.bfloat16, x1.device)
    alpha = decode.decode_scale_arg(w_q, x1.device)
    dev = x1.device
    from bwtriton.nn import NVFP4Linear
    layer = NVFP4Linear.from_linear(torch.nn.Linear(256, 256, bias=False).cuda(), x_global_scale=gs)
    parts = [
        ("NVFP4Linear M=16 forward (eager: direct kernel call)", lambda: layer(x16)),
        ("torch.ops.bwtriton.nvfp4_linear M=16 (the op, as torch.compile runs it)",
         lambda: torch.ops.bwtriton.nvfp4_linear(x16, layer.weight_data, layer.weight_scales,
                                                 layer.weight_global_scale, None, gs, "plain")),
        ("torch.empty((1, 256), bf16, cuda)", lambda: torch.empty((1, 256), dtype=torch.bfloat16, device=dev)),
        ("torch.cuda raw stream handle", lambda: launcher._current_stream(dev)),
        ("F.linear M=1 N=K=256 (peer)", lambda: torch.nn.functional.linear(x1, w_bf16)),
        (f"decode replay ({decode.config_label(cfg)})", lambda: replay(x1, alpha, None)),
        ("nvfp4_decode_matmul M=1 (plan)", lambda: nvfp4_decode_matmul(x1, w_q)),
        ("nvfp4_linear M=16 calibrated (plan)", lambda: nvfp4_linear(x16, w_q, x_global_scale=gs)),
        ("nvfp4_linear M=16 amax (plan)", lambda: nvfp4_linear(x16, w_q)),
        ("torch.ops nvfp4_linear, new QuantizedTensor", lambda: nvfp4_linear(
            x16, quantized_nvfp4(w_q.data, w_q.scales, w_q.global_scale, "plain"), x_global_scale=gs)),
    ]
    return [(name, host_us(fn, calls=calls)) for name, fn in parts]


# --------------------------------------------------------------------------------- Python share, no GPU needed
def best_loop_us(fn: Callable[[], object], calls: int, repeats: int) -> float:
    """Microseconds per call of `fn`: the best of `repeats` loops of `calls` calls (no GPU sync: CPU only)."""
    import time
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def python_overhead_rows(calls: int = 4000, repeats: int = 7) -> list[dict]:
    """nvfp4_linear's host path on CPU tensors with the launches stubbed: per call, the microseconds of Python
    (best of `repeats` loops), the kernel launches it makes and the torch ops it runs (aten.empty = an
    allocation). What the GPU adds on top is the launches themselves and CUDA allocations, which only
    `host_rows` on a GPU measures."""
    import importlib
    from unittest import mock

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from bwtriton.formats import quantize_nvfp4
    from bwtriton.torch_ops import quantized_nvfp4
    launcher = importlib.import_module("bwtriton.kernels._launcher")
    linear = importlib.import_module("bwtriton.kernels.nvfp4_linear")
    decode = importlib.import_module("bwtriton.kernels.decode")
    validate = importlib.import_module("bwtriton.kernels._validate")
    launches = collections.Counter()

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[str(func.overloadpacket)] += 1
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    w_q = quantize_nvfp4(torch.randn(256, 256))
    x = torch.randn(16, 256).to(torch.bfloat16)
    gs = float(x.float().abs().max()) / 2688
    rows = []
    with contextlib.ExitStack() as stack:
        _stub_launches(stack, launches)
        for target, name, value in ((launcher, "_current_stream", lambda device: 0),
                                    (validate.InputChecker, "on_cuda", lambda self, t, hint="": torch.device("cpu")),
                                    (decode, "sm_count", lambda device: 132)):
            stack.enter_context(mock.patch.object(target, name, value))
        stack.enter_context(mock.patch.dict("os.environ", {"BWTRITON_DECODE_TUNE": "0"}))
        for form in ("fused", "dequant_decode", "qdq_decode", "two_kernel"):
            for label, scale, rewrap in (("calibrated", gs, False), ("amax", None, False),
                                         ("calibrated, new QuantizedTensor per call", gs, True)):
                def call():
                    w = quantized_nvfp4(w_q.data, w_q.scales, w_q.global_scale, "plain") if rewrap else w_q
                    return linear.nvfp4_linear(x, w, x_global_scale=scale, form=form)
                call(), call()  # slow path, then the plan's first call (makes its scratch)
                launches.clear()
                with Ops() as counted:
                    call()
                per_call = launches["n"]
                best = best_loop_us(call, calls, repeats)
                rows.append({"case": f"nvfp4_linear {form} M=16 N=K=256 ({label})", "python_us": best,
                             "launches": per_call, "torch_ops": dict(counted.ops)})
        _forget_cpu_plans()  # CPU plans and fake entries must not outlive the stubs
    return rows


def _stub_launches(stack, launches: "collections.Counter") -> None:
    """Compiled launches become no-ops that count into launches['n'] (the first call's JIT launch too);
    `run_entry` itself runs for real."""
    import importlib
    from unittest import mock
    launcher = importlib.import_module("bwtriton.kernels._launcher")

    class Compiled:
        function, packed_metadata = 0, ()

        def run(self, *call):
            launches["n"] += 1

        def launch_metadata(self, *args):
            return None

    def fake_jit(self, grid, device, args, kwargs):
        launches["n"] += 1
        return Compiled(), self._tail(len(args), {k: v for k, v in kwargs.items() if k not in launcher._LAUNCH_OPTIONS})
    stack.enter_context(mock.patch.object(launcher.CachedLauncher, "_jit_launch", fake_jit))


def _stub_device(stack) -> None:
    """CPU stand-ins for everything a replayed call asks the GPU: the compiled launch is a no-op, device checks
    pass for CPU tensors, SM count 132 and capability 90 (the H200), tuning picks the first candidate, and the
    decode replay passes x as is (as Triton's CUDA launcher allows)."""
    import importlib
    from unittest import mock

    import torch
    launcher = importlib.import_module("bwtriton.kernels._launcher")
    decode = importlib.import_module("bwtriton.kernels.decode")
    mm = importlib.import_module("bwtriton.kernels.matmul")
    lin = importlib.import_module("bwtriton.kernels.nvfp4_linear")
    _stub_launches(stack, collections.Counter())
    for target, name, value in (
            (launcher, "_current_stream", lambda device: 0),
            (importlib.import_module("bwtriton.kernels._validate").InputChecker, "on_cuda",
             lambda self, tensors, hint="", emulable=True: torch.device("cpu")),
            (decode, "sm_count", lambda d: 132), (mm, "sm_count", lambda d: 132), (lin, "sm_count", lambda d: 132),
            (mm, "device_capability", lambda d: 90), (decode, "device_capability", lambda d: 90),
            (lin, "tcgen05_block_scaled", lambda d: False), (mm, "_autotune", lambda run, cands, key: cands[0]),
            (decode, "rotated_kernel_time_us", lambda calls: 1.0), (lin, "rotated_kernel_time_us", lambda calls: 1.0),
            (launcher, "reads_only_data_ptr", lambda d: True),
            (torch.Tensor, "is_cuda", property(lambda self: True))):  # NVFP4Linear's eager CUDA branch
        stack.enter_context(mock.patch.object(target, name, value))


def python_entry_rows(calls: int = 2000, repeats: int = 15) -> list[dict]:
    """The Python share per call of `_cases`' bwtriton entry points on CPU tensors (`_stub_device`), best of
    `repeats` loops after the plans are made; the linear form is fixed to 'dequant_decode' and the decode config
    to the untuned GEMV. Plans and entries made here are dropped afterwards."""
    import contextlib
    import importlib

    import torch

    from bwtriton.formats import quantize_nvfp4
    with contextlib.ExitStack() as stack:
        _stub_device(stack)
        from bwtriton.kernels import matmul, nvfp4_decode_matmul, nvfp4_linear
        from bwtriton.nn import NVFP4Linear
        decode = importlib.import_module("bwtriton.kernels.decode")
        lin = importlib.import_module("bwtriton.kernels.nvfp4_linear")
        torch.manual_seed(0)
        a, b = torch.randn(128, 128).bfloat16(), torch.randn(128, 128).bfloat16()
        w_q = quantize_nvfp4(torch.randn(256, 256))
        x1, x16 = torch.randn(1, 256).bfloat16(), torch.randn(16, 256).bfloat16()
        gs = float(x16.float().abs().max()) / 2688
        layer = NVFP4Linear.from_linear(torch.nn.Linear(256, 256, bias=False), x_global_scale=gs)
        for m in (1, 16):
            stack.enter_context(_setitem(decode._TUNED, (None, m, 256, 256, "plain", torch.bfloat16),
                                         decode.default_config(m, 256, 256, 132)))
        stack.enter_context(_setitem(lin._FORM, (None, 16, 256, 256, False, "plain"), "dequant_decode"))
        rows = []
        for name, fn in (("matmul bf16 128^3", lambda: matmul(a, b)),
                         ("nvfp4_decode_matmul M=1 N=K=256", lambda: nvfp4_decode_matmul(x1, w_q)),
                         ("nvfp4_linear M=16 (calibrated x scale)", lambda: nvfp4_linear(x16, w_q, x_global_scale=gs)),
                         ("nvfp4_linear M=16 (x scale from amax)", lambda: nvfp4_linear(x16, w_q)),
                         ("NVFP4Linear M=16 forward (eager)", lambda: layer(x16))):
            fn(), fn()
            rows.append({"case": name, "python_us": best_loop_us(fn, calls, repeats)})
        _forget_cpu_plans()
    return rows


@contextlib.contextmanager
def _setitem(d: dict, key, value):
    d[key] = value
    try:
        yield
    finally:
        d.pop(key, None)


def _forget_cpu_plans() -> None:
    """Drop the plans and launcher entries made on CPU tensors under the stubs."""
    import importlib
    for name in ("matmul", "decode", "nvfp4_linear", "nvfp4_dequant"):
        mod = importlib.import_module(f"bwtriton.kernels.{name}")
        for value in vars(mod).values():
            if hasattr(value, "_entries") and hasattr(value, "clear"):
                value.clear()
    for name in ("decode", "nvfp4_linear"):
        importlib.import_module(f"bwtriton.kernels.{name}")._PLANS.clear()
    importlib.import_module("bwtriton.kernels.matmul")._FACTS.clear()


if __name__ == "__main__":
    if "--parts" in sys.argv:
        for name, us in host_parts():
            print(f"{name}: {us:.1f} us/call")
    elif "--python-entry-points" in sys.argv:
        for row in python_entry_rows():
            print(f"{row['case']}: {row['python_us']:.2f} us Python per call (launches stubbed)")
    elif "--python-only" in sys.argv:
        for row in python_overhead_rows():
            print(f"{row['case']}: {row['python_us']:.1f} us Python, {row['launches']} launches, "
                  f"torch ops {row['torch_ops']}")
    else:
        print(host_markdown(host_rows()))
