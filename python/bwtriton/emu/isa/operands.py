"""MMA operands in shared memory (via 64-bit matrix descriptors) and the TMEM accumulator data-path layouts.

Byte addressing follows the canonical layouts of tcgen05_reference.md §2b (in 16-byte "cells"):
  K-major, no swizzle:  row r, byte b  ->  start + (r%8)*16 + (r//8)*SBO + (b//16)*LBO + b%16
  K-major, swizzle S:   row r, byte b  ->  swz(start + (r%8)*S + (r//8)*SBO + b)
  MN-major, no swizzle: mn byte x, k   ->  start + x%16 + (x//16)*SBO + (k%8)*16 + (k//8)*LBO
  MN-major, swizzle S:  mn byte x, k   ->  swz(start + x%S + (x//S)*LBO + (k%8)*S + (k//8)*SBO)
with swz the CuTe Swizzle<log2(S/16), 4, 3> on absolute shared addresses (S = 32, 64, 128 bytes).
"""
from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from ...ptx.descriptors import SmemDesc, decode_smem_desc
from ...ptx.ir import Instruction
from . import numerics as nx
from ..errors import DescriptorError
from ..machine.async_engine import engine_of

SWIZZLE_BYTES = {"none": 0, "32B": 32, "64B": 64, "128B": 128}


@functools.lru_cache(maxsize=4096)
def smem_desc(value: int) -> SmemDesc:
    return decode_smem_desc(value)


def swizzle(addr: np.ndarray, nbytes: int) -> np.ndarray:
    if nbytes == 0:
        return addr
    mask = {32: 1, 64: 3, 128: 7}[nbytes]
    return addr ^ (((addr >> 7) & mask) << 4)


def _check(d: SmemDesc) -> int:
    if d.swizzle not in SWIZZLE_BYTES:
        raise DescriptorError(f"shared-memory descriptor 0x{d.value:016x}: swizzle mode {d.swizzle} is not emulated")
    if d.fields.get("version") != 1:
        raise DescriptorError(f"shared-memory descriptor 0x{d.value:016x}: bits 46-48 must be 0b001 on sm_100 "
                              f"(found {d.fields.get('version')})")
    # The base offset only shifts where a swizzle pattern starts; without swizzling it has no effect
    # (Triton sets it on the SWIZZLE_NONE scale descriptors of tcgen05.cp).
    if (d.fields.get("base_offset") and d.swizzle != "none") or d.fields.get("lbo_mode"):
        raise DescriptorError(f"shared-memory descriptor 0x{d.value:016x}: nonzero base offset with swizzling / "
                              "absolute LBO mode is not emulated")
    return SWIZZLE_BYTES[d.swizzle]


