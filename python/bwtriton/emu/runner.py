"""`run(compiled, grid, *args)`: emulate a kernel launch over a grid of clusters on CPU torch tensors."""
from __future__ import annotations

import functools
import hashlib
import os
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from ..errors import InputError
from ..ptx import parse_ptx
from ..ptx.ir import Function
from .errors import MemoryFaultError
from .args import Raw, TmaArg
from .memory import PARAM_BASE, SMEM_BASE, GlobalMemory, ParamSpace, SharedMemory, TensorMemory
from .program import NP_TYPES, CompileEnv, Program
from .clc import GridSchedule, run_grid, static_shared_layout
from .gang import DEFAULT_GANG_LANES, gang_eligible, run_gangs
from .scheduler import ProgressMeter, check_schedule
from .tma import SWIZZLE_CODES, TensorMap
from .warp import Warp


@dataclass
class EmulationStats:
    """What one `run` did: warp-instructions executed, wall seconds, and their ratio."""

    instructions: int
    seconds: float
    ctas: int

    @property
    def instructions_per_second(self) -> float:
        return self.instructions / self.seconds if self.seconds > 0 else float("inf")

    def __str__(self) -> str:
        return (f"{self.instructions} warp-instructions over {self.ctas} CTAs in {self.seconds:.2f} s "
                f"({self.instructions_per_second / 1e3:.1f} k warp-instr/s)")


@dataclass
class ParamSlot:
    """One kernel parameter's place in param space; `type` is the PTX type, or "b8[N]" for an array."""

    name: str
    type: str
    offset: int
    size: int


@dataclass
class KernelImage:
    """A parsed, compiled kernel entry plus its param layout (cached per PTX text)."""

    fn: Function
    prog: Program
    params: list[ParamSlot]
    param_bytes: int


def _param_layout(fn: Function) -> tuple[list[ParamSlot], int]:
    """Byte offset and size of every kernel parameter in param space (array parameters such as the TMA tensor
    maps `.param .align 64 .b8 NAME[128]` included), and the total size."""
    slots, off = [], 0
    for p in fn.params:
        count = p.count
        elem = NP_TYPES[p.type].itemsize if p.type in NP_TYPES else 8
        align = elem
        if ".align" in p.attrs:
            align = int(p.attrs[p.attrs.index(".align") + 1])
        off = (off + align - 1) // align * align
        slots.append(ParamSlot(p.name, p.type if count == 1 else f"b8[{count}]", off, elem * count))
        off += elem * count
    return slots, off


def _program(fn: Function, env: CompileEnv) -> Program:
    """Compile `fn` with the ISA table's dispatch (emu-core's `isa.py`) when the core takes one."""
    try:
        from .isa import dispatch
    except ImportError:
        return Program(fn, env)
    return Program(fn, env, dispatch)


@functools.lru_cache(maxsize=32)
def _image(text_hash: str, text: str, name: Optional[str]) -> KernelImage:
    mod = parse_ptx(text)
    entries = mod.entries
    if not entries:
        raise InputError("the PTX has no .entry kernel")
    if name is None:
        fn = entries[0]
    else:
        cands = [f for f in entries if f.name == name]
        if not cands:
            raise InputError(f"no kernel {name!r} in the PTX; entries: {', '.join(f.name for f in entries)}")
        fn = cands[0]
    params, nbytes = _param_layout(fn)
    symbols = {p.name: PARAM_BASE + p.offset for p in params}
    static, reserved = static_shared_layout(fn)  # inline-asm `.shared` variables (CLC), below global_smem
    symbols.update({n: SMEM_BASE + off for n, off in static.items()})
    symbols["global_smem"] = SMEM_BASE + reserved
    prog = _program(fn, CompileEnv(symbols))
    return KernelImage(fn, prog, params, nbytes)


def load_image(ptx: str, name: Optional[str] = None) -> KernelImage:
    """Parse and compile the entry `name` (default: the first) of `ptx`, cached by the text's hash."""
    return _image(hashlib.sha1(ptx.encode()).hexdigest(), ptx, name)


# --- launch state ---------------------------------------------------------------------------------------
class Launch:
    def __init__(self, gmem: GlobalMemory, params: ParamSpace, grid_ctas, grid_clusters):
        self.gmem = gmem
        self.params = params
        self.grid_ctas = grid_ctas
        self.grid_clusters = grid_clusters
        self.progress = 0
        self.instructions = 0


class Cluster:
    def __init__(self, launch: Launch, cluster_id, nctas: int):
        self.launch = launch
        self.cluster_id = cluster_id
        self.nctas = nctas  # the warps' %cluster_nctaid / %cluster_nctarank (ctas is filled after they exist)
        self.ctas: list[CTA] = []
        self.async_queue: list = []
        self.seq = 0
        self.last_seq_of: dict[int, int] = {}
        self.bar_gen = 0
        self.bar_arrived = 0
        self.bar_obs = 0
        self.bar_done_obs = 0
        self.nthreads = 0


