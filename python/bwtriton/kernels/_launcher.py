"""Launching bwtriton's kernels: through bwtriton's pass pipeline, and with as little host time per call as possible.

`bwtriton_pipeline(device)` makes any launch inside it compile through bwtriton's passes for `device`'s target.

`CachedLauncher` wraps one `@triton.jit` / `@gluon.jit` kernel. The first launch for a key goes through Triton's
JIT inside `bwtriton_pipeline` (binding, specialisation, compile or disk-cache hit) and keeps the resulting
`CompiledKernel`; later launches for the same key call the compiled kernel's launcher directly
(`CompiledKernel.run`, the call `JITFunction.run` ends in), skipping the binder, the cache-key hashing and the
pipeline's context switch: ~20-40 us of Python per call in Triton 3.6's `JITFunction.run`, against a few us here.

The caller's key must determine everything Triton specialises on except pointer alignment (which the launcher
adds itself): the constexpr/option keyword arguments and every integer argument's value class (== 1, % 16 == 0).
Keying on the exact integer values (shapes, strides) is the simple way to get that right.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator, Sequence

import torch
from triton import knobs as _knobs  # at import: a function-level import costs ~1 us per launch in run_entry

from ..pipeline import resolve_passes, scoped
from ..targets import target_for_capability
from ._device import device_capability, device_key

#: Launch options Triton takes as keywords that are not kernel parameters.
_LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "launch_pdl", "maxnreg", "num_buffers_warp_spec",
                             "num_consumer_groups", "reg_dec_producer", "reg_inc_consumer", "debug"})


@functools.lru_cache(maxsize=None)
def _selection_for(capability: int):
    target = target_for_capability(capability)
    return resolve_passes(None, target), target


@contextlib.contextmanager
def bwtriton_pipeline(device: torch.device) -> Iterator[None]:
    """Compile any kernel launched inside this block through bwtriton's passes for `device`'s target.

    `pipeline.scoped`: the hook and the selection's cache folder (shared with `enable()`), no JIT-cache clear (our
    kernels are only ever launched inside this block, so their in-memory cache entries are pipeline-compiled)."""
    selection, target = _selection_for(device_capability(device))
    with scoped(selection, target):
        yield


def _current_stream(device: torch.device) -> int:
    # The raw handle, as Triton's driver reads it (torch.cuda.current_stream builds a Stream object: ~1 us more).
    return torch._C._cuda_getCurrentRawStream(device.index)


def _hook(hook: Any) -> Any:
    """`hook`, or None when it would do nothing: Triton 3.6's launch hooks are HookChains that are never None, and
    with a hook present every launch builds its launch metadata (~1-2 us), so empty chains are passed as None
    (the C launcher then skips the call, exactly as with no hook)."""
    calls = getattr(hook, "calls", None)
    return None if hook is None or (calls is not None and not calls) else hook


def _grid3(grid: Sequence[int]) -> tuple[int, int, int]:
    return (grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1)


def reads_only_data_ptr(device: torch.device) -> bool:
    """Whether a tensor argument of another dtype than the kernel's pointer type launches as its bytes (Triton's
    CUDA launcher calls only data_ptr(); the emulator's checks the dtype)."""
    return device.type == "cuda"


def run_entry(entry: tuple[Any, tuple], grid: tuple[int, int, int], device: torch.device,
              args: Sequence[Any]) -> None:
    """Launch a `CachedLauncher` entry on `grid` (3-D) with `args` (the positional arguments of its key: same
    shapes, dtypes, alignment and integer values as when the entry was made, pointers may differ)."""
    compiled, tail = entry
    runtime = _knobs.runtime
    enter, exit_ = _hook(runtime.launch_enter_hook), _hook(runtime.launch_exit_hook)
    stream = _current_stream(device)
    meta = None if enter is None and exit_ is None else compiled.launch_metadata(grid, stream, *args, *tail)
    compiled.run(grid[0], grid[1], grid[2], stream, compiled.function, compiled.packed_metadata, meta, enter, exit_,
                 *args, *tail)