@functools.lru_cache(maxsize=1024)
def kmajor_addresses(value: int, rows: int, row_bytes: int) -> np.ndarray:
    """Shared addresses [rows, row_bytes] of a K-major operand (each row = one M/N index, K bytes)."""
    d = smem_desc(value)
    s = _check(d)
    r = np.arange(rows)[:, None]
    b = np.arange(row_bytes)[None, :]
    if s == 0:
        a = d.start_address + (r % 8) * 16 + (r // 8) * d.sbo + (b // 16) * d.lbo + b % 16
    else:
        if row_bytes > s:
            raise DescriptorError(f"K-major operand rows of {row_bytes} bytes exceed the {s}-byte swizzle atom")
        a = swizzle(d.start_address + (r % 8) * s + (r // 8) * d.sbo + b, s)
    return _frozen(a.astype(np.int64))


@functools.lru_cache(maxsize=1024)
def mnmajor_addresses(value: int, mn: int, k: int, elem_bytes: int) -> np.ndarray:
    """Shared addresses [mn, k*elem_bytes] of an MN-major operand, laid out as K-major bytes (row = mn index)."""
    d = smem_desc(value)
    s = _check(d)
    m = np.arange(mn)[:, None, None]
    kk = np.arange(k)[None, :, None]
    i = np.arange(elem_bytes)[None, None, :]
    x = m * elem_bytes + i
    if s == 0:
        a = d.start_address + x % 16 + (x // 16) * d.sbo + (kk % 8) * 16 + (kk // 8) * d.lbo
    else:
        a = swizzle(d.start_address + x % s + (x // s) * d.lbo + (kk % 8) * s + (kk // 8) * d.sbo, s)
    return _frozen(a.reshape(mn, k * elem_bytes).astype(np.int64))


def _frozen(a: np.ndarray) -> np.ndarray:
    """A cached result, read-only: every MMA of the same descriptor shares it (and its memoized offsets)."""
    a.flags.writeable = False
    return a


def gather(smem, addrs: np.ndarray) -> np.ndarray:
    """Bytes of shared memory at absolute shared::cta addresses."""
    return smem.data[smem.offsets(addrs.ravel(), 1).reshape(addrs.shape)]


_MEMO: dict = {}


def memo(obj, key, make: Callable):
    """make(), remembered for the live object `obj` (a cached array or layout tuple) and `key`."""
    hit = _MEMO.get((id(obj), key))
    if hit is not None and hit[0] is obj:
        return hit[1]
    value = make()
    if len(_MEMO) > 4096:
        _MEMO.clear()
    _MEMO[(id(obj), key)] = (obj, value)
    return value


class AsyncReads:
    """Shared-memory reads of one async-proxy operation: checked (no pending writer, no unfenced generic write)
    and remembered as (smem, lo, hi) ranges the operation reserves until it completes."""

    def __init__(self, w, ins: Instruction):
        self.engine = engine_of(w)
        self.w = w
        self.reader = ins.opcode  # the error's "PTX line N:" prefix and text name the instruction itself
        self.ranges: list = []

    def gather(self, smem, addrs: np.ndarray) -> np.ndarray:
        # MMAs of one descriptor read the same (cached, read-only) addresses in every CTA and K step: they are
        # bounds-checked once
        def offsets():
            off = smem.offsets(addrs.ravel(), 1).reshape(addrs.shape)
            return off, int(off.min()), int(off.max()) + 1
        off, lo, hi = memo(addrs, smem.size, offsets) if not addrs.flags.writeable else offsets()
        # the span's slices are cheaper than the per-byte checks, which run only when a span holds something
        if (smem.n_poison and smem.poison[lo:hi].any()) or (smem.any_unfenced and smem.unfenced[lo:hi].any()):
            self.engine.check_async_read(smem, off, self.reader)
        if smem.any_async_written:  # the issuing thread must have observed the loads that filled the operands
            self.engine.check_observed_writes(self.w, smem, off, self.reader, (lo, hi))
        if self.engine.peer_stores:  # other warps' (or, cta_group::2, the peer CTA's) stores must be ordered
            self.engine.check_peer_read(self.w, smem, lo, hi, self.reader)
        self.ranges.append((smem, lo, hi))
        return smem.data[off]


# --- element decoding ---------------------------------------------------------------------------------
ELEM_BITS = {"f16": 16, "bf16": 16, "tf32": 32, "e4m3": 8, "e5m2": 8, "e2m3": 6, "e3m2": 6, "e2m1": 4,
             "u8": 8, "s8": 8}


def decode_rows(raw: np.ndarray, fmt: str, *, packed_fp4: bool) -> np.ndarray:
    """Bytes [rows, nbytes] of K-ordered elements -> values [rows, K] (float64, or int64 for u8/s8).
    `packed_fp4`: two e2m1 per byte (mxf4 kinds); otherwise 4/6-bit types sit in 16-byte cells holding 16
    elements followed by padding (f8f6f4 / mxf8f6f4)."""
    if fmt == "f16":
        return raw.view(np.float16).astype(np.float64)
    if fmt == "bf16":
        return nx.bf16_bits_to_f32(raw.view(np.uint16)).astype(np.float64)
    if fmt == "tf32":
        return nx.tf32_truncate(raw.view(np.float32)).astype(np.float64)
    if fmt in ("e4m3", "e5m2"):
        return nx.decode(raw, fmt).astype(np.float64)
    if fmt == "u8":
        return raw.astype(np.int64)
    if fmt == "s8":
        return raw.view(np.int8).astype(np.int64)
    if fmt == "e2m1" and packed_fp4:
        codes = np.stack([raw & 0xF, raw >> 4], axis=-1).reshape(raw.shape[0], -1)
        return nx.decode(codes, "e2m1").astype(np.float64)
    if fmt in ("e2m1", "e2m3", "e3m2"):
        rows, nb = raw.shape
        cells = raw.reshape(rows, nb // 16, 16)
        bits = 4 if fmt == "e2m1" else 6
        data = cells[:, :, : 2 * bits].astype(np.uint64)  # 16 elements * bits = 8 or 12 bytes
        word = np.zeros((rows, nb // 16), dtype=np.uint64)
        for i in range(2 * bits):  # little-endian, elements LSB-first ([U] in the reference, §2c)
            word |= data[:, :, i] << np.uint64(8 * i)
        codes = np.stack([(word >> np.uint64(bits * e)) & np.uint64((1 << bits) - 1) for e in range(16)], axis=-1)
        return nx.decode(codes.reshape(rows, -1), fmt).astype(np.float64)
    raise DescriptorError(f"operand element format {fmt!r} is not emulated")


def decode_fp4_codes(codes: np.ndarray) -> np.ndarray:
    """e2m1 codes (0..15) -> float64 values."""
    return nx.decode(codes, "e2m1").astype(np.float64)


def decode_scales(codes: np.ndarray, scale_type: str) -> np.ndarray:
    return nx.decode(codes, scale_type).astype(np.float64)


# --- D (accumulator) layouts: reference §5 -----------------------------------------------------------
@functools.lru_cache(maxsize=256)
def d_tmem_layout(m: int, n: int, cta_group: int, lane_base: int) -> tuple:
    """For each CTA v of the MMA (1 or 2): (row range of D it holds, lanes [rows, n], columns [rows, n]).
    Columns are relative to the D address's column; lanes are absolute."""
    nn = np.arange(n)[None, :]
    if cta_group == 1:
        if m == 128:
            mm = np.arange(128)[:, None]
            return (((0, 128), lane_base + mm + 0 * nn, 0 * mm + nn),)
        if m == 64:  # layout F: 16-row groups spread over the four 32-lane sub-partitions
            mm = np.arange(64)[:, None]
            return (((0, 64), lane_base + (mm % 16) + 32 * (mm // 16) + 0 * nn, 0 * mm + nn),)
        raise DescriptorError(f"M={m} with cta_group::1 is not emulated (legal dense M: 64, 128)")
    if m == 256:  # layout A: CTA v holds rows [128v, 128v+128)
        mm = np.arange(128)[:, None]
        lay = (lane_base + mm + 0 * nn, 0 * mm + nn)
        return (((0, 128),) + lay, ((128, 256),) + lay)
    if m == 128:  # layout B: CTA v holds rows [64v, 64v+64); the second N half sits in lanes 64..127
        mm = np.arange(64)[:, None]
        half = n // 2
        lanes = lane_base + mm + 64 * (nn // half)
        cols = 0 * mm + nn % half
        return (((0, 64), lanes, cols), ((64, 128), lanes, cols))
    raise DescriptorError(f"M={m} with cta_group::2 is not emulated (legal: 128, 256)")