class CTA:
    def __init__(self, cluster: Cluster, rank: int, ctaid, image: KernelImage, ntid, smem_bytes: int,
                 registers: bool = True):
        self.cluster = cluster
        self.rank = rank
        self.ctaid = ctaid
        self.prog = image.prog
        self.smem = SharedMemory(smem_bytes, rank)
        self.tmem = TensorMemory(rank)
        self.mbarriers: dict = {}
        self.barriers: dict = {}
        self.nthreads = ntid[0] * ntid[1] * ntid[2]
        nwarps = (self.nthreads + 31) // 32
        self.warps_spec = range(nwarps)
        self.warps = [Warp(self, i, image.prog, cluster.launch, ntid, registers) for i in range(nwarps)]


# --- arguments ---------------------------------------------------------------------------------------
def _is_tensor(x: Any) -> bool:
    return type(x).__name__ in ("Tensor", "Parameter") and hasattr(x, "untyped_storage")


def _is_descriptor(x: Any) -> bool:
    return hasattr(x, "base") and hasattr(x, "block_shape") and hasattr(x, "strides")


def _backing_tensor(x: Any) -> Any:
    """The torch tensor whose storage holds `x` (itself, or `.base` of `triton.reinterpret` wrappers)."""
    for _ in range(8):
        if _is_tensor(x):
            return x
        x = getattr(x, "base", None)
    return None


#: byte pattern of the read slack after launch buffers (0xFF: NaN in every float format, like stale memory)
SLACK_FILL = 0xFF


