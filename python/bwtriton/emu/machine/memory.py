"""Memories of an emulated launch: global buffers (the launch's tensors at base addresses), the param space,
per-CTA shared memory (with the shared::cluster window), Tensor Memory, and mbarrier objects.

Address conventions (chosen to look like the hardware's where kernels depend on it):
* shared::cta addresses: `SMEM_BASE + offset` (1 KiB-aligned, so 128B swizzle atoms line up as on the GPU);
* shared::cluster addresses of CTA rank r: `CLUSTER_WINDOW | r << 24 | shared::cta address`; a plain
  shared::cta address used as a shared::cluster address refers to the executing CTA (as in PTX);
* param space: generic addresses from `PARAM_BASE` (cvta.param is the identity);
* global buffers: from `GLOBAL_BASE`, each 4 KiB-aligned, with a guard gap between them.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ...targets import TMEM_COLUMNS, TMEM_LANES
from .cells import Chunks, cells_set, gather, scatter
from ..errors import MemoryFaultError

SMEM_BASE = 0x400
CLUSTER_WINDOW = 1 << 30
PARAM_BASE = 0x7F00_0000_0000
GLOBAL_BASE = 0x1000_0000_0000
_GAP = 1 << 20

TMEM_COLS = TMEM_COLUMNS


class GlobalMemory:
    """Byte-addressed global memory made of disjoint regions (numpy uint8 views sharing the tensors' storage)."""

    def __init__(self) -> None:
        self.bases: list[int] = []
        self.regions: list[np.ndarray] = []
        self.names: list[str] = []
        self._next = GLOBAL_BASE
        self._last = 0

    def add(self, data: np.ndarray, name: str = "") -> int:
        """Map a uint8 array; returns its base address."""
        assert data.dtype == np.uint8 and data.ndim == 1
        base = self._next
        self._next = (base + data.size + _GAP + 4095) & ~4095
        self.bases.append(base)
        self.regions.append(data)
        self.names.append(name)
        return base

    def alloc(self, nbytes: int, name: str = "") -> int:
        return self.add(np.zeros(max(nbytes, 1), dtype=np.uint8), name)

    def locate(self, addr: np.ndarray, nbytes: int) -> tuple[np.ndarray, np.ndarray]:
        """(region of every address, offset in it); raises on any access not inside one region."""
        a = addr.astype(np.uint64, copy=False)
        i = self._last
        if self.bases:
            base = self.bases[i]
            lo, hi = int(a.min()), int(a.max())
            if lo >= base and hi + nbytes <= base + self.regions[i].size:
                return np.full(a.shape, i), (a - np.uint64(base)).astype(np.int64)
        if self.bases and a.size:  # one other region holding every address (loads alternating between tensors)
            lo, hi = int(a.min()), int(a.max())
            r = bisect.bisect_right(self.bases, lo) - 1
            if r >= 0 and hi + nbytes <= self.bases[r] + self.regions[r].size:
                self._last = r
                return np.full(a.shape, r), (a - np.uint64(self.bases[r])).astype(np.int64)
        idx = np.array([bisect.bisect_right(self.bases, int(x)) - 1 for x in a.ravel()]).reshape(a.shape)
        offs = np.empty(a.shape, dtype=np.int64)
        for k, (x, r) in enumerate(zip(a.ravel(), idx.ravel())):
            x = int(x)
            if r < 0 or x + nbytes > self.bases[r] + self.regions[r].size:
                raise MemoryFaultError(f"global access of {nbytes} bytes at 0x{x:x} is outside every launch "
                                       f"buffer ({self.describe()})")
            offs.ravel()[k] = x - self.bases[r]
        if idx.size:
            self._last = int(idx.ravel()[0])
        return idx, offs

    def describe(self) -> str:
        return ", ".join(f"{n or 'buf'}@0x{b:x}+{r.size}" for n, b, r in zip(self.names, self.bases, self.regions))

    def read(self, addr: np.ndarray, nbytes: int) -> np.ndarray:
        """Bytes [len(addr), nbytes] read at each address."""
        idx, offs = self.locate(addr, nbytes)
        first = int(idx.ravel()[0]) if idx.size else 0
        if (idx == first).all():
            return gather(self.regions[first], offs, nbytes)
        out = np.empty((len(addr), nbytes), dtype=np.uint8)
        for r in np.unique(idx):
            sel = idx == r
            out[sel] = gather(self.regions[int(r)], offs[sel], nbytes)
        return out

    def write(self, addr: np.ndarray, data: np.ndarray) -> None:
        """Write rows of `data` ([len(addr), nbytes] uint8) at each address (later lanes win, as no order is
        defined between lanes)."""
        idx, offs = self.locate(addr, data.shape[1])
        first = int(idx.ravel()[0]) if idx.size else 0
        if (idx == first).all():
            scatter(self.regions[first], offs, data)
            return
        for r in np.unique(idx):
            sel = idx == r
            scatter(self.regions[int(r)], offs[sel], data[sel])


class ParamSpace:
    """The kernel parameters as bytes, at generic addresses from PARAM_BASE; tensor maps are kept by address."""

    def __init__(self, size: int) -> None:
        self.data = np.zeros(max(size, 8), dtype=np.uint8)
        self.tensormaps: dict[int, object] = {}

    def read(self, offset: np.ndarray, nbytes: int) -> np.ndarray:
        if int(offset.max()) + nbytes > self.data.size or int(offset.min()) < 0:
            raise MemoryFaultError(f"param access at offset {int(offset.max())} outside the {self.data.size}-byte "
                                   "param space")
        return self.data[offset.astype(np.int64)[:, None] + np.arange(nbytes)]


def forget_summaries(smem, lo: int, hi: int) -> None:
    """Drop the writer summaries of `smem` (SharedMemory.writer_summary, keyed by word spans) over bytes
    [lo, hi)."""
    book = smem.writer_summary
    if book:
        w_lo, w_hi = lo >> 2, (hi + 3) >> 2
        for key in [k for k in book if k[0] < w_hi and w_lo < k[1]]:
            del book[key]


def word_cells(idx):
    """The 4-byte words (SharedMemory.async_writer's cells) holding byte cells `idx` (a slice, offsets or
    `Chunks`)."""
    if isinstance(idx, slice):
        return slice(idx.start >> 2, (idx.stop + 3) >> 2)
    if isinstance(idx, Chunks) and idx.size >= 4:
        return Chunks(idx.first >> 2, idx.size >> 2) if idx.size > 4 else idx.first >> 2
    if isinstance(idx, Chunks):
        return idx.first >> 2
    return np.asarray(idx) >> 2


class SharedMemory:
    """One CTA's shared memory: bytes at shared::cta addresses SMEM_BASE .. SMEM_BASE + size.

    Besides the bytes it keeps what the asynchronous model needs (see docs/emulator_async.md):
    * `poison[i]`: sequence number of the pending asynchronous write (TMA load, cp.async) that owns byte i
      (0: none). Such bytes hold garbage until that write's completion is observed;
    * `async_reads`: (lo, hi, op) ranges pending asynchronous reads (MMA operands, TMA store sources) still use;
    * `unfenced[i]`: PTX line of a generic-proxy write (st.shared, stmatrix) not yet followed by
      fence.proxy.async (0: none) -- the async proxy must not read such bytes;
    * `async_writer[j]`: the engine's code (AsyncEngine.writer_code) of the asynchronous write (TMA load, bulk
      copy, cp.async) that last wrote the 4-byte word j, pending or completed (0: none, or a generic write came
      after): a reader must have observed that write's completion (`any_async_written` says whether any word has
      one). Words, not bytes: those writes own whole aligned words (cp.async 4/8/16 bytes, TMA boxes), and the
      array stays twice the memory's size, not eight times.
    """

    def __init__(self, size: int, rank: int) -> None:
        self.size = size
        self.rank = rank
        self.data = np.zeros(size, dtype=np.uint8)
        self.poison = np.zeros(size, dtype=np.int32)  # sequence numbers stay far below 2**31
        self.n_poison = 0
        self.async_reads: list = []
        self.unfenced = np.zeros(size, dtype=np.int32)
        self.any_unfenced = False
        self.async_writer = np.zeros((size + 3) // 4, dtype=np.int64)
        self.any_async_written = False
        #: (lo, hi) -> the newest writer code per source over those bytes (AsyncEngine.check_observed_writes),
        #: valid until the next change of async_writer
        self.writer_summary: dict = {}

    def offsets(self, addr: np.ndarray, nbytes: int) -> np.ndarray:
        off = addr.astype(np.int64) - SMEM_BASE
        if off.size and (int(off.min()) < 0 or int(off.max()) + nbytes > self.size):
            bad = int(addr[(off < 0) | (off + nbytes > self.size)][0])
            raise MemoryFaultError(f"shared access of {nbytes} bytes at 0x{bad:x} outside CTA {self.rank}'s shared "
                                   f"memory [0x{SMEM_BASE:x}, 0x{SMEM_BASE + self.size:x}) -- is the kernel's "
                                   "`shared` size in the launch metadata right?")
        return off

    def read(self, addr: np.ndarray, nbytes: int) -> np.ndarray:
        return gather(self.data, self.offsets(addr, nbytes), nbytes)

    def write(self, addr: np.ndarray, data: np.ndarray) -> None:
        scatter(self.data, self.offsets(addr, data.shape[1]), data)

    def poisoned_by(self, off: np.ndarray) -> int:
        """Sequence number of a pending asynchronous write owning any of these byte offsets (0: none)."""
        if not self.n_poison:
            return 0
        hit = self.poison[off]
        return int(hit.max()) if hit.size else 0

    def reader_of(self, lo: int, hi: int):
        """A pending asynchronous read overlapping shared::cta offsets [lo, hi), or None."""
        for r_lo, r_hi, op in self.async_reads:
            if lo < r_hi and r_lo < hi:
                return op
        return None

    def unfenced_line(self, off: np.ndarray) -> int:
        """PTX line of an unfenced generic write to any of these byte offsets (0: none)."""
        if not self.any_unfenced:
            return 0
        hit = self.unfenced[off]
        return int(hit.max()) if hit.size else 0

    def set_async_writer(self, idx, code: int) -> None:
        """Name `code` the newest asynchronous writer of byte cells `idx` (a slice, offsets or `Chunks`); chunks
        that tile their span, as a copy instruction's usually do, are set as one slice (cheaper than per chunk)."""
        self.any_async_written = True
        if isinstance(idx, Chunks):
            lo, hi = idx.bounds()
            forget_summaries(self, lo, hi)
            if hi - lo == idx.first.size * idx.size:
                self.async_writer[lo >> 2:(hi + 3) >> 2] = code
                return
        else:
            self.writer_summary.clear()
        cells_set(self.async_writer, word_cells(idx), code)

    def mark_generic_write(self, off: np.ndarray, line: int) -> None:
        self.unfenced[off] = line
        self.any_unfenced = True
        if self.any_async_written:  # the bytes' newest writer is this generic store (for the whole word)
            words = np.asarray(off) >> 2
            if self.async_writer[int(words.min()):int(words.max()) + 1].any():
                self.async_writer[words] = 0
                self.writer_summary.clear()

    def proxy_fence(self) -> None:
        """fence.proxy.async: prior generic writes become visible to the async proxy."""
        if self.any_unfenced:
            self.unfenced[:] = 0
            self.any_unfenced = False

    def read_u32(self, addr: int) -> int:
        off = int(self.offsets(np.array([addr]), 4)[0])
        return int(self.data[off:off + 4].view(np.uint32)[0])

    def write_u32(self, addr: int, value: int) -> None:
        off = int(self.offsets(np.array([addr]), 4)[0])
        self.data[off:off + 4] = np.array([value], dtype=np.uint32).view(np.uint8)


def split_cluster_address(addr: int, own_rank: int) -> tuple[int, int]:
    """shared::cluster address -> (CTA rank, shared::cta address)."""
    if addr & CLUSTER_WINDOW:
        return (addr >> 24) & 0x3F, addr & 0xFFFFFF
    return own_rank, addr


@dataclass
class MBarrier:
    """An mbarrier object: phase, pending arrivals of the current phase, pending transaction bytes.
    `done_seq` is the newest asynchronous-op sequence number whose completion a waiter observes."""

    count: int
    pending: int
    tx: int = 0
    phase: int = 0
    release_seq: int = 0
    done_seq: int = 0
    line: int = 0

    def arrive(self, n: int = 1, seq: int = 0) -> None:
        self.pending -= n
        self.release_seq = max(self.release_seq, seq)
        self._maybe_complete()

    def expect_tx(self, nbytes: int) -> None:
        self.tx += nbytes

    def complete_tx(self, nbytes: int, seq: int = 0) -> None:
        self.tx -= nbytes
        self.release_seq = max(self.release_seq, seq)
        self._maybe_complete()

    def _maybe_complete(self) -> None:
        if self.pending <= 0 and self.tx <= 0:
            self.phase += 1
            self.pending = self.count
            self.tx = 0
            self.done_seq = max(self.done_seq, self.release_seq)
            self.release_seq = 0

    def phase_done(self, parity: int) -> bool:
        """try_wait.parity semantics: true once the phase with this parity has completed."""
        return (self.phase & 1) != (parity & 1)


@dataclass
class TensorMemory:
    """One CTA's TMEM (128 lanes x 512 columns x 32 bit) with its allocator and per-cell write tracking."""

    rank: int
    data: np.ndarray = field(default_factory=lambda: np.zeros((TMEM_LANES, TMEM_COLS), dtype=np.uint32))
    allocations: dict[int, tuple[int, int]] = field(default_factory=dict)  # column -> (ncols, line)
    relinquished: bool = False
    last_alloc: int = 1 << 30
    # Per cell (flat index lane * TMEM_COLS + column: two M=64 accumulators share columns at different lanes):
    # the newest writer (async MMA / cp, or a warp's tcgen05.st) of it, and how many queued ops still write it.
    writer_seq: np.ndarray = field(default_factory=lambda: np.zeros(TMEM_LANES * TMEM_COLS, dtype=np.int64))
    inflight: np.ndarray = field(default_factory=lambda: np.zeros(TMEM_LANES * TMEM_COLS, dtype=np.int64))
    # tcgen05.ld not yet followed by tcgen05.wait::ld: warp id -> [lane quarter, event number per cell, PTX line,
    # text, event source]
    pending_ld: dict = field(default_factory=dict)
    # PTX line -> text of the tcgen05.st instructions that wrote this TMEM (writer_seq names their events)
    st_sites: dict = field(default_factory=dict)

    def allocate(self, ncols: int) -> Optional[int]:
        """First fit, aligned to ncols (power of two). None when no room."""
        used = np.zeros(TMEM_COLS, dtype=bool)
        for c, (n, _) in self.allocations.items():
            used[c:c + n] = True
        for c in range(0, TMEM_COLS, ncols):
            if not used[c:c + ncols].any():
                return c
        return None
