"""CUDA-device remap for the emulated B200: unmodified GPU code runs on CPU tensors.

While the emulated GPU is active (`bwtriton.emu.emulated_gpu`, `BWTRITON_EMULATE`, `pytest --emulate`), code that
asks for CUDA memory gets CPU tensors, which the emulated driver's launcher takes as the B200's memory:

* a `torch.overrides.TorchFunctionMode` rewrites ``device="cuda"`` / ``torch.device("cuda")`` arguments of torch
  functions to the CPU, makes ``.cuda()`` / ``.to("cuda")`` copy to (or stay on) the CPU, drops
  ``pin_memory``, and marks the tensors so made as *emulated-GPU tensors*: ``.device`` answers ``cuda:0``,
  ``.is_cuda`` True, ``.get_device()`` 0. Outputs of torch calls with a marked input are marked; ``.cpu()`` and
  ``.to("cpu")`` give unmarked copies. Other CPU tensors stay what they are.
* the few `torch.cuda` entry points libraries call (streams, events, memory queries, seeding, nvtx,
  `get_device_properties` with B200 figures) answer for the one emulated device; `torch.set_default_device("cuda")`
  marks new factory tensors; `triton.testing.do_bench_cudagraph` times through `do_bench` (emulator wall time).
* what cannot be emulated says so: CUDA graph capture, NCCL / multi-process `torch.distributed`.

The mode is thread-local (torch keeps its mode stack per thread): tensors allocated on other threads are not
remapped. Ops run as torch CPU ops, so cuBLAS/cuDNN-only paths are simply torch's CPU kernels. Kernel launches
run with torch functions disabled, so the emulator sees the real (CPU) tensors. `install()` returns the undo;
`BWTRITON_EMU_REMAP=0` turns the remap off.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Callable, Iterator, Optional

import torch
import torch.distributed
import triton.testing
from torch.overrides import TorchFunctionMode

from ...errors import InputError
from .properties import torch_device_properties

#: environment variable that turns the remap off (the emulated driver then takes CPU tensors only)
ENV_VAR = "BWTRITON_EMU_REMAP"
#: attribute that marks a CPU tensor as memory of the emulated GPU
_MARK = "_bwtriton_emulated_cuda"
#: what a marked tensor's `.device` answers
EMULATED_DEVICE = torch.device("cuda", 0)
#: HBM capacity of a B200, what memory queries report
_CPU = torch.device("cpu")


class EmulationUnsupportedError(InputError):
    """A CUDA feature the emulated B200 does not model (graph capture, NCCL)."""


# --------------------------------------------------------------------------------------------------------------
# marks
# --------------------------------------------------------------------------------------------------------------

def is_emulated_cuda(t: Any) -> bool:
    """True for a tensor the remap made (or derived from) CUDA memory of the emulated GPU."""
    return isinstance(t, torch.Tensor) and t.__dict__.get(_MARK, False)


def _mark(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value.__dict__[_MARK] = True
    elif isinstance(value, (tuple, list)):
        for v in value:
            _mark(v)
    return value


def _any_marked(args: tuple, kwargs: dict) -> bool:
    for v in (*args, *kwargs.values()):
        if is_emulated_cuda(v):
            return True
        if isinstance(v, (tuple, list)) and any(is_emulated_cuda(x) for x in v):
            return True
    return False


def _is_cuda_device(d: Any) -> bool:
    """Whether a device argument (str, torch.device, int ordinal) names a CUDA device."""
    if isinstance(d, torch.device):
        return d.type == "cuda"
    if isinstance(d, str):
        return d == "cuda" or d.startswith("cuda:")
    return isinstance(d, int) and not isinstance(d, bool)  # a bare ordinal is a CUDA device in torch


def _check_ordinal(d: Any) -> None:
    index = d.index if isinstance(d, torch.device) else (int(d.split(":")[1]) if isinstance(d, str) and ":" in d
                                                         else d if isinstance(d, int) else 0)
    if index not in (None, 0):
        raise InputError(f"device {d!r}: the emulated B200 is the only GPU (cuda:0); use device='cuda' or "
                         "'cuda:0'")


# --------------------------------------------------------------------------------------------------------------
# the torch function mode
# --------------------------------------------------------------------------------------------------------------

def _target_of_to(args: tuple, kwargs: dict) -> tuple[Optional[bool], tuple, dict]:
    """For `Tensor.to(...)`: (True: to CUDA, False: to CPU/another device, None: device unchanged) and the
    arguments with a CUDA device rewritten to the CPU."""
    args, kwargs = list(args), dict(kwargs)
    target: Optional[bool] = None
    for i, a in enumerate(args[1:], start=1):
        if isinstance(a, (str, torch.device, int)) and not isinstance(a, (bool, torch.dtype)):
            if _is_cuda_device(a):
                _check_ordinal(a)
                args[i], target = _CPU, True
            else:
                target = False
        elif isinstance(a, torch.Tensor):  # .to(other): other's device
            target = is_emulated_cuda(a)
    if "device" in kwargs and kwargs["device"] is not None:
        if _is_cuda_device(kwargs["device"]):
            _check_ordinal(kwargs["device"])
            kwargs["device"], target = _CPU, True
        else:
            target = False
    return target, tuple(args), kwargs


class CudaRemapMode(TorchFunctionMode):
    """Rewrites CUDA device requests to the CPU and keeps track of which tensors are emulated-GPU memory."""

    def __init__(self) -> None:
        super().__init__()
        self.default_cuda = False  # `torch.set_default_device("cuda")` is in effect
        self._factories = _factory_functions()
        self._special: dict[Any, Callable[[tuple, dict], Any]] = {
            torch.Tensor.to: self._to,
            torch.Tensor.cuda: self._cuda,
            torch.Tensor.cpu: self._cpu,
            torch.Tensor.pin_memory: lambda a, k: a[0],
            torch.Tensor.is_pinned: lambda a, k: False,
            torch.Tensor.get_device: lambda a, k: 0 if is_emulated_cuda(a[0]) else a[0].get_device(),
            torch.Tensor.device.__get__: lambda a, k: EMULATED_DEVICE if is_emulated_cuda(a[0]) else a[0].device,
            torch.Tensor.is_cuda.__get__: lambda a, k: is_emulated_cuda(a[0]) or a[0].is_cuda,
            torch.Tensor.is_cpu.__get__: lambda a, k: a[0].is_cpu and not is_emulated_cuda(a[0]),
            torch.Tensor.data.__set__: self._set_data,
        }

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        special = self._special.get(func)
        if special is not None:
            return special(args, kwargs)
        python_impl = _custom_op_python_impl(func)
        if python_impl is not None:  # its body runs under the remap (torch pops the mode around this call)
            with self:
                return python_impl(*args, **kwargs)
        want: Optional[bool] = None
        if kwargs.get("pin_memory"):
            kwargs = {**kwargs, "pin_memory": False}
        device = kwargs.get("device")
        if device is not None:
            want = _is_cuda_device(device)
            if want:
                _check_ordinal(device)
                kwargs = {**kwargs, "device": _CPU}
        if any(isinstance(a, torch.device) and a.type == "cuda" for a in args):
            args, want = tuple(_CPU if isinstance(a, torch.device) and a.type == "cuda" else a for a in args), True
        out = func(*args, **kwargs)
        if want is None:
            want = _any_marked(args, kwargs) or (self.default_cuda and func in self._factories)
        return _mark(out) if want else out

    def _to(self, args: tuple, kwargs: dict) -> Any:
        target, args, kwargs = _target_of_to(args, kwargs)
        src = args[0]
        out = src.to(*args[1:], **kwargs)
        if target is None:
            return _mark(out) if is_emulated_cuda(src) else out
        if target:
            if out is src and not is_emulated_cuda(src):  # host -> device is a copy
                out = src.clone()
            return _mark(out)
        return _unmarked_copy(src, out)

    def _cuda(self, args: tuple, kwargs: dict) -> Any:
        src = args[0]
        device = args[1] if len(args) > 1 else kwargs.get("device")
        if device is not None:
            _check_ordinal(device)
        if is_emulated_cuda(src):
            return src
        return _mark(src.clone())

    def _cpu(self, args: tuple, kwargs: dict) -> Any:
        src = args[0]
        return _unmarked_copy(src, src.cpu())

    def _set_data(self, args: tuple, kwargs: dict) -> None:
        param, value = args
        torch.Tensor.data.__set__(param, value)
        if is_emulated_cuda(value):
            _mark(param)
        else:
            param.__dict__.pop(_MARK, None)


def _custom_op_python_impl(func: Any) -> Optional[Callable[..., Any]]:
    """The Python body of a `torch.library.custom_op` (its "cuda" implementation when it has one), else None.
    Called through the dispatcher, the body would run with this mode popped and see the CPU again."""
    if not isinstance(func, torch._ops.OpOverload) or func.namespace in ("aten", "prim", "prims"):
        return None
    from torch._library.custom_ops import OPDEFS  # private torch table: only custom ops need it
    opdef = OPDEFS.get(func._schema.name)
    if opdef is None:
        return None
    return opdef._backend_fns.get("cuda") or opdef._init_fn


def _unmarked_copy(src: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """`out` of a device -> host move: a tensor of its own (not `src` itself) that carries no mark."""
    if out is src and is_emulated_cuda(src):
        out = src.clone()
    out.__dict__.pop(_MARK, None)
    return out


def _factory_functions() -> frozenset:
    """torch functions that create tensors from scratch (what `torch.set_default_device` affects)."""
    from torch.utils._device import _device_constructors  # private torch helper behind set_default_device
    return frozenset(_device_constructors())


# --------------------------------------------------------------------------------------------------------------
# torch.cuda stand-ins
# --------------------------------------------------------------------------------------------------------------

class EmulatedStream:
    """`torch.cuda.Stream` of the emulated GPU: everything runs eagerly on stream 0."""

    cuda_stream = 0
    device = EMULATED_DEVICE
    device_index = 0
    device_type = 1  # torch's DeviceType.CUDA

    def __init__(self, device: Any = None, priority: int = 0, **_: Any):
        if device is not None:
            _check_ordinal(device)
        self.priority = priority

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> "EmulatedEvent":
        event = event if event is not None else EmulatedEvent()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EmulatedStream)

    def __hash__(self) -> int:
        return 0


class EmulatedEvent:
    """`torch.cuda.Event`: CPU wall-clock time (launches are synchronous, so it times the emulator)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        if interprocess:
            raise EmulationUnsupportedError("torch.cuda.Event(interprocess=True): IPC events cannot be emulated; "
                                            "the emulated B200 belongs to one process")
        self.t: Optional[float] = None

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def wait(self, stream: Any = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "EmulatedEvent") -> float:
        if self.t is None or end.t is None:
            raise InputError("Event.elapsed_time: both events must be recorded first (call .record())")
        return (end.t - self.t) * 1e3


