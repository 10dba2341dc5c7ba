"""How the benchmarks time things: kernel time under CUDA-graph replay, and host time per call.

`graph_ms(calls)` captures one CUDA graph that runs the callables in `calls` round-robin (each typically the same
operation on a different copy of the inputs, so that the working set exceeds L2 and every replay reads from HBM,
as a layer in a real model does) and times its replays with CUDA events: host overhead is out of the number. If
capture fails (an operation that syncs with the host), it falls back to `triton.testing.do_bench` and says so.

`host_us(fn)` is the wall time per call of a loop of calls, with a problem small enough that the GPU never holds
the loop back: what Python, the wrappers and the launch cost per call.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Sequence

import triton
import triton.language as tl


def _sync() -> None:
    import torch
    torch.cuda.synchronize()


def graph_ms(calls: Sequence[Callable[[], Any]], *, target_ms: float = 20.0, replays: int = 5) -> tuple[float, str]:
    """(median ms per call, timer name) for the callables in `calls`, run round-robin inside one CUDA graph of
    about `target_ms`. The timer name is "graph" or, when capture was impossible, "eager"."""
    import torch
    import triton.testing

    stream = torch.cuda.Stream()
    try:
        with torch.cuda.stream(stream):
            for fn in calls:  # compile, autotune and allocate outside capture
                fn()
            stream.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for i in range(5 * len(calls)):
                calls[i % len(calls)]()
            end.record()
            end.synchronize()
            estimate = max(start.elapsed_time(end) / (5 * len(calls)), 1e-3)
            n = max(len(calls), min(2000, int(target_ms / estimate)))
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                for i in range(n):
                    calls[i % len(calls)]()
            graph.replay()  # first replay uploads the graph
            stream.synchronize()
            times = []
            for _ in range(replays):
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / n)
        del graph
        return statistics.median(times), "graph"
    except Exception:  # noqa: BLE001 - capture not possible for this operation: time it eagerly
        _sync()
        fn = calls[0]
        return float(triton.testing.do_bench(fn, warmup=10, rep=50)), "eager"


def host_us(fn: Callable[[], Any], *, calls: int = 2000) -> float:
    """Wall-clock microseconds per call of `fn` in a tight loop (after a warm-up call), the GPU synchronised
    before and after. With a GPU-cheap problem this is the host cost per call."""
    fn()
    _sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    _sync()
    return (time.perf_counter() - t0) / calls * 1e6


def copy_bandwidth_gbs(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + bytes written per second): the best of
    `copy_bandwidth_report`'s methods, the practical ceiling for a kernel that streams memory."""
    return max(copy_bandwidth_report(nbytes).values())


def copy_bandwidth_report(nbytes: int = 1 << 30) -> dict[str, float]:
    """GB/s (read + write) of copying `nbytes`, measured four ways, because they differ:

    * "torch copy_ (graph)": `dst.copy_(src)` captured in a CUDA graph. A same-dtype contiguous copy_ is a
      cudaMemcpyAsync, which capture turns into a graph *memcpy node*; the driver may run that on a copy engine
      rather than as an SM kernel, and it gave 2769 GB/s on the H200 against ~4300 eager.
    * "torch copy_ (eager)": the same call, back to back on a stream, timed with events.
    * "triton copy (graph)" / "triton copy (eager)": a streaming Triton kernel (16-byte loads and stores, one 32 KiB
      chunk per CTA), what our own memory-bound kernels are: the fair ceiling for the decode rows.
    """
    import torch
    src = torch.empty(nbytes // 4, dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    src.fill_(1)
    moved = 2 * src.numel() * 4
    copy_kernel = streaming_copy_kernel
    block = 8192
    grid = (triton_cdiv(src.numel(), block),)

    def triton_copy():
        copy_kernel[grid](src, dst, src.numel(), BLOCK=block, num_warps=8)

    def torch_copy():
        dst.copy_(src)
    out = {}
    for name, fn in (("torch copy_", torch_copy), ("triton copy", triton_copy)):
        ms, timer = graph_ms([fn], target_ms=50.0)
        out[f"{name} ({timer})"] = moved / (ms * 1e-3) / 1e9
        out[f"{name} (eager)"] = moved / (_eager_ms(fn) * 1e-3) / 1e9
    return out


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _eager_ms(fn: Callable[[], Any], reps: int = 20) -> float:
    """Median of 3 timings of `reps` back-to-back eager calls (events around the batch), ms per call."""
    import torch
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(3):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / reps)
    return statistics.median(times)


@triton.jit
def streaming_copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    """dst[i] = src[i]; loads bypass L1 (.cg), stores are marked streaming (.cs): pure HBM traffic."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask, cache_modifier=".cg"), mask=mask, cache_modifier=".cs")


@triton.jit
def streaming_read_kernel(src, dst, n, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    """dst[pid] = XOR of the ITERS * BLOCK int32 words of program pid (.cg loads): every byte read, one word
    written per program, what a weight-streaming decode kernel cannot beat."""
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for i in tl.static_range(ITERS):
        offs = (pid * ITERS + i).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        acc ^= tl.load(src + offs, mask=offs < n, other=0, cache_modifier=".cg")
    tl.store(dst + pid, tl.xor_sum(acc, 0))


#: (BLOCK, ITERS, num_warps) of `read_floor_us`: the best differs with the size (H200: 4096 x 2 x 8 at 9 MB,
#: 1024 x 8 x 4 from 38 MB).
READ_CONFIGS = ((1024, 4, 4), (1024, 8, 4), (2048, 2, 4), (2048, 4, 8), (4096, 1, 4), (4096, 2, 8), (8192, 1, 8))


def read_floor_us(nbytes: int) -> tuple[float, tuple[int, int, int]]:
    """(us, config) of the fastest `streaming_read_kernel` config reading `nbytes`, under graph replay over
    copies that exceed L2: the time floor of any kernel that must read that many bytes from HBM."""
    import torch
    words = nbytes // 4
    copies = [torch.randint(0, 1 << 30, (words,), dtype=torch.int32, device="cuda")
              for _ in range(l2_copies(nbytes))]
    dst = torch.empty(triton_cdiv(words, 1024), dtype=torch.int32, device="cuda")
    best = None
    for block, iters, warps in READ_CONFIGS:
        grid = (triton_cdiv(words, block * iters),)
        ms, _ = graph_ms([lambda c=c: streaming_read_kernel[grid](c, dst, words, BLOCK=block, ITERS=iters,
                                                                    num_warps=warps) for c in copies], target_ms=5.0)
        if best is None or ms < best[0]:
            best = (ms, (block, iters, warps))
    return 1e3 * best[0], best[1]


def l2_copies(bytes_per_copy: int, *, at_most: int = 16) -> int:
    """How many copies of an input make the round-robin working set >= 3x the GPU's L2 (so that replays read
    HBM, not L2)."""
    import torch
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
    return max(1, min(at_most, -(-3 * l2 // max(1, bytes_per_copy))))
