"""Hopper's warpgroup MMA (sm_90a): wgmma.fence / mma_async / commit_group / wait_group.

`wgmma.mma_async.sync.aligned.m64nNkK` is one operation of the four warps of a warpgroup: warp q holds rows
16q .. 16q+15 of the 64-row A (when A is in registers) and of the accumulator D, in the mma.sync m16n8 fragment
layouts (PTX ISA, "Register Fragments and Shared Memory Matrix Layouts"); B, and A when it is not in registers,
comes from shared memory through 64-bit matrix descriptors whose canonical layouts are tcgen05's
(`ptx.descriptors.wgmma_desc_as_tcgen05`). Here each warp arrives with its fragments and waits for the other
three (`.aligned`: the same instruction in every warp, every lane active); the last to arrive reads the shared
operands through the async proxy (poison, proxy-fence and observed-write checks, `operands.AsyncReads`) and
computes the whole 64 x N product, exact products summed in float64 and rounded once to f32 (s32 for integer
types). D is written when each warp leaves the rendezvous. The operation then stays pending, its shared-memory
operands reserved against writes, until wgmma.wait_group retires its group: a warp that refills a stage before
it (or a barrier) has observed that retirement gets an AsyncOverwriteError, as a stage reused too early would
corrupt the hardware's read. Register hazards (A or D rewritten before the wait) are not modelled: the operands
are read at the rendezvous.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ...ptx.descriptors import wgmma_desc_as_tcgen05
from ...ptx.ir import Instruction
from . import operands as opnd
from .mma_sync import a_fragment_coords, fragment_elements
from ..errors import EmulationError, UnsupportedInstructionError
from ..machine.async_engine import AsyncOp, clock_of, engine_of
from ..machine.program import YIELD, Program, as_lanes
from ..machine.state import FamilyState

U32 = np.dtype(np.uint32)
U64 = np.dtype(np.uint64)
#: K of one wgmma per input type (256 bits of A per row), and the accumulator each takes
_K = {"f16": 16, "bf16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32, "s8": 32, "u8": 32}
_ACC = {"f16": "f32", "bf16": "f32", "tf32": "f32", "e4m3": "f32", "e5m2": "f32", "s8": "s32", "u8": "s32"}
WARPGROUP_WARPS = 4


@dataclass
class WgmmaWarpState:
    #: wgmma operations issued since the last commit_group, then the committed groups, oldest first
    wgmma_open: list = field(default_factory=list)
    wgmma_groups: list = field(default_factory=list)
    #: the rendezvous generation this warp waits in (None: not waiting)
    wgmma_wait: Optional[int] = None


@dataclass
class WgmmaCTAState:
    #: warpgroup index -> its `Rendezvous`
    wgmma_meetings: dict = field(default_factory=dict)


STATE = FamilyState("wgmma", warp=WgmmaWarpState, cta=WgmmaCTAState)


@dataclass
class Rendezvous:
    """The warps of one warpgroup meeting at a wgmma.mma_async: arrivals of the open generation, and per finished
    generation the operation and each warp's D registers, kept until that warp has taken them."""

    gen: int = 0
    line: int = -1
    arrivals: dict = field(default_factory=dict)
    done: dict = field(default_factory=dict)


@dataclass(frozen=True)
class _Form:
    m: int
    n: int
    k: int
    a_type: str
    b_type: str
    acc: str
    a_in_regs: bool


def _form(ins: Instruction) -> _Form:
    shape = next((m for m in ins.modifiers if m.startswith("m64n")), None)
    types = tuple(ins.types)
    if shape is None or "k" not in shape or len(types) != 3:
        raise UnsupportedInstructionError(f"`{ins.full_opcode}`: expected .m64nNkK.dtype.atype.btype", line=ins.line,
                                          text=ins.text)
    n, k = (int(v) for v in shape[4:].split("k"))
    d_t, a_t, b_t = types
    if a_t not in _K or _K[a_t] != k or _ACC[a_t] != d_t or (a_t in ("s8", "u8")) != (b_t in ("s8", "u8")) or \
            n % 8 or not 8 <= n <= 256 or ins.has("sp"):
        raise UnsupportedInstructionError(f"`{ins.full_opcode}` is not emulated (dense m64nNkK with f32 accumulation "
                                          "of f16/bf16/tf32/fp8, or s32 of s8/u8)", line=ins.line, text=ins.text)
    return _Form(64, n, k, a_t, b_t, d_t, ins.operands[1].kind == "vec")


def _values(regs: list[np.ndarray], fmt: str) -> np.ndarray:
    return fragment_elements(regs, opnd.ELEM_BITS[fmt], fmt)