@contextlib.contextmanager
def _stream_context(stream: Any = None) -> Iterator[Any]:
    yield stream


def _seed_host(seed: int) -> None:
    """`torch.cuda.manual_seed`: the host generator draws the emulated GPU's random numbers. (Not
    `torch.manual_seed`, which itself calls `torch.cuda.manual_seed_all`.)"""
    torch.default_generator.manual_seed(int(seed))


def _unsupported(what: str, fix: str) -> Callable[..., Any]:
    def refuse(*_: Any, **__: Any) -> Any:
        raise EmulationUnsupportedError(f"{what} cannot be emulated on the emulated B200; {fix}")
    refuse.__name__ = what.replace(".", "_")
    return refuse


def _device_properties(target: Any) -> Callable[..., Any]:
    def get_device_properties(device: Any = None) -> Any:
        if device is not None:
            _check_ordinal(device)
        return torch_device_properties(target)
    return get_device_properties


def _cuda_entry_points(target: Any) -> dict[str, Any]:
    """`torch.cuda` attributes replaced while remapping (beyond the queries the driver patches itself)."""
    zero = lambda *_, **__: 0  # noqa: E731 - memory counters the emulator does not keep
    nothing = lambda *_, **__: None  # noqa: E731
    return {
        "Stream": EmulatedStream, "ExternalStream": EmulatedStream, "Event": EmulatedEvent,
        "current_stream": lambda device=None: EmulatedStream(), "default_stream": lambda device=None: EmulatedStream(),
        "stream": _stream_context, "set_stream": nothing, "get_device_properties": _device_properties(target),
        "mem_get_info": lambda device=None: (target.device.memory_bytes, target.device.memory_bytes),
        "memory_allocated": zero, "max_memory_allocated": zero, "memory_reserved": zero,
        "max_memory_reserved": zero, "reset_peak_memory_stats": nothing, "reset_max_memory_allocated": nothing,
        "reset_accumulated_memory_stats": nothing, "memory_stats": lambda *_, **__: {},
        "set_per_process_memory_fraction": nothing, "ipc_collect": nothing, "init": nothing,
        "is_initialized": lambda: True, "is_bf16_supported": lambda *_, **__: True,
        "get_arch_list": lambda: [target.name], "manual_seed": _seed_host, "manual_seed_all": _seed_host,
        "CUDAGraph": _unsupported("torch.cuda.CUDAGraph", "run the captured code eagerly (graph replay only "
                                  "saves launch overhead, which the emulator does not model)"),
        "graph": _unsupported("torch.cuda.graph (CUDA graph capture)", "run the code eagerly"),
        "make_graphed_callables": _unsupported("torch.cuda.make_graphed_callables", "call the modules directly"),
    }


