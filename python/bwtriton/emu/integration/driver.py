"""An emulated Blackwell GPU as a Triton 3.6 driver.

While `emulated_gpu("sm_100a")` is active, `triton.runtime.driver.active` is an `EmulatedDriver`: Triton's own
`@triton.jit`/Gluon launch path (binder, argument specialisation, caches, `CompiledKernel`) runs unchanged,
compiles for cuda:100 through bwtriton's pipeline, and `EmulatedLauncher` runs the PTX in `bwtriton.emu` over
CPU torch tensors. `torch.cuda.is_available()` / `get_device_capability()` (and a few neighbours) answer as a
B200 would, so GPU-style test code runs with `device="cpu"`. Everything is restored on exit.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Sequence

from ...emulation import ENV_VAR, requested_emulation
from ...errors import InputError
from ...targets import EMULATED_TARGETS, Target, get_target
from . import device_remap
from .launcher import EmulatedLauncher
from .properties import B200_PROPERTIES, DEVICE_NAMES, torch_device_properties


class EmulatedUtils:
    """`driver.active.utils`: device properties, binary "loading" and the odd knobs Triton calls."""

    def __init__(self, target: Target):
        self.target = target

    def get_device_properties(self, device: int = 0) -> dict:
        """B200 figures (a copy, so callers may modify it)."""
        return dict(B200_PROPERTIES)

    def load_binary(self, name: str, kernel: bytes, shared: int, device: int):
        """(module, function, n_regs, n_spills, n_max_threads) like the CUDA driver's. Nothing is loaded: the
        launcher runs the kernel's PTX, found through the metadata Triton hands it. The module handle is None
        because a CompiledKernel unloads a non-None module when collected, through whatever driver is active
        then -- after the emulation ended that is the real (or no) CUDA driver, which must never see it."""
        if shared > B200_PROPERTIES["max_shared_mem"]:
            raise InputError(f"kernel {name} needs {shared} bytes of shared memory; a B200 block has at most "
                             f"{B200_PROPERTIES['max_shared_mem']}")
        return None, 0, 0, 0, 1024

    def unload_module(self, module: object) -> None:
        """Nothing was loaded (see load_binary)."""

    def set_printf_fifo_size(self, size: int) -> None:
        """Device printf is not emulated; accepting the size keeps `tl.device_print` kernels compiling."""

    def cuOccupancyMaxActiveClusters(self, *args) -> int:  # noqa: N802 - CUDA's name
        return B200_PROPERTIES["multiprocessor_count"]

    def fill_tma_descriptor(self, *args):
        raise InputError("the emulated driver builds tensor maps from TensorDescriptor arguments itself; "
                         "fill_tma_descriptor has no meaning here")


class _EmulatedEvent:
    """`torch.cuda.Event` stand-in for Triton's benchmarker: wall-clock time on the CPU."""

    def __init__(self, enable_timing: bool = True, **_: Any):
        self.t = 0.0

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "_EmulatedEvent") -> float:
        return (end.t - self.t) * 1e3


class _EmulatedDeviceInterface:
    """What `driver.active.get_device_interface()` returns (Triton uses Event/synchronize/current_device)."""

    Event = _EmulatedEvent

    @staticmethod
    def synchronize(*_: Any) -> None:
        pass

    @staticmethod
    def current_device() -> int:
        return 0