def _shared_operand(reads, cta, desc: int, rows: int, k: int, fmt: str, mn_major: bool) -> np.ndarray:
    """Values [rows, k] of an operand in shared memory (A: rows = 64, B: rows = N)."""
    value = wgmma_desc_as_tcgen05(desc)
    nbytes = opnd.ELEM_BITS[fmt] // 8
    addrs = opnd.mnmajor_addresses(value, rows, k, nbytes) if mn_major else \
        opnd.kmajor_addresses(value, rows, k * nbytes)
    return opnd.decode_rows(np.ascontiguousarray(reads.gather(cta.smem, addrs)), fmt, packed_fp4=False)


@dataclass(frozen=True)
class _Compiled:
    """One wgmma.mma_async, decoded once: its form, its operand readers and D writers, its immediates."""

    ins: Instruction
    form: _Form
    d_w: list
    d_r: list
    a_r: object   # the A registers' readers, or the A descriptor's reader
    b_r: Callable
    scale_d: Callable
    sign: int     # imm-scale-a * imm-scale-b
    a_mn_major: bool
    b_mn_major: bool


def _compile(ins: Instruction, prog: Program) -> _Compiled:
    f = _form(ins)
    ops = ins.operands
    d_w = [prog.dst(o, ins) for o in ops[0].items]
    if len(d_w) != f.n // 2:
        raise UnsupportedInstructionError(f"`{ins.full_opcode}` needs {f.n // 2} accumulator registers, has "
                                          f"{len(d_w)}", line=ins.line, text=ins.text)
    # imm-scale-a, imm-scale-b (+1 / -1), then the transposes 16-bit types take: imm-trans-a (A in shared
    # memory only) and imm-trans-b
    imms = [int(o.value) for o in ops[4:]]  # type: ignore[arg-type]
    scale_a, scale_b, trans = (imms + [1, 1])[0], (imms[1:] + [1])[0], imms[2:]
    if f.a_in_regs:
        trans = [0] + trans
    return _Compiled(ins, f, d_w, [prog.src(o, U32, ins) for o in ops[0].items],
                     [prog.src(o, U32, ins) for o in ops[1].items] if f.a_in_regs else prog.src(ops[1], U64, ins),
                     prog.src(ops[2], U64, ins), prog.src(ops[3], np.dtype(bool), ins), scale_a * scale_b,
                     bool(trans and trans[0]), bool(len(trans) > 1 and trans[1]))


def _mma(ins: Instruction, prog: Program) -> Callable:
    c = _compile(ins, prog)
    return lambda w: _arrive(w, c)


def _first(value) -> int:
    return int(np.asarray(value).flat[0])


def _arrive(w, c: _Compiled) -> Optional[int]:
    """A warp reaches the instruction: record its fragments; the last of the four executes it."""
    cta, ins = w.cta, c.ins
    group, q = divmod(w.wid, WARPGROUP_WARPS)
    meet = cta.wgmma_meetings.get(group)
    if meet is None:
        meet = cta.wgmma_meetings[group] = Rendezvous()
    if w.wgmma_wait is not None:
        return _leave(w, meet, c.d_w)
    if w.mask is not None:
        raise EmulationError(f"{ins.opcode} with inactive lanes: `.aligned` needs all 128 threads of the warpgroup",
                             line=ins.line, text=ins.text, where=w.where())
    if len(cta.warps) < WARPGROUP_WARPS * (group + 1):
        raise EmulationError(f"{ins.opcode} needs a whole warpgroup (4 warps); warp {w.wid} belongs to an "
                             f"incomplete one ({len(cta.warps)} warps in the CTA)", line=ins.line, text=ins.text,
                             where=w.where())
    if meet.arrivals and meet.line != ins.line:
        raise EmulationError(f"warps of warpgroup {group} issued different wgmma.mma_async instructions (PTX lines "
                             f"{meet.line} and {ins.line}); `.aligned` needs the same one", line=ins.line,
                             text=ins.text, where=w.where())
    regs = lambda rs: [as_lanes(np.asarray(r(w), np.uint32), 32) for r in rs]  # noqa: E731
    a = regs(c.a_r) if c.form.a_in_regs else _first(c.a_r(w))
    meet.line = ins.line
    meet.arrivals[q] = (a, regs(c.d_r), bool(_first(c.scale_d(w))), _first(c.b_r(w)))
    w.wgmma_wait = meet.gen
    if len(meet.arrivals) < WARPGROUP_WARPS:
        w.blocked_on = f"wgmma.mma_async (PTX line {ins.line}): waiting for the other warps of warpgroup {group}"
        return YIELD
    _execute(w, c, meet, group)
    return _leave(w, meet, c.d_w)