def _nvtx_entry_points() -> dict[str, Any]:
    return {"range_push": lambda *_, **__: 0, "range_pop": lambda *_, **__: 0, "mark": lambda *_, **__: None,
            "range": lambda *_, **__: contextlib.nullcontext()}


def _refuse_nccl(original: Callable[..., Any]) -> Callable[..., Any]:
    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        name = str(backend or "").lower()
        if backend is None or "nccl" in name or "cuda" in name:
            raise EmulationUnsupportedError(
                f"torch.distributed.init_process_group(backend={backend!r}): NCCL and multi-GPU collectives cannot "
                "be emulated; the emulated B200 is one device. Run single-process, or pass backend='gloo' for "
                "CPU collectives")
        return original(backend, *args, **kwargs)
    return init_process_group


def _parameter_new(original: Callable[..., Any]) -> Callable[..., Any]:
    def __new__(cls: type, data: Any = None, requires_grad: bool = True) -> Any:
        param = original(cls, data, requires_grad)
        return _mark(param) if is_emulated_cuda(data) else param
    return __new__


def _do_bench_cudagraph(fn: Callable[[], Any], rep: int = 20, grad_to_none: Any = None, quantiles: Any = None,
                        return_mode: str = "mean") -> Any:
    """`triton.testing.do_bench_cudagraph` under emulation: the same measurement without capture."""
    return triton.testing.do_bench(fn, rep=rep, grad_to_none=grad_to_none, quantiles=quantiles,
                                   return_mode=return_mode)