def emulated_benchmark(kernel_call: Callable, warmup: int = 0, rep: int = 1, quantiles: Optional[list] = None,
                       return_mode: str = "mean", **_: Any):
    """`get_benchmarker()`: milliseconds of emulated wall time (one warm-up, `rep`-bounded repetitions).
    The numbers measure the emulator, not a Blackwell GPU; they exist so autotuning code runs."""
    kernel_call()
    times = []
    for _ in range(max(1, min(int(rep), 3))):
        t0 = time.perf_counter()
        kernel_call()
        times.append((time.perf_counter() - t0) * 1e3)
    if quantiles:
        import numpy as np  # heavy: numpy, only for quantiles
        out = [float(np.quantile(times, q)) for q in quantiles]
        return out[0] if len(out) == 1 else out
    return {"min": min(times), "max": max(times), "median": sorted(times)[len(times) // 2]}.get(
        return_mode, sum(times) / len(times))


def _driver_base():
    from triton.backends.driver import DriverBase  # heavy: Triton's runtime/backends, loaded when the driver is used
    return DriverBase


class EmulatedDriver(_driver_base()):
    """`triton.runtime.driver.active` while emulating: one device (0), stream 0, target cuda:<capability>."""

    def __init__(self, target: "str | Target" = "sm_100a"):
        super().__init__()
        self.target = get_target(target)
        if self.target.device is None:
            raise InputError(f"the emulator models {', '.join(EMULATED_TARGETS)}, not {self.target.name}")
        self.utils = EmulatedUtils(self.target)
        self.launcher_cls = EmulatedLauncher

    @classmethod
    def is_active(cls) -> bool:
        # never picked by Triton's own discovery: `emulated_gpu` installs it explicitly
        return False

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget  # heavy: Triton's runtime/backends, loaded when the driver is used
        return GPUTarget("cuda", self.target.capability, 32)

    def get_active_torch_device(self):
        import torch  # heavy: torch, loaded when the driver is used
        return torch.device("cpu")

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device: int) -> None:
        if int(device) != 0:
            raise InputError(f"the emulated GPU is device 0; device {device} does not exist")

    def get_current_stream(self, device: Optional[int] = None) -> int:
        return 0

    def get_device_capability(self, device: int = 0) -> tuple[int, int]:
        return divmod(self.target.capability, 10)

    def get_device_interface(self):
        return _EmulatedDeviceInterface

    def map_python_to_cpp_type(self, ty: str) -> str:
        from triton.backends.nvidia.driver import ty_to_cpp  # heavy: Triton's runtime/backends, loaded when the driver is used
        return ty_to_cpp(ty)

    def get_benchmarker(self):
        return emulated_benchmark

    def get_empty_cache_for_benchmark(self):
        import torch  # heavy: torch, loaded when the driver is used
        return torch.empty(1024, dtype=torch.int32)

    def clear_cache(self, cache) -> None:
        cache.zero_()

    def assemble_tensormap_to_arg(self, tensormaps_info, args):
        return args


# --------------------------------------------------------------------------------------------------------------
# torch.cuda answers while emulating
# --------------------------------------------------------------------------------------------------------------

def _cuda_answers(target: Target) -> dict[str, Callable]:
    """The `torch.cuda` queries patched while emulating, and what they answer. Allocations on and copies to
    "cuda", streams and events are the device remap's (device_remap.py)."""
    major, minor = divmod(target.capability, 10)

    return {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "get_device_capability": lambda device=None: (major, minor),
        "get_device_name": lambda device=None: DEVICE_NAMES[target.name],
        "get_device_properties": lambda device=None: torch_device_properties(target),
        "synchronize": lambda device=None: None,
        "set_device": lambda device: None,
        "empty_cache": lambda: None,
        "is_current_stream_capturing": lambda: False,  # nothing is ever captured: stream 0 runs eagerly
        "device": _EmulatedDeviceContext,
    }


class _EmulatedDeviceContext:
    """`torch.cuda.device(d)` while emulating: the one emulated device (0, or the CPU tensors' `cpu`) is always
    current, so `with torch.cuda.device(x.device):` around a launch is a no-op instead of "Expected a cuda
    device"."""

    def __init__(self, device: Any):
        import torch  # heavy: torch, loaded when the driver is used
        dev = torch.device(device) if isinstance(device, (str, torch.device)) else device
        if isinstance(dev, torch.device):
            if dev.type not in ("cpu", "cuda") or (dev.index or 0) != 0:
                raise InputError(f"the emulated GPU is device 0 (CPU tensors); there is no device {dev}")
        elif dev not in (None, -1, 0):
            raise InputError(f"the emulated GPU is device 0 (CPU tensors); there is no device {dev}")

    def __enter__(self) -> "_EmulatedDeviceContext":
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False


def _default_alloc_fn(size: int, align: int, stream: Any):
    """Replacement for `triton._internal_testing.default_alloc_fn` (which allocates on "cuda")."""
    import torch  # heavy: torch, loaded when the driver is used
    return torch.empty(size, dtype=torch.int8)


