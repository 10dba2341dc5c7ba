"""Warp-level `mma.sync.aligned` (the pre-tcgen05 tensor-core path Triton 3.6 still uses for int8 `tl.dot` on
sm_100, and for tiles below the tcgen05 minimum): m16n8k16 / m16n8k8 (f16/bf16 -> f32, f16 -> f16), m16n8k8 (tf32 -> f32),
m16n8k32 / m16n8k16 (s8/u8 -> s32), row.col, with the PTX ISA fragment layouts (groupID g = lane>>2, t = lane%4)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...ptx.ir import Instruction
from . import numerics as nx
from ..errors import UnsupportedInstructionError
from ..machine.program import Program, as_lanes

_LANE = np.arange(32)
_G, _T = _LANE >> 2, _LANE % 4


def fragment_elements(regs: list[np.ndarray], bits: int, kind: str) -> np.ndarray:
    """Registers [lanes] x R -> per-lane element values [lanes, R * 32/bits] (low bits first)."""
    per = 32 // bits
    w = np.stack([np.asarray(r, np.uint32) for r in regs], 1)  # [32, R]
    parts = np.stack([(w >> np.uint32(bits * i)) & np.uint32((1 << bits) - 1) for i in range(per)], 2)
    parts = parts.reshape(len(w), -1)
    if kind == "f16":
        return parts.astype(np.uint16).view(np.float16).astype(np.float64)
    if kind == "bf16":
        return nx.bf16_bits_to_f32(parts.astype(np.uint16)).astype(np.float64)
    if kind in ("e4m3", "e5m2"):
        return nx.decode(parts.astype(np.uint8), kind).astype(np.float64)
    if kind == "s8":
        return parts.astype(np.uint8).view(np.int8).astype(np.int64)
    if kind == "tf32":  # the tensor core reads the top 19 bits of each f32
        return nx.tf32_truncate(parts.astype(np.uint32).view(np.float32)).astype(np.float64)
    return parts.astype(np.int64)


def a_fragment_coords(k: int, per: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) [32, elements] of the A fragment (16 x k, row-major) for 16-bit (per=2) / 8-bit (per=4)."""
    regs = k // (2 * per)  # 16 x k elements over 32 lanes: f16 k16 / s8 k32 / tf32 k8 -> 4 regs, f16 k8 -> 2
    rows, cols = [], []
    for r in range(regs):
        for e in range(per):
            rows.append(_G + 8 * (r % 2))
            cols.append(_T * per + e + (per * 4) * (r // 2))
    return np.stack(rows, 1), np.stack(cols, 1)


def _b_coords(k: int, per: int) -> tuple[np.ndarray, np.ndarray]:
    regs = k // (4 * per)
    ks, ns = [], []
    for r in range(regs):
        for e in range(per):
            ks.append(_T * per + e + 4 * per * r)
            ns.append(_G)
    return np.stack(ks, 1), np.stack(ns, 1)


def _c_coords() -> tuple[np.ndarray, np.ndarray]:
    rows = np.stack([_G, _G, _G + 8, _G + 8], 1)
    cols = np.stack([2 * _T, 2 * _T + 1, 2 * _T, 2 * _T + 1], 1)
    return rows, cols


def _mma(ins: Instruction, prog: Program) -> Callable:
    mods = ins.modifiers
    shape = next((m for m in mods if m.startswith("m16n8k")), None)
    if shape not in ("m16n8k8", "m16n8k16", "m16n8k32") or "row" not in mods or "col" not in mods or \
            len(ins.types) != 4:
        raise UnsupportedInstructionError(f"`{ins.full_opcode}` is not emulated (only m16n8k8/k16/k32 row.col)",
                                          line=ins.line, text=ins.text)
    d_t, a_t, b_t, c_t = ins.types
    k = int(shape[6:])
    per = 2 if a_t in ("f16", "bf16") else 1 if a_t == "tf32" else 4
    half_acc = per == 2 and a_t == "f16" and d_t == c_t == "f16"  # f16 D/C: two f16x2 registers each
    if per == 4 and a_t not in ("s8", "u8") or per == 2 and d_t not in ("f32",) and not half_acc:
        raise UnsupportedInstructionError(f"`{ins.full_opcode}` types are not emulated", line=ins.line,
                                          text=ins.text)
    ops = ins.operands
    d_w = [prog.dst(o, ins) for o in ops[0].items]
    a_r = [prog.src(o, np.dtype(np.uint32), ins) for o in ops[1].items]
    b_r = [prog.src(o, np.dtype(np.uint32), ins) for o in ops[2].items]
    c_r = [prog.src(o, np.dtype(np.uint32), ins) for o in ops[3].items]
    ar, ac = a_fragment_coords(k, per)
    bk, bn = _b_coords(k, per)
    cr, cc = _c_coords()
    sat = "satfinite" in mods
    integer = per == 4

    def mma(w):
        # one MMA per warp; in a gang (bwtriton.emu.gang) one per CTA row of 32 lanes, batched
        regs = lambda rs: [as_lanes(np.asarray(r(w), np.uint32), w.lanes) for r in rs]  # noqa: E731
        a_el = fragment_elements(regs(a_r), 32 // per, a_t)
        nw = len(a_el) // 32
        b_el = fragment_elements(regs(b_r), 32 // per, b_t)
        A = np.zeros((nw, 16, k), dtype=a_el.dtype)
        B = np.zeros((nw, k, 8), dtype=b_el.dtype)
        A[:, ar, ac] = a_el.reshape(nw, 32, -1)
        B[:, bk, bn] = b_el.reshape(nw, 32, -1)
        C = np.zeros((nw, 16, 8), dtype=np.float64 if not integer else np.int64)
        craw = np.stack(regs(c_r), 1).reshape(nw, 32, -1)
        if half_acc:  # register r holds (c[2r], c[2r+1]) low half first: the order of _c_coords
            C[:, cr, cc] = np.ascontiguousarray(craw).view(np.float16).astype(np.float64)
        else:
            C[:, cr, cc] = craw.view(np.int32) if integer else craw.view(np.float32)
        D = A @ B + C
        if half_acc:  # exact products and sum, one rounding to f16 (round to nearest even)
            out = np.ascontiguousarray(D[:, cr, cc].astype(np.float16)).view(np.uint32).reshape(nw * 32, -1)
            for i, wr in enumerate(d_w):
                wr(w, out[:, i])
            return
        if integer:
            if sat:
                D = np.clip(D, -2 ** 31, 2 ** 31 - 1)
            out = (D[:, cr, cc] & 0xFFFFFFFF).astype(np.uint32)
        else:
            out = D[:, cr, cc].astype(np.float32).view(np.uint32)
        out = out.reshape(nw * 32, -1)
        for i, wr in enumerate(d_w):
            wr(w, out[:, i])
    return mma


#: opcode -> instruction compiler (rows of the ISA table, isa/table.py)
HANDLERS: dict[str, Callable] = {"mma": _mma}
