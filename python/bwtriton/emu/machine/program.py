"""The emulator's core: decode a PTX function once into a list of Python closures (one per instruction).

Each closure takes a `Warp` (or a gang's `GangWarp`) and returns None (fall through), a program counter (jump),
or one of the control codes below. Operands are resolved to register slots / constants at compile time, so
running an instruction is a few numpy operations over the warp's `lanes` (32; more in a gang).

This module knows types, registers, operands and addresses, but no instruction family: which family compiles an
opcode is the ISA table's business (`emu/isa/table.py`), handed in as `dispatch` (so families may import the
machine, never the other way round).
"""
from __future__ import annotations

import struct
from typing import Callable, Optional

import numpy as np

from ...ptx.ir import Function, Instruction, Label, Operand
from ..errors import EmulationError, UnsupportedInstructionError, short

YIELD = -1     # the warp is blocked (barrier, mbarrier wait): retry this instruction later
DIVERGED = -2  # the instruction updated per-lane program counters itself (divergent branch)
EXITED = -3    # the active lanes exited
DONE_PC = 1 << 30  # per-lane PC of lanes that exited (sorts after every real PC)

#: dispatch(ins, prog) -> the instruction's closure; raises UnsupportedInstructionError for unknown opcodes
Dispatch = Callable[[Instruction, "Program"], Callable]

NP_TYPES = {
    "pred": np.dtype(bool), "b8": np.dtype(np.uint8), "u8": np.dtype(np.uint8), "s8": np.dtype(np.int8),
    "b16": np.dtype(np.uint16), "u16": np.dtype(np.uint16), "s16": np.dtype(np.int16),
    "f16": np.dtype(np.float16), "bf16": np.dtype(np.uint16),
    "b32": np.dtype(np.uint32), "u32": np.dtype(np.uint32), "s32": np.dtype(np.int32), "f32": np.dtype(np.float32),
    "f16x2": np.dtype(np.uint32), "bf16x2": np.dtype(np.uint32), "tf32": np.dtype(np.float32),
    "b64": np.dtype(np.uint64), "u64": np.dtype(np.uint64), "s64": np.dtype(np.int64), "f64": np.dtype(np.float64),
    "e4m3x2": np.dtype(np.uint16), "e5m2x2": np.dtype(np.uint16), "e2m1x2": np.dtype(np.uint8),
    "ue8m0x2": np.dtype(np.uint16), "e2m3x2": np.dtype(np.uint16), "e3m2x2": np.dtype(np.uint16),
    "f32x2": np.dtype(np.uint64),
    "b128": np.dtype((np.uint64, 2)),  # CLC try_cancel responses: a (32, 2) uint64 lane array (emu/clc.py)
}
# Register containers: raw bits of the declared width (floats live as bits).
_CONTAINER = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64),
              16: NP_TYPES["b128"]}


def container_of(decl_type: str) -> np.dtype:
    if decl_type == "pred":
        return np.dtype(bool)
    return _CONTAINER[NP_TYPES[decl_type].itemsize]


def convert(val, dt: np.dtype):
    """Reinterpret (same width) or resize (zero/sign extension, truncation) a lane array to `dt`."""
    val = np.asarray(val)
    if val.dtype == dt:
        return val
    if dt == np.bool_:
        return val != 0
    if val.dtype == np.bool_:
        return val.astype(dt)
    if val.dtype.itemsize == dt.itemsize:
        return val.view(dt)
    if val.dtype.kind == "f" or dt.kind == "f":
        # widths differ and one side is float: go through raw bits of the float's width
        if val.dtype.kind == "f":
            val = val.view(_CONTAINER[val.dtype.itemsize])
        return val.astype(_CONTAINER[dt.itemsize]).view(dt)
    return val.astype(dt)


def imm_bits(op: Operand) -> int:
    """An immediate as raw bits: ints as written, 0fXXXXXXXX / 0dXXXX as their IEEE bits."""
    t = op.text.strip()
    if t[:2] in ("0f", "0F", "0d", "0D"):
        return int(t[2:], 16)
    if isinstance(op.value, float):
        return struct.unpack("<I", struct.pack("<f", op.value))[0]
    return int(op.value)  # type: ignore[arg-type]


def imm_const(op: Operand, dt: np.dtype):
    """An immediate operand as a numpy scalar of dtype `dt` (floats by value, ints with wrap-around)."""
    t = op.text.strip()
    if dt.kind == "f" and t[:2] in ("0f", "0F", "0d", "0D"):
        bits = int(t[2:], 16)
        raw = np.array([bits], dtype=np.uint32 if t[1] in "fF" else np.uint64)
        return raw.view(np.float32 if t[1] in "fF" else np.float64)[0].astype(dt)
    if dt.kind == "f":
        return dt.type(op.value)
    if dt == np.bool_:
        return np.bool_(bool(op.value))
    v = imm_bits(op) & ((1 << (8 * dt.itemsize)) - 1)
    return np.array([v], dtype=_CONTAINER[dt.itemsize]).view(dt)[0]


