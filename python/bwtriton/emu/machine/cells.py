"""Per-lane byte accesses done at the widest aligned unit.

A memory access of every lane reads `nbytes` bytes at its own offset. Gathering those bytes one by one costs a
(lanes x nbytes) index array and as many byte copies; when every offset is a multiple of a unit (2, 4, 8 or 16
bytes) that divides `nbytes`, the same bytes are a gather of lanes x (nbytes / unit) units of a typed view, which
numpy does about ten times faster. Kernels' accesses are aligned almost always (vector loads, cp.async chunks,
TMA boxes); the byte path stays for the rest.

`Chunks` names the byte cells of equal aligned chunks (a cp.async per lane, a store per lane) as rows of a
(-1, size) view, so per-byte bookkeeping arrays (poison, unfenced lines) are set and read a row at a time.
"""
from __future__ import annotations

import numpy as np

#: typed views per unit width; 16-byte units are opaque records (numpy copies them with one memcpy each)
UNIT_DTYPES = {2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64), 16: np.dtype((np.void, 16))}
_SHIFT = {1: 0, 2: 1, 4: 2, 8: 3, 16: 4}
BYTE_RANGES: dict[int, np.ndarray] = {}


def byte_range(nbytes: int) -> np.ndarray:
    """np.arange(nbytes), made once per width (accesses use a handful of widths, millions of times)."""
    r = BYTE_RANGES.get(nbytes)
    if r is None:
        r = BYTE_RANGES[nbytes] = np.arange(nbytes)
        r.flags.writeable = False
    return r


def aligned_unit(offs: np.ndarray, nbytes: int) -> int:
    """The widest unit (1, 2, 4, 8 or 16 bytes) dividing `nbytes` and every offset."""
    unit = min(nbytes & -nbytes, 16)
    if unit > 1 and offs.size:
        low = int(np.bitwise_or.reduce(offs, axis=None))
        while unit > 1 and low & (unit - 1):
            unit >>= 1
    return unit


def _unit_index(offs: np.ndarray, nbytes: int, unit: int) -> np.ndarray:
    first = offs >> _SHIFT[unit]
    k = nbytes // unit
    return first if k == 1 else first[:, None] + byte_range(k)


def _units(buf: np.ndarray, unit: int) -> np.ndarray:
    """`buf` (1-D contiguous uint8) as whole units; an aligned in-bounds access never reaches the cut tail."""
    return buf[:buf.size - buf.size % unit].view(UNIT_DTYPES[unit])


def gather(buf: np.ndarray, offs: np.ndarray, nbytes: int) -> np.ndarray:
    """Bytes [len(offs), nbytes] of uint8 array `buf` at each offset (offsets already bounds-checked)."""
    unit = aligned_unit(offs, nbytes)
    if unit == 1:
        return buf[offs][:, None] if nbytes == 1 else buf[offs[:, None] + byte_range(nbytes)]
    return _units(buf, unit)[_unit_index(offs, nbytes, unit)].view(np.uint8).reshape(len(offs), nbytes)


def scatter(buf: np.ndarray, offs: np.ndarray, data: np.ndarray) -> None:
    """Write rows of `data` ([len(offs), nbytes] uint8) at each offset; later lanes win where offsets repeat
    (no order is defined between lanes)."""
    nbytes = data.shape[1]
    unit = aligned_unit(offs, nbytes)
    if unit == 1:
        buf[offs[:, None] + byte_range(nbytes)] = data
        return
    idx = _unit_index(offs, nbytes, unit)
    _units(buf, unit)[idx] = np.ascontiguousarray(data).view(UNIT_DTYPES[unit]).reshape(idx.shape)


class Chunks:
    """The byte cells [first[i], first[i] + size) of aligned, equal chunks (`size` a power of two dividing every
    `first`), addressed as rows `first // size` of a (-1, size) view of a per-byte array."""

    __slots__ = ("first", "size", "rows")

    def __init__(self, first: np.ndarray, size: int) -> None:
        self.first, self.size, self.rows = first, size, first >> _SHIFT[size]

    def _view(self, arr: np.ndarray) -> np.ndarray:
        return arr[:arr.size - arr.size % self.size].reshape(-1, self.size)

    def get(self, arr: np.ndarray) -> np.ndarray:
        return self._view(arr)[self.rows]

    def set(self, arr: np.ndarray, value) -> None:
        self._view(arr)[self.rows] = value

    def bounds(self) -> tuple[int, int]:
        return int(self.first.min()), int(self.first.max()) + self.size

    def ravel(self) -> np.ndarray:
        """Every byte cell, as a flat offset array (for error messages, which may afford it)."""
        return (self.first[:, None] + byte_range(self.size)).ravel()


def cells_of(first: np.ndarray, size: int):
    """The byte cells of `size`-byte accesses at offsets `first`: `Chunks` when they are aligned chunks of a
    unit width, else a flat offset array."""
    if size in _SHIFT and size > 1 and aligned_unit(first, size) == size:
        return Chunks(first, size)
    return (first[:, None] + byte_range(size)).ravel()


def cells_get(arr: np.ndarray, idx) -> np.ndarray:
    """arr[idx] for a slice, an offset array or `Chunks`."""
    return idx.get(arr) if isinstance(idx, Chunks) else arr[idx]


def cells_set(arr: np.ndarray, idx, value) -> None:
    """arr[idx] = value for a slice, an offset array or `Chunks`."""
    if isinstance(idx, Chunks):
        idx.set(arr, value)
    else:
        arr[idx] = value