class CachedLauncher:
    """One kernel, launched through a per-key cache of its compiled form (see the module docstring)."""

    def __init__(self, kernel: Any, *, pipeline: bool = True):
        self.kernel = kernel
        self.pipeline = pipeline
        self._arg_names: Sequence[str] = kernel.arg_names
        self._entries: dict[tuple, tuple[Any, tuple]] = {}
        #: How many launches took the JIT path (first use of a key); tests read it.
        self.jit_launches = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every compiled entry (the next launch per key goes through the JIT again)."""
        self._entries.clear()

    def _tail(self, n_positional: int, kwargs: dict) -> tuple:
        """Values of the parameters after the positional ones, in signature order (constexprs and defaults)."""
        defaults = {p.name: p.default for p in self.kernel.params}
        return tuple(kwargs[name] if name in kwargs else defaults[name] for name in self._arg_names[n_positional:])

    def launch(self, key: tuple, grid: Sequence[int], device: torch.device, args: Sequence[Any],
               kwargs: dict) -> tuple[Any, tuple]:
        """Launch `kernel[grid](*args, **kwargs)` on `device`'s current stream; `key` as the module says.
        Returns the entry (compiled kernel, constexpr tail) that `run_entry` launches again with new arguments
        of the same key, which callers keep in their own per-call-signature plans."""
        full_key = (key, device_key(device)) + tuple(a.data_ptr() % 16 == 0 for a in args if isinstance(a, torch.Tensor))
        entry = self._entries.get(full_key)
        if entry is None:
            entry = self._entries[full_key] = self._jit_launch(grid, device, args, kwargs)
        else:
            run_entry(entry, _grid3(grid), device, args)
        return entry

    def _jit_launch(self, grid, device, args, kwargs) -> tuple[Any, tuple]:
        self.jit_launches += 1
        ctx = bwtriton_pipeline(device) if self.pipeline else contextlib.nullcontext()
        with torch.cuda.device(device), ctx:
            compiled = self.kernel[tuple(grid)](*args, **kwargs)
        params = {k: v for k, v in kwargs.items() if k not in _LAUNCH_OPTIONS}
        return compiled, self._tail(len(args), params)


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


class StreamScratch:
    """The intermediate buffers of one launch plan (written and read by the plan's own kernels within one call,
    dead when the call returns), kept per CUDA stream instead of allocated on every call: each allocation is a
    couple of microseconds of host time in a call that is only launches otherwise.

    Safe because work on one stream is ordered: the next call on the stream writes the buffers only after the
    previous call's kernels ran (a PDL-launched consumer's `gdc_wait` orders its reads the same way); another
    stream gets its own set. During CUDA-graph capture the buffers are allocated fresh (from the graph's pool),
    so a graph never shares them with eager calls or with other graphs. Sets over `max_bytes` (large M) are
    allocated per call, where one allocation is small next to the kernels; at most `max_streams` sets are kept.
    """

    def __init__(self, make: Callable[[], tuple], device: torch.device, nbytes: int, *,
                 max_bytes: int = 1 << 20, max_streams: int = 8):
        self._make, self._device = make, device
        self._keep = nbytes <= max_bytes
        self._max_streams = max_streams
        self._by_stream: dict[int, tuple] = {}

    def get(self) -> tuple:
        """This stream's buffers (made on first use)."""
        if not self._keep:
            return self._make()
        stream = _current_stream(self._device) if self._device.type == "cuda" else 0
        bufs = self._by_stream.get(stream)
        if bufs is None:
            bufs = self._make()
            if not _capturing(self._device) and len(self._by_stream) < self._max_streams:
                self._by_stream[stream] = bufs
        elif _capturing(self._device):
            return self._make()
        return bufs


def rotated_kernel_time_us(calls: Sequence[Callable[[], Any]], rep_ms: float = 10.0) -> float:
    """Kernel time in us of one call of `calls` (the same work on different buffers, e.g. weight copies that
    together exceed L2) under CUDA-graph replay of one round of all of them, median of 3 batches of replays;
    `kernel_time_us(calls[0])` where capture is not possible."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # settle every allocation outside the capture
            for call in calls:
                call()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for call in calls:
                call()
        once = _replays_ms(graph, 1)  # also the warm-up
        batch = max(1, int(rep_ms / 3 / max(_replays_ms(graph, 1), once, 1e-3)))
        times = sorted(_replays_ms(graph, batch) / (batch * len(calls)) for _ in range(3))
        del graph
        return 1e3 * times[1]
    except Exception:  # noqa: BLE001 - e.g. a stream that cannot be captured
        return kernel_time_us(calls[0])


def _replays_ms(graph: Any, n: int) -> float:
    """Milliseconds of `n` back-to-back replays of a captured CUDA graph."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def kernel_time_us(fn: Callable[[], Any]) -> float:
    """Kernel time of `fn` in us under CUDA-graph replay (host overhead excluded: that is what a deployment with
    graphs sees), falling back to plain do_bench where capture is not possible."""
    import triton.testing
    try:
        return 1e3 * float(triton.testing.do_bench_cudagraph(fn, rep=10))
    except Exception:  # noqa: BLE001 - e.g. a stream that cannot be captured
        return 1e3 * float(triton.testing.do_bench(fn, warmup=2, rep=10))
