"""`run(compiled, grid, *args)`: emulate a kernel launch over a grid of clusters on CPU torch tensors."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ...errors import InputError
from ...targets import MAX_SHARED_BYTES
from ..isa import MACHINE, dispatch
from ..machine.gang import DEFAULT_GANG_LANES, gang_eligible, run_gangs
from ..machine.grid import GridSchedule, run_grid
from ..machine.image import KernelImage, load_image, static_shared_layout
from ..machine.launch import Launch
from ..machine.memory import GlobalMemory, ParamSpace
from ..machine.scheduler import ProgressMeter, check_schedule
from ..errors import MemoryFaultError
from .arguments import ArgPacker, dtype_mismatches


@dataclass
class EmulationStats:
    """What one `run` did: warp-instructions executed, wall seconds, and their ratio."""

    instructions: int
    seconds: float
    ctas: int
    #: the timing model's prediction (`bwtriton.emu.timing.Prediction`) when run with timing=True
    timing: Any = None

    @property
    def instructions_per_second(self) -> float:
        return self.instructions / self.seconds if self.seconds > 0 else float("inf")

    def __str__(self) -> str:
        return (f"{self.instructions} warp-instructions over {self.ctas} CTAs in {self.seconds:.2f} s "
                f"({self.instructions_per_second / 1e3:.1f} k warp-instr/s)")


def _gang_lanes(value: Optional[int]) -> int:
    if value is None:
        env = os.environ.get("BWTRITON_EMU_GANG_LANES", "")
        try:
            value = int(env) if env.strip() else DEFAULT_GANG_LANES
        except ValueError:
            raise InputError(f"BWTRITON_EMU_GANG_LANES={env!r}: give a lane count (e.g. 4096) or 0 to run "
                             "clusters warp by warp") from None
    if not isinstance(value, int) or value < 0:
        raise InputError(f"gang_lanes must be a non-negative int (lanes per gang warp; 0: no gangs), got {value!r}")
    return value


def kernel_image(ptx: str, name: Optional[str] = None) -> KernelImage:
    """The entry `name` (default: the first) of `ptx` parsed and compiled with the emulator's ISA (cached)."""
    return load_image(ptx, name, dispatch)


# --- entry point ---------------------------------------------------------------------------------------
def _unpack_compiled(compiled: Any) -> tuple[str, dict, Optional[str]]:
    if isinstance(compiled, str):
        return compiled, {}, None
    asm = getattr(compiled, "asm", None)
    if asm is None or "ptx" not in asm:
        raise InputError("run() takes what bwtriton.compile / triton.compile returns (with .asm['ptx']) or PTX "
                         "text")
    md = compiled.metadata
    md = md if isinstance(md, dict) else md._asdict()
    return asm["ptx"], dict(md), getattr(compiled, "name", None) or md.get("name")