def _launcher_without_remap(launcher_cls: type) -> type:
    """The driver's launcher class, run with torch functions disabled: the emulator maps the real CPU tensors."""
    class RemapAwareLauncher(launcher_cls):  # type: ignore[misc, valid-type]
        def __call__(self, *args: Any) -> None:
            with torch._C.DisableTorchFunction():
                return super().__call__(*args)
    RemapAwareLauncher.__name__ = launcher_cls.__name__
    return RemapAwareLauncher


# --------------------------------------------------------------------------------------------------------------
# install / undo
# --------------------------------------------------------------------------------------------------------------

_MISSING = object()


def enabled() -> bool:
    """Whether `BWTRITON_EMU_REMAP` leaves the remap on (default: on)."""
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "false", "no", "off")


def install(drv: Any) -> Callable[[], None]:
    """Remap CUDA requests for the emulated driver `drv` (see module docstring); returns the undo."""
    if not enabled():
        return lambda: None
    saved: list[tuple[Any, str, Any]] = []

    def patch(obj: Any, name: str, value: Any) -> None:
        saved.append((obj, name, obj.__dict__.get(name, _MISSING) if isinstance(obj, type)
                      else getattr(obj, name, _MISSING)))
        setattr(obj, name, value)

    mode = CudaRemapMode()
    for name, value in _cuda_entry_points(drv.target).items():
        patch(torch.cuda, name, value)
    for name, value in _nvtx_entry_points().items():
        patch(torch.cuda.nvtx, name, value)
    real_set_default = torch.set_default_device

    def set_default_device(device: Any) -> None:
        mode.default_cuda = device is not None and _is_cuda_device(device)
        real_set_default(_CPU if mode.default_cuda else device)
    patch(torch, "set_default_device", set_default_device)
    if torch.distributed.is_available():
        patch(torch.distributed, "init_process_group", _refuse_nccl(torch.distributed.init_process_group))
        patch(torch.distributed, "is_nccl_available", lambda: False)
    patch(torch.nn.Parameter, "__new__", staticmethod(_parameter_new(torch.nn.Parameter.__new__)))
    # torch parses record_stream's Stream argument before any torch function dispatch: patched on the class
    patch(torch.Tensor, "record_stream", lambda self, stream: None)
    patch(triton.testing, "do_bench_cudagraph", _do_bench_cudagraph)
    patch(drv, "launcher_cls", _launcher_without_remap(drv.launcher_cls))
    mode.__enter__()

    def undo() -> None:
        if mode.default_cuda:
            real_set_default(None)
        mode.__exit__(None, None, None)
        for obj, name, old in reversed(saved):
            if old is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, old)
    return undo


__all__ = ["install", "enabled", "is_emulated_cuda", "CudaRemapMode", "EmulatedStream", "EmulatedEvent",
           "EmulationUnsupportedError", "EMULATED_DEVICE", "ENV_VAR"]