def _execute(w, c: _Compiled, meet: Rendezvous, group: int) -> None:
    """The warpgroup's 64 x N product from the four warps' arrivals; queued as pending until wait_group."""
    f = c.form
    reads = opnd.AsyncReads(w, c.ins)
    arrivals = [meet.arrivals[q] for q in range(WARPGROUP_WARPS)]
    b = _shared_operand(reads, w.cta, arrivals[0][3], f.n, f.k, f.b_type, c.b_mn_major)  # [N, K]
    if f.a_in_regs:
        a_rows, a_cols = a_fragment_coords(f.k, 32 // opnd.ELEM_BITS[f.a_type])
        A = np.zeros((WARPGROUP_WARPS, 16, f.k))
        for q, (a, *_rest) in enumerate(arrivals):
            A[q][a_rows, a_cols] = _values(a, f.a_type)
    else:
        A = _shared_operand(reads, w.cta, arrivals[0][0], 64, f.k, f.a_type, c.a_mn_major).reshape(4, 16, f.k)
    rows, cols = _d_coords(f.n)
    outs = []
    for q, (_a, acc, scale_d, _b) in enumerate(arrivals):
        D = c.sign * (A[q] @ b.T)
        if scale_d:
            raw = np.stack(acc, 1)
            C = np.zeros((16, f.n))
            C[rows, cols] = raw.view(np.int32) if f.acc == "s32" else raw.view(np.float32)
            D = D + C
        vals = D[rows, cols]
        outs.append((vals.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32) if f.acc == "s32" else
                    vals.astype(np.float32).view(np.uint32))
    op = AsyncOp(kind="wgmma.mma_async", line=c.ins.line, text=c.ins.text,
                 issuer=("wg", w.cta.ctaid, w.cta.rank, group), reads=reads.ranges,
                 observe="Retire it with wgmma.wait_group")
    engine_of(w).issue(w, op)
    meet.done[meet.gen] = [op, outs, WARPGROUP_WARPS]
    meet.arrivals = {}
    meet.gen += 1


def _leave(w, meet: Rendezvous, d_w: list) -> Optional[int]:
    """Leave the rendezvous if its generation has executed: write this warp's D and open the operation."""
    gen = w.wgmma_wait
    entry = meet.done.get(gen)
    if entry is None:
        return YIELD
    op, outs, left = entry
    out = outs[w.wid % WARPGROUP_WARPS]
    for i, wr in enumerate(d_w):
        wr(w, out[:, i])
    w.wgmma_open.append(op)
    w.wgmma_wait = None
    w.blocked_on = ""
    if left == 1:
        del meet.done[gen]
    else:
        entry[2] = left - 1
    return None


@functools.lru_cache(maxsize=64)
def _d_coords(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) [32, n/2] of a warp's accumulator registers: the m16n8 C fragment repeated over N / 8."""
    lane = np.arange(32)
    g, t = lane >> 2, lane % 4
    rows, cols = [], []
    for i in range(n // 2):
        j, e = divmod(i, 4)
        rows.append(g + 8 * (e // 2))
        cols.append(8 * j + 2 * t + e % 2)
    return np.stack(rows, 1), np.stack(cols, 1)


def _commit(w) -> None:
    w.wgmma_groups.append(w.wgmma_open)
    w.wgmma_open = []


def _wait(ins: Instruction) -> Callable:
    keep = int(ins.operands[0].value)  # type: ignore[arg-type]

    def wait(w):
        groups = w.wgmma_groups
        clock = clock_of(w)
        while len(groups) > keep:
            for op in groups.pop(0):
                engine_of(w).complete(op)
                if clock.get(op.key, 0) < op.idx:
                    clock[op.key] = op.idx
    return wait


def _on_wgmma_target(compile_ins: Callable) -> Callable:
    """The compiler of a wgmma instruction, refusing modules whose `.target` is not sm_90a (ptxas rejects them)."""
    def compile_checked(ins: Instruction, prog: Program) -> Callable:
        arch = (getattr(prog.env, "target", None) or "").split(",")[0].strip()
        if arch and arch != "sm_90a":
            raise EmulationError(f"{ins.opcode} under `.target {arch}`: wgmma exists only on sm_90a (ptxas rejects "
                                 "this module); compile for sm_90a", line=ins.line, text=ins.text)
        return compile_ins(ins, prog)
    return compile_checked


def _no_effect(w) -> None:
    return None


#: opcode -> instruction compiler (rows of the ISA table, isa/table.py)
HANDLERS: dict[str, Callable] = {op: _on_wgmma_target(fn) for op, fn in {
    "wgmma.mma_async": _mma,
    "wgmma.fence": lambda ins, prog: _no_effect,  # orders register accesses, which happen in program order here
    "wgmma.commit_group": lambda ins, prog: _commit,
    "wgmma.wait_group": lambda ins, prog: _wait(ins),
}.items()}