def run(compiled: Any, grid: Sequence[int] | int, *args: Any, num_warps: Optional[int] = None,
        num_ctas: Optional[int] = None, shared: Optional[int] = None, name: Optional[str] = None,
        tensordesc_meta: Optional[list] = None, max_instructions: int = 200_000_000,
        global_scratch: Any = None, profile_scratch: Any = None,
        triton_abi: Optional[bool] = None, schedule: str = "latest",
        progress: Optional[bool] = None, read_slack: int = 0,
        grid_schedule: Optional[GridSchedule] = None, gang_lanes: Optional[int] = None,
        timing: Any = False) -> EmulationStats:
    """Emulate `compiled` (a bwtriton/triton compile result, or PTX text) on `grid` programs with `args`
    (CPU torch tensors, ints, floats, None, TensorDescriptors) in the kernel's non-constexpr argument order.
    Outputs are written into the tensors. Raises `EmulationError` subclasses on protocol violations.

    `global_scratch`/`profile_scratch`: CPU tensors for Triton's two trailing scratch pointers (what Triton's
    launcher gets from the `triton.set_allocator` allocator); by default the global scratch the compile asks
    for is allocated here. `triton_abi=True` (default for compile results) requires exactly Triton's two
    scratch parameters to be left after `args`, so a missing argument is an error, not a zero.

    `schedule`: "latest" (default) completes asynchronous work as late as the PTX memory model allows and flags
    races (docs/emulator_async.md); "eager" completes it at issue (optimistic, for speed comparisons).
    `progress`: show clusters done / instructions per second on stderr (default: when stderr is a terminal).
    `read_slack`: bytes after each tensor argument that read as 0xFF instead of faulting, as on a GPU (the
    Triton driver passes 64 KiB; 0, the default, faults on any access outside a tensor). Stores there fault.
    `grid_schedule` (`bwtriton.emu.GridSchedule`): how many clusters run at once and in which order
    (default: one after the other); it records which worker ran which cluster (CLC work stealing).
    `gang_lanes`: without a `grid_schedule`, clusters run in gangs (`bwtriton.emu.machine.gang`: the same warp of many
    CTAs executes each instruction together, over up to this many lanes); 0 runs them warp by warp. Default:
    $BWTRITON_EMU_GANG_LANES, else gang.DEFAULT_GANG_LANES. Results and errors are the same either way.
    `timing`: True (or a `bwtriton.emu.timing.B200Costs` table, or a `TimingRecorder` of one's own) also
    predicts the launch's B200 time with the timing model (docs/timing_model.md), returned as `.timing` of the
    result; clusters then run warp by warp (no gangs). The kernel's results are the same."""
    t0 = time.perf_counter()
    ptx, md, md_name = _unpack_compiled(compiled)
    if tensordesc_meta is not None:
        md["tensordesc_meta"] = tensordesc_meta
    image = kernel_image(ptx, name or md_name)
    fn = image.fn
    grid = (grid,) if isinstance(grid, int) else tuple(grid)
    if not 1 <= len(grid) <= 3 or any(int(g) < 1 for g in grid):
        raise InputError(f"grid must be 1 to 3 positive ints, got {grid}")
    grid3 = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
    nctas = num_ctas or md.get("num_ctas") or fn.cluster_size or 1
    reqntid = fn.directives.get("reqntid")
    if reqntid:
        ntid = tuple(reqntid) + (1,) * (3 - len(reqntid))
    else:
        nw = num_warps or md.get("num_warps")
        if not nw:
            raise InputError("the PTX has no .reqntid: pass num_warps=")
        ntid = (32 * nw, 1, 1)
    smem_bytes = shared if shared is not None else md.get("shared", MAX_SHARED_BYTES["sm_100"])
    gmem = GlobalMemory()
    params = ParamSpace(image.param_bytes)
    mismatches = dtype_mismatches(compiled, args)
    packer = ArgPacker(image, gmem, params, md, read_slack=int(read_slack))
    for a in args:
        packer.add(a)
    total_ctas = grid3[0] * nctas * grid3[1] * grid3[2]
    if global_scratch is not None:
        scratch_addr = packer.tensor_address(global_scratch)
    else:
        scratch = md.get("global_scratch_size") or 0
        scratch_addr = gmem.alloc(scratch * total_ctas, "global_scratch") if scratch else 0
    profile_addr = packer.tensor_address(profile_scratch) if profile_scratch is not None else 0
    from_triton = triton_abi if triton_abi is not None else (True if md else None)
    packer.finish(scratch_addr, profile_addr, from_triton)
    grid_ctas = (grid3[0] * nctas, grid3[1], grid3[2])
    launch = Launch(gmem, params, grid_ctas, grid3, schedule=check_schedule(schedule))
    meter = ProgressMeter(grid3[0] * grid3[1] * grid3[2], enabled=progress)
    smem_bytes = max(int(smem_bytes), 16) + static_shared_layout(fn)[1]

    recorder = _timing_recorder(timing, total_ctas)

    def make_cluster(coord, registers: bool = True):
        cx, cy, cz = coord
        cluster = MACHINE.Cluster(launch, coord, nctas)
        for r in range(nctas):
            cluster.ctas.append(MACHINE.CTA(cluster, r, (cx * nctas + r, cy, cz), image, ntid, smem_bytes, registers))
        cluster.nthreads = sum(c.nthreads for c in cluster.ctas)
        if recorder is not None:
            recorder.instrument(cluster)
        return cluster
    coords = [(cx, cy, cz) for cz in range(grid3[2]) for cy in range(grid3[1]) for cx in range(grid3[0])]
    try:
        lanes = _gang_lanes(gang_lanes) if recorder is None else 0
        if grid_schedule is None and lanes and gang_eligible(image.prog):
            run_gangs(launch, coords, make_cluster, max_instructions, lanes,
                      on_cluster_done=lambda: meter.tick(launch), on_round=lambda: meter.refresh(launch))
        else:
            run_grid(launch, coords, make_cluster, grid_schedule or GridSchedule(), max_instructions,
                     on_cluster_done=lambda: meter.tick(launch))
    except MemoryFaultError as exc:  # a tensor of the wrong dtype is the likeliest cause: say which
        if mismatches:
            first, nl, detail = exc.args[0].partition("\n")  # the cause on the message's line, the PTX after
            exc.args = (f"{first} (likely cause: {'; '.join(mismatches)}){nl}{detail}",) + exc.args[1:]
        raise
    finally:
        packer.write_back()
    stats = EmulationStats(launch.instructions, time.perf_counter() - t0, total_ctas)
    if recorder is not None:
        from ..timing.model import predict  # the timing model is loaded only for timed runs
        stats.timing = predict(recorder, _tensor_bytes(args), nctas)
    return stats


def _timing_recorder(timing: Any, total_ctas: int):
    """The recorder of a timed run (None when timing is off); `timing` is True, a cost table or a recorder."""
    if timing is False or timing is None:
        return None
    from ..timing.costs import B200, B200Costs  # the timing model is loaded only for timed runs
    from ..timing.recorder import TimingRecorder  # the timing model is loaded only for timed runs
    if isinstance(timing, TimingRecorder):  # a caller's own recorder (e.g. a representative wave: all SMs busy)
        return timing
    if timing is True:
        costs = B200
    elif isinstance(timing, B200Costs):
        costs = timing
    else:
        raise InputError(f"timing must be True, False, a bwtriton.emu.timing.B200Costs table or a TimingRecorder, "
                         f"got {timing!r}")
    return TimingRecorder(costs, active_sms=min(total_ctas, int(costs.v("sm_count"))))


def _tensor_bytes(args: Sequence[Any]) -> int:
    """Bytes of the launch's tensors (a TensorDescriptor counts its base): what crosses HBM at least once."""
    total, seen = 0, set()
    for a in args:
        t = getattr(a, "base", a)
        if hasattr(t, "untyped_storage") and id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total