class Program:
    """A compiled PTX function: closures, label -> pc, register slots, params."""

    def __init__(self, fn: Function, env: "CompileEnv", dispatch: Dispatch):
        self.fn = fn
        self.env = env
        self.slots: dict[str, int] = {}
        self.slot_dtypes: list[np.dtype] = []
        for decl in fn.registers:
            cdt = container_of(decl.type)
            names = [f"{decl.name}{i}" for i in range(decl.count)] if decl.count is not None else [decl.name]
            for n in names:
                if n not in self.slots:
                    self.slots[n] = len(self.slot_dtypes)
                    self.slot_dtypes.append(cdt)
        self.label_pc: dict[str, int] = {}
        pending: list[str] = []
        idx = 0
        for st in fn.statements:
            if isinstance(st, Label):
                pending.append(st.key)
            elif isinstance(st, Instruction):
                for k in pending:
                    self.label_pc[k] = idx
                pending = []
                idx += 1
        for k in pending:
            self.label_pc[k] = idx
        self.code: list[Callable] = [self._compile(ins, dispatch) for ins in fn.instructions]
        self.code.append(_fell_off_end)
        #: the closures a gang runs (machine/gang.py builds them on first use)
        self.gang_code: Optional[list] = None
        self.cta_gang_code: Optional[list] = None

    # -- operand access ------------------------------------------------------------------------------
    def slot(self, name: str, ins: Instruction) -> int:
        try:
            return self.slots[name]
        except KeyError:
            raise EmulationError(f"register {name} is not declared", line=ins.line, text=ins.text) from None

    def src(self, op: Operand, dt: np.dtype, ins: Instruction) -> Callable:
        """A reader `f(warp) -> lane array or scalar` of operand `op` as dtype `dt`."""
        if op.kind == "reg":
            s = self.slot(op.name, ins)
            cdt = self.slot_dtypes[s]
            neg = op.negated
            # Register reads of tcgen05.ld results before tcgen05.wait::ld are fine: the hardware respects true
            # register dependencies (PTX ISA; reference P9). The wait guards TMEM anti-dependencies, checked on
            # TMEM writes (tcgen05.py).
            if cdt == dt and not neg:
                return lambda w: w.R[s]
            if not neg and cdt.itemsize == dt.itemsize and cdt != np.bool_ and dt != np.bool_ \
                    and cdt.shape == () and dt.shape == ():
                # same width: a reinterpretation (what `convert` does), without its dispatch per read
                return lambda w: w.R[s].view(dt)

            def read(w):
                v = w.R[s]
                if neg:
                    v = ~v
                return convert(v, dt)
            return read
        if op.kind == "imm":
            c = imm_const(op, dt)
            return lambda w: c
        if op.kind == "sreg":
            name = op.name
            return lambda w: convert(w.sreg(name), dt)
        if op.kind == "sym":
            addr = self.env.symbol_address(op.name, ins)
            c = np.array([addr], dtype=np.uint64).astype(dt)[0] if dt.kind in "ui" else dt.type(addr)
            return lambda w: c
        if op.kind == "vec":
            # packing {a, b, ...} into one wider value (mov.b32 %r, {%rs1, %rs2}): first item lowest
            n = len(op.items)
            part = _CONTAINER[dt.itemsize // n] if dt.itemsize % n == 0 else None
            if part is None:
                raise UnsupportedInstructionError(f"cannot pack {n} items into {dt}", line=ins.line, text=ins.text)
            readers = [self.src(it, part, ins) for it in op.items]

            def pack(w):
                parts = [as_lanes(np.asarray(r(w), dtype=part), w.lanes) for r in readers]
                return np.stack(parts, axis=1).copy().view(_CONTAINER[dt.itemsize]).reshape(-1).view(dt)
            return pack
        raise UnsupportedInstructionError(f"operand {op.text!r} ({op.kind}) cannot be read as a value",
                                          line=ins.line, text=ins.text)

    def dst(self, op: Operand, ins: Instruction) -> Callable:
        """A writer `f(warp, value)` storing a lane array (or scalar) into register operand `op` under the
        warp's active mask."""
        if op.kind == "sink":
            return lambda w, v: None
        if op.kind == "vec":
            n = len(op.items)
            writers = [self.dst(it, ins) for it in op.items]
            dts = [self.slot_dtypes[self.slot(it.name, ins)] for it in op.items if it.kind == "reg"]
            part = dts[0] if dts else np.dtype(np.uint32)

            def unpack(w, v):
                v = as_lanes(np.asarray(v), w.lanes)
                pieces = np.ascontiguousarray(v).view(part).reshape(-1, n)
                for i, wr in enumerate(writers):
                    wr(w, pieces[:, i])
            return unpack
        if op.kind != "reg":
            raise UnsupportedInstructionError(f"destination {op.text!r} is not a register", line=ins.line,
                                              text=ins.text)
        s = self.slot(op.name, ins)
        cdt = self.slot_dtypes[s]
        width = cdt.itemsize if cdt.kind in "iu" and cdt.shape == () else -1

        def write(w, v):
            if type(v) is not np.ndarray:
                v = np.asarray(v)
            if v.dtype != cdt:
                vdt = v.dtype
                # same-width numbers (f64 results into b64 registers): a view, what `convert` would do
                v = v.view(cdt) if vdt.itemsize == width and vdt.kind in "fiu" else convert(v, cdt)
            n = w.lanes
            if v.shape != (n,):
                v = np.full(n, v, dtype=cdt)
            m = w.mask
            w.R[s] = v if m is None else np.where(m, v, w.R[s])
        write.slot = s  # lets instruction families with a fast path store straight into the register file
        write.dtype = cdt
        return write

    # -- instruction dispatch ------------------------------------------------------------------------
    def _compile(self, ins: Instruction, dispatch: Dispatch) -> Callable:
        try:
            f = dispatch(ins, self)
        except EmulationError:
            raise
        except (KeyError, IndexError, ValueError, TypeError, AttributeError, StopIteration) as exc:
            # a form of an instruction the family's decoder did not expect: name the line, never a raw traceback
            raise UnsupportedInstructionError(f"the emulator cannot decode this form of `{ins.full_opcode}` "
                                              f"({type(exc).__name__}: {exc})", line=ins.line,
                                              text=ins.text) from exc
        f = _with_error_context(f, ins)
        if ins.guard is not None and ins.opcode not in ("bra",):
            f = _guarded(f, self.slot(ins.guard.reg, ins), ins.guard.negated)
        return f


def _with_error_context(f: Callable, ins: Instruction) -> Callable:
    """Errors raised while executing `ins` name its PTX line; a lookup failure inside a family (a form of the
    instruction its decoder did not foresee) becomes UnsupportedInstructionError, never a raw KeyError."""
    def run(w):
        try:
            return f(w)
        except EmulationError as exc:
            if exc.line is None:
                exc.line = ins.line
                exc.args = (f"PTX line {ins.line}: {exc.args[0]}\n    {short(ins.text, 200)}",)
            raise
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise UnsupportedInstructionError(f"this form of `{ins.full_opcode}` is not emulated "
                                              f"({type(exc).__name__}: {exc})", line=ins.line, text=ins.text,
                                              where=w.where()) from exc
    return run


def _guarded(f: Callable, slot: int, negated: bool) -> Callable:
    """`@%p` / `@!%p`: run `f` on the lanes whose predicate holds (skip when none)."""
    def run(w):
        p = w.R[slot]
        if negated:
            p = ~p
        m = w.mask
        if m is not None:
            p = p & m
        if not p.any():
            return None
        if m is None and p.all():
            return f(w)
        w.mask = p
        try:
            return f(w)
        finally:
            w.mask = m
    return run


def _fell_off_end(w):
    return EXITED


# --- addressing ---------------------------------------------------------------------------------------
def address_reader(op: Operand, prog: Program, ins: Instruction) -> Callable:
    """`[base + off]` -> f(warp) giving a uint64 lane array of addresses (param symbols give param offsets)."""
    if op.kind != "addr":
        raise UnsupportedInstructionError(f"expected an address operand, got {op.text!r}", line=ins.line,
                                          text=ins.text)
    off = np.uint64(op.offset & 0xFFFFFFFFFFFFFFFF)
    if op.base is None or op.base.kind == "sym":
        c = off if op.base is None else np.uint64(prog.env.symbol_address(op.base.name, ins)) + off
        by_lanes: dict[int, np.ndarray] = {}

        def const_address(w):
            n = w.lanes
            v = by_lanes.get(n)
            if v is None:
                v = by_lanes[n] = np.full(n, c, dtype=np.uint64)
            return v
        return const_address
    rd = prog.src(op.base, np.dtype(np.uint64), ins)
    if op.offset == 0:
        return lambda w: as_lanes(rd(w), w.lanes)
    return lambda w: as_lanes(rd(w), w.lanes) + off


def as_lanes(v, n: int) -> np.ndarray:
    """`v` as an array of `n` lanes (a warp's or a gang's `lanes`; scalars broadcast, read-only); the common
    already-an-array case costs nothing."""
    if type(v) is np.ndarray and v.shape == (n,):
        return v
    return np.broadcast_to(np.asarray(v), (n,))


def active_index(w) -> np.ndarray:
    """Indices of the warp's active lanes."""
    m = w.mask
    return w.all_lanes if m is None else np.nonzero(m)[0]


class CompileEnv:
    """What instruction compilers need from the launch: symbol addresses (params, global_smem) and the module's
    `.target` (instructions a target lacks are refused, as ptxas would)."""

    def __init__(self, symbols: dict[str, int], target: Optional[str] = None):
        self.symbols = symbols
        self.target = target

    def symbol_address(self, name: str, ins: Instruction) -> int:
        try:
            return self.symbols[name]
        except KeyError:
            raise EmulationError(f"unknown symbol {name!r}", line=ins.line, text=ins.text) from None