class _ArgPacker:
    def __init__(self, image: KernelImage, gmem: GlobalMemory, params: ParamSpace, meta: dict,
                 read_slack: int = 0):
        self.image, self.gmem, self.params = image, gmem, params
        self.storages: dict[int, int] = {}
        self.read_slack = read_slack
        self.copies: list[tuple[np.ndarray, np.ndarray, str]] = []  # (tensor bytes, padded copy, name)
        self.i = 0
        self.desc_meta = list(meta.get("tensordesc_meta") or [])
        self.desc_index = 0

    def _next(self, what: str) -> ParamSlot:
        if self.i >= len(self.image.params):
            raise InputError(f"too many kernel arguments: the kernel takes {len(self.image.params)} parameters "
                             f"(after expanding tensor descriptors); {what} has no parameter left")
        slot = self.image.params[self.i]
        self.i += 1
        return slot

    def _store(self, slot: ParamSlot, value: Any) -> None:
        t = slot.type
        if t.startswith("b8["):
            raise InputError(f"parameter {slot.name} is a {t} blob (a TMA tensor map): pass a TensorDescriptor")
        if t in ("f32", "f64") and not isinstance(value, Raw):
            raw = np.array([value], dtype=np.float32 if t == "f32" else np.float64).view(np.uint8)
        else:
            v = value.bits if isinstance(value, Raw) else int(value)
            raw = np.array([v & ((1 << (8 * slot.size)) - 1)], dtype=np.uint64).view(np.uint8)[:slot.size]
        self.params.data[slot.offset:slot.offset + slot.size] = raw

    def tensor_address(self, t) -> int:
        """Emulated global address of a CPU tensor (or a wrapper with `.base` and `data_ptr()`): its storage is
        mapped once per launch, so views and aliases share memory as on the GPU."""
        base = _backing_tensor(t)
        if base is None:
            raise InputError(f"cannot map a {type(t).__name__} into emulated memory: pass a CPU torch tensor")
        if base.device.type != "cpu":
            raise InputError(f"the emulator needs CPU tensors, got a tensor on {base.device}; pass t.cpu() "
                             "(and copy results back)")
        st = base.untyped_storage()
        key = st.data_ptr()
        if key not in self.storages:
            import torch
            u8 = torch.empty(0, dtype=torch.uint8).set_(st).numpy()
            self.storages[key] = self.gmem.add(self._with_slack(u8, f"arg{self.i}"), f"arg{self.i}")
        return self.storages[key] + (t.data_ptr() - key)

    def _with_slack(self, u8: np.ndarray, name: str) -> np.ndarray:
        """The tensor's bytes as mapped: the storage itself, or (read_slack > 0) a copy followed by read_slack
        bytes of SLACK_FILL, written back by `write_back`. A GPU reads a little past an allocation without
        faulting (torch's caching allocator keeps the rest of its segment mapped); kernels whose unmasked loads
        only feed masked-off outputs (upstream's scale loads with N < BLOCK_N) rely on that."""
        if not self.read_slack:
            return u8
        padded = np.full(u8.size + self.read_slack, SLACK_FILL, dtype=np.uint8)
        padded[:u8.size] = u8
        self.copies.append((u8, padded, name))
        return padded

    def write_back(self) -> None:
        """Copy padded buffers back into their tensors; a store into the slack is a fault (it would have
        overwritten another allocation on the GPU)."""
        for u8, padded, name in self.copies:
            u8[:] = padded[:u8.size]
        for u8, padded, name in self.copies:
            tail = padded[u8.size:]
            if not (tail == SLACK_FILL).all():
                first = int(np.flatnonzero(tail != SLACK_FILL)[0])
                raise MemoryFaultError(f"the kernel wrote past the end of launch buffer {name} ({u8.size} bytes): "
                                       f"first modified byte at offset {u8.size + first}")

    def add(self, arg: Any) -> None:
        if isinstance(arg, TmaArg):
            return self._tensor_map(self._next("a TensorDescriptor"), arg.desc, arg.meta)
        if _is_descriptor(arg) and not isinstance(arg, Raw):
            return self._descriptor(arg)
        slot = self._next(repr(arg)[:40])
        if arg is None:
            return self._store(slot, 0)
        if isinstance(arg, Raw):
            return self._store(slot, arg)
        if _backing_tensor(arg) is not None and hasattr(arg, "data_ptr"):
            return self._store(slot, self.tensor_address(arg))
        if isinstance(arg, (bool, int, np.integer)):
            return self._store(slot, int(arg))
        if isinstance(arg, (float, np.floating)):
            return self._store(slot, float(arg))
        raise InputError(f"unsupported kernel argument of type {type(arg).__name__}: pass CPU torch tensors, "
                         "Python ints/floats, None or TensorDescriptors")

    def _tensor_map(self, slot: ParamSlot, d, meta: Optional[dict]) -> None:
        """Bind a host TensorDescriptor to a tensor-map parameter (box/swizzle/element size from the compile's
        tensordesc_meta, as Triton's launcher fills the CUtensorMap)."""
        if not slot.type.startswith("b8["):
            raise InputError(f"a TensorDescriptor was passed for parameter {slot.name} ({slot.type}), but the "
                             "kernel was not lowered to TMA here (no tensor-map parameter)")
        shape = [int(s) for s in d.shape]
        strides = [int(s) for s in d.strides]
        eb = d.base.element_size()
        block = list(meta["block_size"]) if meta else [int(b) for b in d.block_shape]
        swz = SWIZZLE_CODES.get(int(meta["swizzle"]), 0) if meta else 0
        elem = int(meta["elem_size"]) if meta else eb
        if meta and meta.get("fp4_padded"):  # packed fp4 bytes; Triton's launcher doubles the inner extent
            tmap = TensorMap.fp4_padded(self.tensor_address(d.base), shape[:-1] + [2 * shape[-1]],
                                        [s * eb for s in strides[:-1]], block, swz)
        else:
            # Triton's tensordesc_meta elem_type is already the CUtensorMapDataType enum a TMA reduce needs
            tmap = TensorMap(base=self.tensor_address(d.base), shape=tuple(shape),
                             strides=tuple(s * eb for s in strides), box=tuple(block), elem_bytes=elem,
                             swizzle=swz, elem_type=int(meta.get("elem_type", -1)) if meta else -1)
        self.params.tensormaps[PARAM_BASE + slot.offset] = tmap
        # a recognisable blob in param space: the map's base address (the emulator keys maps by address)
        self.params.data[slot.offset:slot.offset + 8] = np.array([tmap.base], dtype=np.uint64).view(np.uint8)

    def _descriptor(self, d) -> None:
        """`run()`'s own convention: a TensorDescriptor stands for tensor map + shape + strides."""
        meta = self.desc_meta[self.desc_index] if self.desc_index < len(self.desc_meta) else None
        self.desc_index += 1
        self._tensor_map(self._next("a TensorDescriptor"), d, meta)
        for s in d.shape:
            self._store(self._next("descriptor shape"), int(s))
        for s in d.strides:
            self._store(self._next("descriptor stride"), int(s))

    def finish(self, global_scratch: int, profile_scratch: int, triton_abi: Optional[bool]) -> None:
        """Fill Triton's two trailing scratch pointers. `triton_abi` True: the kernel comes from Triton and must
        have exactly those two parameters left (otherwise arguments are missing); None (raw PTX): two or none."""
        left = len(self.image.params) - self.i
        if left == 0 and not triton_abi:
            return
        if left != 2:
            raise InputError(self._count_mismatch(left, triton_abi))
        self._store(self._next("global scratch"), global_scratch)
        self._store(self._next("profile scratch"), profile_scratch)


    def _count_mismatch(self, left: int, triton_abi: Optional[bool]) -> str:
        """The wrong-argument-count message: too few when more than Triton's 2 scratch slots are left, too many
        when a Triton kernel has fewer left; raw PTX with 1 left may be either (it says both)."""
        total, have = len(self.image.params), self.i
        takes = f"the kernel takes {total - 2} parameter(s) (after expanding tensor descriptors, plus Triton's 2 " \
                f"scratch pointers), {have} were given"
        if left > 2:
            return f"too few kernel arguments: {takes}; next unbound parameter: {self.image.params[self.i].name}"
        if triton_abi:
            return f"too many kernel arguments: {takes}; drop the last {have - (total - 2)}"
        return (f"{have} kernel arguments for a PTX kernel with {total} parameters: too many if its last 2 are "
                f"Triton's scratch pointers (it then takes {total - 2}), too few otherwise (next unbound "
                f"parameter: {self.image.params[self.i].name})")


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