@dataclass
class _Saved:
    """What activation replaced, to put back on exit."""

    driver_active: Any
    attrs: list[tuple[Any, str, Any]] = field(default_factory=list)
    undo: list[Callable[[], None]] = field(default_factory=list)


@dataclass
class _State:
    stack: list[tuple[EmulatedDriver, _Saved]] = field(default_factory=list)


_state = _State()
_MISSING = object()


def _patch(saved: _Saved, obj: Any, name: str, value: Any) -> None:
    saved.attrs.append((obj, name, getattr(obj, name, _MISSING)))
    setattr(obj, name, value)


def activate(target: "str | Target" = "sm_100a", passes: Any = None) -> EmulatedDriver:
    """Install the emulated GPU (see module docstring). Nestable; undo with `deactivate()`."""
    import torch  # heavy: torch, loaded when the driver is used
    from triton.runtime import driver as driver_config  # heavy: Triton's runtime/backends, loaded when the driver is used

    from ...pipeline import enable  # heavy: the pass pipeline (Triton's compiler), loaded when a driver activates
    drv = EmulatedDriver(target)
    enable(passes, target=drv.target.name)  # first: a bad pass selection raises before anything is patched
    saved = _Saved(driver_active=driver_config._active)
    driver_config.set_active(drv)
    for name, fn in _cuda_answers(drv.target).items():
        _patch(saved, torch.cuda, name, fn)
    # the raw current-stream query Triton-style launchers make (absent from CPU builds of torch): stream 0
    _patch(saved, torch._C, "_cuda_getCurrentRawStream", lambda device=None: 0)
    try:
        import triton._internal_testing as internal_testing  # heavy: Triton's runtime/backends, loaded when the driver is used
        _patch(saved, internal_testing, "default_alloc_fn", _default_alloc_fn)
    except ImportError:  # pragma: no cover - triton without its testing helpers
        pass
    saved.undo.append(device_remap.install(drv))
    _state.stack.append((drv, saved))
    return drv


def deactivate() -> None:
    """Undo the last `activate()`: driver, torch.cuda answers, bwtriton pipeline, JIT caches."""
    from triton.runtime import driver as driver_config  # heavy: Triton's runtime/backends, loaded when the driver is used

    from ...pipeline import disable  # heavy: the pass pipeline (Triton's compiler), loaded when a driver activates
    if not _state.stack:
        return
    _drv, saved = _state.stack.pop()
    for undo in reversed(saved.undo):
        undo()
    for obj, name, old in reversed(saved.attrs):
        if old is _MISSING:
            delattr(obj, name)
        else:
            setattr(obj, name, old)
    driver_config._active = saved.driver_active
    disable()


def active_driver() -> Optional[EmulatedDriver]:
    """The innermost active emulated driver, or None."""
    return _state.stack[-1][0] if _state.stack else None


@contextlib.contextmanager
def emulated_gpu(target: "str | Target" = "sm_100a", passes: Any = None) -> Iterator[EmulatedDriver]:
    """``with emulated_gpu("sm_100a"): kernel[grid](cpu_tensors...)``: Triton launches run in the emulator."""
    drv = activate(target, passes)
    try:
        yield drv
    finally:
        deactivate()


def target_from_env(value: Optional[str] = None, source: str = ENV_VAR) -> Optional[str]:
    """The target named by BWTRITON_EMULATE (or `value`, given as `source`; None when unset/empty/0); bad names
    raise with the valid ones."""
    value = requested_emulation() if value is None else value.strip()
    if value in (None, "", "0"):
        return None
    if value.lower() in ("1", "true", "yes"):
        return "sm_100a"
    tgt = get_target(value)
    if tgt.device is None:
        raise InputError(f"{source}={value}: the emulator models {', '.join(EMULATED_TARGETS)} only")
    return tgt.name


def activate_from_env() -> Optional[EmulatedDriver]:
    """Activate when BWTRITON_EMULATE names a target and nothing is active yet."""
    target = target_from_env()
    if target is None or _state.stack:
        return None
    return activate(target)


__all__: Sequence[str] = ["EmulatedDriver", "EmulatedUtils", "B200_PROPERTIES", "emulated_gpu", "activate",
                          "deactivate", "active_driver", "activate_from_env", "target_from_env", "ENV_VAR"]