def _dtype_mismatches(compiled: Any, args: Sequence[Any]) -> list[str]:
    """Tensors of another dtype than their pointer argument was compiled for, as 'argument NAME was compiled as
    *fp32 but got a float16 tensor (*fp16)' (only for compile results that carry a signature). Not an error by
    itself: a placeholder tensor for a pointer the kernel never dereferences is common."""
    sig = getattr(getattr(getattr(compiled, "kernel", compiled), "src", None), "signature", None)
    if not isinstance(sig, dict):
        return []
    from triton.runtime.jit import mangle_type  # Triton's own torch dtype -> '*fp16' naming
    runtime = [(n, t) for n, t in sig.items() if t != "constexpr"]
    return [f"argument {n!r} was compiled as {t} but got a {str(a.dtype)[6:]} tensor ({mangle_type(a)}); pass a "
            f"{t[1:]} tensor, or compile with {n}: '{mangle_type(a)}'"
            for (n, t), a in zip(runtime, args)
            if isinstance(t, str) and t.startswith("*") and _is_tensor(a) and mangle_type(a) != t]


def run(compiled: Any, grid: Sequence[int] | int, *args: Any, num_warps: Optional[int] = None,
        num_ctas: Optional[int] = None, shared: Optional[int] = None, name: Optional[str] = None,
        tensordesc_meta: Optional[list] = None, max_instructions: int = 200_000_000,
        global_scratch: Any = None, profile_scratch: Any = None,
        triton_abi: Optional[bool] = None, schedule: str = "latest",
        progress: Optional[bool] = None, read_slack: int = 0,
        grid_schedule: Optional[GridSchedule] = None, gang_lanes: Optional[int] = None) -> EmulationStats:
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
    `grid_schedule` (`bwtriton.emu.clc.GridSchedule`): how many clusters run at once and in which order
    (default: one after the other); it records which worker ran which cluster (CLC work stealing).
    `gang_lanes`: without a `grid_schedule`, clusters run in gangs (`bwtriton.emu.gang`: the same warp of many
    CTAs executes each instruction together, over up to this many lanes); 0 runs them warp by warp. Default:
    $BWTRITON_EMU_GANG_LANES, else gang.DEFAULT_GANG_LANES. Results and errors are the same either way."""
    t0 = time.perf_counter()
    ptx, md, md_name = _unpack_compiled(compiled)
    if tensordesc_meta is not None:
        md["tensordesc_meta"] = tensordesc_meta
    image = load_image(ptx, name or md_name)
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
    smem_bytes = shared if shared is not None else md.get("shared", 232448)
    gmem = GlobalMemory()
    params = ParamSpace(image.param_bytes)
    mismatches = _dtype_mismatches(compiled, args)
    packer = _ArgPacker(image, gmem, params, md, read_slack=int(read_slack))
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
    launch = Launch(gmem, params, grid_ctas, grid3)
    launch.schedule = check_schedule(schedule)  # asyncops.py / docs/emulator_async.md
    meter = ProgressMeter(grid3[0] * grid3[1] * grid3[2], enabled=progress)
    smem_bytes = max(int(smem_bytes), 16) + static_shared_layout(fn)[1]

    def make_cluster(coord, registers: bool = True):
        cx, cy, cz = coord
        cluster = Cluster(launch, coord, nctas)
        for r in range(nctas):
            cluster.ctas.append(CTA(cluster, r, (cx * nctas + r, cy, cz), image, ntid, smem_bytes, registers))
        cluster.nthreads = sum(c.nthreads for c in cluster.ctas)
        return cluster
    coords = [(cx, cy, cz) for cz in range(grid3[2]) for cy in range(grid3[1]) for cx in range(grid3[0])]
    try:
        lanes = _gang_lanes(gang_lanes)
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
    return EmulationStats(launch.instructions, time.perf_counter() - t0, total_ctas)
