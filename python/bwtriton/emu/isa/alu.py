"""Integer / float / predicate arithmetic, conversions (incl. bf16, fp8, fp6, fp4 packs), mov, selp, setp."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ...ptx.ir import Instruction
from . import numerics as nx
from ..errors import UnsupportedInstructionError
from ..machine.memory import PARAM_BASE
from ..machine.program import NP_TYPES, Program, convert, as_lanes

U32 = np.dtype(np.uint32)
U64 = np.dtype(np.uint64)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
#: 32-bit state-space addresses of the param window (kernel parameters occupy far less)
_PARAM_WINDOW = np.uint64(1 << 32)
_WIDE = {"s16": np.dtype(np.int32), "u16": U32, "s32": np.dtype(np.int64), "u32": U64,
         "s64": None, "u64": None}


def _t(ins: Instruction, i: int = -1) -> str:
    if not ins.types:
        raise UnsupportedInstructionError("instruction without a type", line=ins.line, text=ins.text)
    return ins.types[i]


def _dt(t: str) -> np.dtype:
    return NP_TYPES[t]


def _unsupported(ins: Instruction) -> None:
    raise UnsupportedInstructionError(f"the emulator has no semantics for `{ins.full_opcode}`",
                                      line=ins.line, text=ins.text)


# --- packed half types: compute in f32 and round back -------------------------------------------------
def _unpack_x2(v: np.ndarray, t: str) -> tuple[np.ndarray, np.ndarray]:
    v = np.asarray(v).astype(np.uint32)
    lo, hi = (v & 0xFFFF).astype(np.uint16), (v >> 16).astype(np.uint16)
    f = nx.bf16_bits_to_f32 if t == "bf16x2" else nx.f16_bits_to_f32
    return f(lo), f(hi)


def _pack_x2(lo: np.ndarray, hi: np.ndarray, t: str) -> np.ndarray:
    f = nx.f32_to_bf16_bits if t == "bf16x2" else nx.f32_to_f16_bits
    return f(lo).astype(np.uint32) | (f(hi).astype(np.uint32) << 16)


def _half_to_f32(v, t: str):
    v = np.asarray(v)
    return nx.bf16_bits_to_f32(v) if t == "bf16" else nx.f16_bits_to_f32(v)


def _f32_to_half(v, t: str):
    return nx.f32_to_bf16_bits(v) if t == "bf16" else nx.f32_to_f16_bits(v)


def _float_op(t: str, fn: Callable) -> Callable:
    """Wrap an f32-domain function for f16/bf16/x2 types (operands arrive as raw bits)."""
    if t in ("f16x2", "bf16x2"):
        def g(*args):
            pairs = [_unpack_x2(a, t) for a in args]
            lo = fn(*[p[0] for p in pairs]).astype(np.float32)
            hi = fn(*[p[1] for p in pairs]).astype(np.float32)
            return _pack_x2(lo, hi, t)
        return g
    if t in ("bf16",):
        def h(*args):
            return _f32_to_half(fn(*[_half_to_f32(a, t) for a in args]).astype(np.float32), t)
        return h
    return fn


def _fma(a, b, c, dt):
    return (np.asarray(a, dtype=np.float64) * b + c).astype(dt)


def _shift_amount(v) -> np.ndarray:
    return np.minimum(np.asarray(v).astype(np.uint64), np.uint64(255)).astype(np.int64)


def _shl(a, n, dt):
    bits = 8 * dt.itemsize
    n = _shift_amount(n)
    big = n >= bits
    r = (np.asarray(a).astype(U64 if dt.itemsize == 8 else np.uint64) << np.where(big, 0, n).astype(np.uint64))
    r = np.where(big, 0, r)
    return r.astype(np.uint64).astype(dt) if dt.itemsize < 8 else r.astype(dt)


def _shr(a, n, dt):
    bits = 8 * dt.itemsize
    n = _shift_amount(n)
    big = n >= bits
    a = np.asarray(a)
    if dt.kind == "i":
        sh = np.where(big, bits - 1, n).astype(a.dtype)
        return (a >> sh).astype(dt)
    sh = np.where(big, 0, n).astype(a.dtype)
    return np.where(big, 0, a >> sh).astype(dt)


def _bfe(a, pos, ln, dt):
    bits = 8 * dt.itemsize
    a = np.asarray(a)
    pos = np.asarray(pos).astype(np.int64) & 0xFF
    ln = np.asarray(ln).astype(np.int64) & 0xFF
    ua = a.view(_unsigned(dt)).astype(np.uint64)
    shifted = np.where(pos >= bits, 0, ua >> np.minimum(pos, 63).astype(np.uint64))
    mask = np.where(ln >= 64, np.uint64(0xFFFFFFFFFFFFFFFF),
                    (np.uint64(1) << np.minimum(ln, 63).astype(np.uint64)) - np.uint64(1))
    r = shifted & mask
    if dt.kind == "i":
        # sign bit: bit (pos+len-1) of a, clamped to the msb
        sb = np.minimum(pos + ln - 1, bits - 1)
        sign = (ua >> sb.astype(np.uint64)) & np.uint64(1)
        fill = np.where((sign == 1) & (ln > 0) & (ln < 64), ~mask, np.uint64(0))
        r = r | fill
        r = np.where(ln == 0, 0, r)
    return r.astype(_unsigned(dt)).view(dt) if dt.itemsize < 8 else r.view(dt) if r.dtype == U64 else r.astype(dt)


def _bfi(f, b, pos, ln, dt):
    bits = 8 * dt.itemsize
    udt = _unsigned(dt)
    f = np.asarray(f).view(udt).astype(np.uint64)
    b = np.asarray(b).view(udt).astype(np.uint64)
    pos = np.asarray(pos).astype(np.int64) & 0xFF
    ln = np.asarray(ln).astype(np.int64) & 0xFF
    ln = np.minimum(ln, np.maximum(bits - pos, 0))
    mask = ((np.uint64(1) << ln.astype(np.uint64)) - np.uint64(1)) << np.minimum(pos, 63).astype(np.uint64)
    r = (b & ~mask) | ((f << np.minimum(pos, 63).astype(np.uint64)) & mask)
    return r.astype(udt).view(dt)


def _unsigned(dt: np.dtype) -> np.dtype:
    return {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: U32, 8: U64}[dt.itemsize]


def lane_arrays(*vals) -> list:
    """Operands of a lane-wise helper as arrays of one common shape (a scalar operand, an immediate, broadcasts
    to the others' lanes; all scalars give one lane, which the destination writer broadcasts)."""
    return np.broadcast_arrays(*(np.atleast_1d(v) for v in vals))


def _prmt(a, b, c, mode: Optional[str]):
    a, b, c = lane_arrays(np.asarray(a).astype(np.uint64), np.asarray(b).astype(np.uint64),
                          np.asarray(c).astype(np.uint32))
    src = (a | (b << np.uint64(32)))
    bytes8 = np.stack([(src >> np.uint64(8 * i)) & np.uint64(0xFF) for i in range(8)], axis=1).astype(np.uint32)
    n = len(c)
    out = np.zeros(n, dtype=np.uint32)
    if mode is None:
        for k in range(4):
            sel = (c >> np.uint32(4 * k)) & np.uint32(0xF)
            byte = bytes8[np.arange(n), (sel & 7).astype(np.int64)]
            rep = np.where((sel & 8) != 0, np.where((byte & 0x80) != 0, np.uint32(0xFF), np.uint32(0)), byte)
            out |= rep.astype(np.uint32) << np.uint32(8 * k)
        return out
    sel = (c & 3).astype(np.int64)
    table = {"f4e": lambda s: [(s + i) % 8 for i in range(4)], "b4e": lambda s: [(s - i) % 8 for i in range(4)],
             "rc8": lambda s: [s] * 4, "ecl": lambda s: [max(i, s) if i <= s else i for i in range(4)],
             "ecr": lambda s: [min(i, s) if i >= s else s for i in range(4)],
             "rc16": lambda s: [2 * (s & 1), 2 * (s & 1) + 1, 2 * (s & 1), 2 * (s & 1) + 1]}
    if mode not in table:
        raise UnsupportedInstructionError(f"prmt mode .{mode}")
    for lane in range(n):
        idxs = table[mode](int(sel[lane]))
        v = 0
        for k, i in enumerate(idxs):
            v |= int(bytes8[lane, i]) << (8 * k)
        out[lane] = v
    return out


_CMP = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal,
}


def _compare(cmp: str, a, b, is_float: bool):
    if cmp in ("num", "nan"):
        nan = np.isnan(a) | np.isnan(b)
        return ~nan if cmp == "num" else nan
    unordered = cmp.endswith("u") and cmp not in ("lu",) and is_float and cmp[:-1] in _CMP
    base = cmp[:-1] if unordered else cmp
    r = _CMP[base](a, b)
    if is_float:
        nan = np.isnan(a) | np.isnan(b)
        r = (r | nan) if unordered else (r & ~nan)
    return r


# --- conversions -------------------------------------------------------------------------------------
_INT_RANGES = {"s8": (-128, 127), "u8": (0, 255), "s16": (-32768, 32767), "u16": (0, 65535),
               "s32": (-2 ** 31, 2 ** 31 - 1), "u32": (0, 2 ** 32 - 1), "s64": (-2 ** 63, 2 ** 63 - 1),
               "u64": (0, 2 ** 64 - 1)}


def _round_float(x, mode: Optional[str]):
    if mode in ("rni", None):
        return np.rint(x)
    if mode == "rzi":
        return np.trunc(x)
    if mode == "rmi":
        return np.floor(x)
    if mode == "rpi":
        return np.ceil(x)
    return np.rint(x)


def _to_f32(v, t: str):
    if t in ("f16", "bf16"):
        return _half_to_f32(convert(v, np.dtype(np.uint16)), t)
    return np.asarray(v).astype(np.float64)


def _from_f32(x, t: str, rnd: Optional[str]):
    x = np.asarray(x)
    if t == "f32":
        if rnd == "rz":
            x64 = x.astype(np.float64)
            f = x64.astype(np.float32)
            # toward zero: step back when rounding went away from zero
            over = np.abs(f.astype(np.float64)) > np.abs(x64)
            return np.where(over, np.nextafter(f, np.float32(0)), f)
        return x.astype(np.float32)
    if t == "f64":
        return x.astype(np.float64)
    if t in ("f16", "bf16"):
        return _f32_to_half(x.astype(np.float32), t)
    raise UnsupportedInstructionError(f"conversion to {t}")


def _cvt(ins: Instruction, prog: Program) -> Callable:
    dt_name, st_name = ins.types[0], ins.types[1] if len(ins.types) > 1 else ins.types[0]
    mods = ins.modifiers
    rnd = next((m for m in mods if m in ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi", "rna", "rs")), None)
    sat = "satfinite" in mods or "sat" in mods
    relu = "relu" in mods
    ops = ins.operands
    wr = prog.dst(ops[0], ins)

    # packed float -> two-element narrow formats: cvt.rn.satfinite.e4m3x2.f32 d, a, b (a -> upper half)
    if dt_name in ("f16x2", "bf16x2", "e4m3x2", "e5m2x2", "e2m1x2", "e2m3x2", "e3m2x2", "ue8m0x2") and \
            st_name == "f32" and len(ops) == 3:
        ra, rb = prog.src(ops[1], F32, ins), prog.src(ops[2], F32, ins)
        if dt_name in ("f16x2", "bf16x2"):
            def f2(w):
                a, b = np.asarray(ra(w), np.float32), np.asarray(rb(w), np.float32)
                if relu:
                    a, b = np.maximum(a, 0), np.maximum(b, 0)
                return wr(w, _pack_x2(as_lanes(b, w.lanes), as_lanes(a, w.lanes), dt_name))
            return f2
        if dt_name == "ue8m0x2":
            def ue8(x):
                x = np.asarray(x, np.float32).astype(np.float64)
                with np.errstate(divide="ignore", invalid="ignore"):
                    e = np.log2(np.abs(x))
                e = np.ceil(e) if rnd == "rp" else np.floor(e)
                code = np.clip(e + 127, 0, 254 if sat else 255)
                return np.where(np.isnan(x), 255, np.where(x == 0, 0, code)).astype(np.uint32)

            def fu(w):
                a, b = as_lanes(ra(w), w.lanes), as_lanes(rb(w), w.lanes)
                return wr(w, ((ue8(a) << 8) | ue8(b)).astype(np.uint16))
            return fu
        fmt = dt_name[:-2]
        nbits = 4 if fmt == "e2m1" else 8

        def fx(w):
            a, b = as_lanes(ra(w), w.lanes), as_lanes(rb(w), w.lanes)
            if relu:
                a, b = np.maximum(a, 0), np.maximum(b, 0)
            ca, cb = nx.encode(a, fmt, satfinite=sat), nx.encode(b, fmt, satfinite=sat)
            if fmt in ("e2m3", "e3m2"):
                ca, cb = ca & 0x3F, cb & 0x3F
            return wr(w, ((ca << nbits) | cb).astype(np.uint16 if nbits == 8 else np.uint8))
        return fx
    # two narrow elements -> f16x2 / bf16x2 (cvt.rn.f16x2.e4m3x2 d, a): lower element -> lower half
    if dt_name in ("f16x2", "bf16x2") and st_name in ("e4m3x2", "e5m2x2", "e2m1x2", "e2m3x2", "e3m2x2", "ue8m0x2"):
        fmt = st_name[:-2]
        nbits = 4 if fmt == "e2m1" else 8
        ra = prog.src(ops[1], U32, ins)

        def fw(w):
            v = as_lanes(np.asarray(ra(w)).astype(np.uint32), w.lanes)
            lo, hi = v & ((1 << nbits) - 1), (v >> nbits) & ((1 << nbits) - 1)
            tab = "ue8m0" if fmt == "ue8m0" else fmt
            return wr(w, _pack_x2(nx.decode(lo, tab), nx.decode(hi, tab), dt_name))
        return fw
    if dt_name in ("f16x2", "bf16x2") or st_name in ("f16x2", "bf16x2"):
        _unsupported(ins)

    sdt, ddt = _dt(st_name), _dt(dt_name)
    rd = prog.src(ops[1], sdt if st_name not in ("bf16",) else np.dtype(np.uint16), ins)
    s_float = st_name in ("f16", "bf16", "f32", "f64")
    d_float = dt_name in ("f16", "bf16", "f32", "f64", "tf32")
    if dt_name == "tf32":  # cvt.rna.tf32.f32: round the mantissa to 10 bits (ties away), kept in f32 bits
        def ftf(w):
            b = np.asarray(rd(w), np.float32).view(np.uint32).astype(np.uint64)
            r = ((b + 0x1000) & 0xFFFFE000).astype(np.uint32)
            return wr(w, r)
        return ftf
    if s_float and d_float:
        def ff(w):
            x = _to_f32(rd(w), st_name)
            if sat:
                x = np.clip(x, 0.0, 1.0)
            if rnd in ("rni", "rzi", "rmi", "rpi"):
                x = _round_float(x, rnd)
            return wr(w, _from_f32(x, dt_name, rnd))
        return ff
    if s_float and not d_float:
        lo, hi = _INT_RANGES[dt_name]

        def fi(w):
            x = _round_float(_to_f32(rd(w), st_name), rnd)
            x = np.where(np.isnan(x), 0, np.clip(x, lo, hi))
            return wr(w, x.astype(np.float64).astype(np.int64 if dt_name[0] == "s" else np.uint64).astype(ddt))
        return fi
    if not s_float and d_float:
        def i_f(w):
            x = np.asarray(rd(w)).astype(np.float64)
            return wr(w, _from_f32(x, dt_name, rnd))
        return i_f

    # int -> int: truncate to the source width (registers may be wider), then extend to the destination
    def ii(w):
        v = np.asarray(rd(w))
        if sat:
            lo, hi = _INT_RANGES[dt_name]
            v = np.clip(v.astype(np.int64) if v.dtype.kind == "i" else v.astype(np.uint64), lo, hi)
        return wr(w, v.astype(ddt))
    return ii


# --- dispatcher -----------------------------------------------------------------------------------------
def _binary(ins: Instruction, prog: Program, fn: Callable, dt: np.dtype) -> Callable:
    ops = ins.operands
    wr = prog.dst(ops[0], ins)
    ra, rb = prog.src(ops[1], dt, ins), prog.src(ops[2], dt, ins)

    def f(w):
        return wr(w, fn(ra(w), rb(w)))
    return f


def _mov(ins: Instruction, prog: Program) -> Callable:
    ops = ins.operands
    t = _t(ins)
    src_op = ops[1]
    if ops[0].kind == "vec":  # mov.b64 {%r1, %r2}, %rd1
        rd = prog.src(src_op, _dt(t), ins)
        wr = prog.dst(ops[0], ins)
        return lambda w: wr(w, rd(w))
    dt = _dt(t)
    if src_op.kind == "sym":
        addr = prog.env.symbol_address(src_op.name, ins)
        wr = prog.dst(ops[0], ins)
        c = np.array([addr], dtype=np.uint64).astype(dt if dt.kind in "ui" else U64)
        return lambda w: wr(w, c[0])
    rd = prog.src(src_op, dt, ins)
    wr = prog.dst(ops[0], ins)
    return lambda w: wr(w, rd(w))


def _cvta(ins: Instruction, prog: Program) -> Callable:
    """Generic <-> state-space addresses are the same numbers in this emulator, except a 32-bit param-space
    address (`mov.b32 %r, kernel_param` then `cvta.param.u64`, how newer LLVM takes a tensor map's address):
    that is an offset into the param window, so its generic address is PARAM_BASE + offset."""
    rd = prog.src(ins.operands[1], _dt(_t(ins)), ins)
    wr = prog.dst(ins.operands[0], ins)
    if "param" in ins.modifiers and "to" not in ins.modifiers:
        def param_to_generic(w):
            a = np.asarray(rd(w)).astype(U64)
            return wr(w, np.where(a < _PARAM_WINDOW, a + np.uint64(PARAM_BASE), a))
        return param_to_generic
    return lambda w: wr(w, rd(w))




_F32X2 = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.fmin, "max": np.fmax,
          "neg": np.negative, "abs": np.abs}


def _f32x2(ins: Instruction, prog: Program) -> Callable:
    """Packed f32 pairs in one b64 register (`add/sub/mul/fma/min/max/neg/abs.f32x2`, what sm_100a epilogues
    emit): each half is an independent f32 operation (low half = element 0). fma rounds once from the exact
    float64 product."""
    op = ins.opcode
    if op not in _F32X2 and op not in ("fma", "mad"):
        _unsupported(ins)
    wr = prog.dst(ins.operands[0], ins)
    rds = [prog.src(o, U64, ins) for o in ins.operands[1:]]

    def pairs(w) -> list:
        return [np.ascontiguousarray(as_lanes(r(w), w.lanes)).view(F32).reshape(-1, 2) for r in rds]

    if op in ("fma", "mad"):
        def f(w):
            a, b, c = pairs(w)
            return wr(w, _fma(a, b, c, F32).reshape(-1).view(U64))
        return f
    fn = _F32X2[op]
    if op in ("min", "max") and "NaN" in ins.modifiers:
        fn = np.minimum if op == "min" else np.maximum

    def g(w):
        return wr(w, np.ascontiguousarray(fn(*pairs(w)).astype(F32)).reshape(-1).view(U64))
    return g


@dataclass(frozen=True)
class _Arith:
    """What every arithmetic handler reads off its instruction: opcode, modifiers, operands, the (last) type, its
    numpy dtype, whether it is a float type, and the destination writer."""

    op: str
    mods: tuple
    ops: tuple
    t: str
    dt: np.dtype
    is_float: bool
    wr: Optional[Callable]


def _arith_handler(fn: Callable) -> Callable:
    """A handler from `fn(ins, prog, a: _Arith)`; the packed `.f32x2` forms go to `_f32x2` first."""
    def handler(ins: Instruction, prog: Program) -> Callable:
        t = _t(ins)
        if t == "f32x2":
            return _f32x2(ins, prog)
        ops = ins.operands
        wr = prog.dst(ops[0], ins) if ops and ops[0].kind != "pair" else None
        a = _Arith(ins.opcode, ins.modifiers, ops, t, _dt(t), t in ("f16", "bf16", "f32", "f64", "f16x2", "bf16x2"),
                   wr)
        return fn(ins, prog, a)
    handler.__name__ = handler.__qualname__ = fn.__name__
    handler.__module__ = fn.__module__
    return handler


@_arith_handler
def _int_binary(ins: Instruction, prog: Program, a: _Arith) -> Callable:
    op, mods, t, dt = a.op, a.mods, a.t, a.dt
    if op == "mul" and "wide" in mods:
        wdt = _WIDE[t]
        return _binary(ins, prog, lambda a, b: np.asarray(a).astype(wdt) * np.asarray(b).astype(wdt), dt)
    if op == "mul" and "hi" in mods:
        if dt.itemsize == 8:
            def mulhi64(a, b):
                a, b = lane_arrays(a, b)
                return np.array([((int(x) * int(y)) >> 64) & (2 ** 64 - 1) for x, y in zip(a, b)],
                                dtype=np.uint64).view(dt)
            return _binary(ins, prog, mulhi64, dt)
        wdt = np.dtype(np.int64) if dt.kind == "i" else U64
        bits = 8 * dt.itemsize
        return _binary(ins, prog, lambda a, b: ((np.asarray(a).astype(wdt) * np.asarray(b).astype(wdt))
                                                >> bits).astype(dt), dt)
    if op == "and" and t == "pred":
        return _binary(ins, prog, np.logical_and, dt)
    if op == "or" and t == "pred":
        return _binary(ins, prog, np.logical_or, dt)
    if op == "xor" and t == "pred":
        return _binary(ins, prog, np.logical_xor, dt)
    if op in ("div", "rem"):
        def idiv(a, b):
            a, b = lane_arrays(a, b)
            safe = np.where(b == 0, 1, b)
            if dt.kind == "i":
                q = np.trunc(a.astype(np.float64) / safe).astype(np.int64) if dt.itemsize < 8 else \
                    np.array([int(x / y) if y else -1 for x, y in zip(a.tolist(), safe.tolist())])
                q = np.where(b == 0, -1, q)
                return (q.astype(dt) if op == "div" else (a - q.astype(dt) * safe).astype(dt))
            q = a // safe
            return np.where(b == 0, np.iinfo(dt).max, q).astype(dt) if op == "div" else (a % safe).astype(dt)
        return _binary(ins, prog, idiv, dt)
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum, "max": np.maximum,
          "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
    if op in ("add", "sub") and "sat" in mods and t == "s32":
        return _binary(ins, prog, lambda a, b: np.clip(fn(np.asarray(a, np.int64), b), -2 ** 31, 2 ** 31 - 1)
                       .astype(dt), dt)
    return _binary(ins, prog, lambda a, b: fn(a, b).astype(dt, copy=False), dt)


@_arith_handler
def _float_binary(ins: Instruction, prog: Program, a: _Arith) -> Callable:
    op, mods, t, dt = a.op, a.mods, a.t, a.dt
    cdt = F32 if t in ("f16", "bf16", "f16x2", "bf16x2") else dt
    if t == "f16":
        cdt = np.dtype(np.float16)
    base = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.fmin, "max": np.fmax,
            "div": np.errstate(divide="ignore", invalid="ignore")(np.divide),  # x/0 is +-inf/NaN in PTX too
            "copysign": lambda a, b: np.copysign(b, a)}[op]
    if op in ("min", "max") and "NaN" in mods:
        base = np.minimum if op == "min" else np.maximum
    if t in ("f32", "f64"):  # operands already arrive as `cdt` (arrays or scalars)
        fn = lambda a, b: base(a, b).astype(cdt, copy=False)  # noqa: E731
    else:
        fn = _float_op(t, lambda a, b: base(np.asarray(a, cdt), np.asarray(b, cdt)).astype(cdt))
    rdt = dt if t not in ("bf16",) else np.dtype(np.uint16)
    return _binary(ins, prog, fn, rdt)


@_arith_handler
def _mad_fma(ins: Instruction, prog: Program, a: _Arith) -> Callable:
    mods, ops, t, dt, is_float, wr = a.mods, a.ops, a.t, a.dt, a.is_float, a.wr
    ra, rb, rc = (prog.src(o, dt if t != "bf16" else np.dtype(np.uint16), ins) for o in ops[1:4])
    if t == "f64":  # the same arithmetic as _fma, without its per-call dispatch
        return lambda w: wr(w, ra(w) * rb(w) + rc(w))
    if t == "f32":
        return lambda w: wr(w, (ra(w).astype(F64) * rb(w) + rc(w)).astype(F32))
    if is_float:
        fdt = np.dtype(np.float16) if t == "f16" else F32  # f16 operands arrive and leave as f16 values
        fn = _float_op(t, lambda a, b, c: _fma(a, b, c, fdt))
        return lambda w: wr(w, fn(ra(w), rb(w), rc(w)))
    if "wide" in mods:
        wdt = _WIDE[t]
        rc = prog.src(ops[3], wdt, ins)
        return lambda w: wr(w, np.asarray(ra(w)).astype(wdt) * np.asarray(rb(w)).astype(wdt) + rc(w))
    if "hi" in mods:
        wdt = np.dtype(np.int64) if dt.kind == "i" else U64
        return lambda w: wr(w, (((np.asarray(ra(w)).astype(wdt) * np.asarray(rb(w)).astype(wdt))
                                 >> (8 * dt.itemsize)).astype(dt) + rc(w)).astype(dt))
    return lambda w: wr(w, (np.asarray(ra(w)) * rb(w) + rc(w)).astype(dt))


@_arith_handler
def _unary(ins: Instruction, prog: Program, a: _Arith) -> Callable:
    op, ops, t, dt, wr = a.op, a.ops, a.t, a.dt, a.wr
    ra = prog.src(ops[1], dt if t != "bf16" else np.dtype(np.uint16), ins)
    if op == "not":
        fn = np.logical_not if t == "pred" else np.invert
    elif op == "cnot":
        fn = lambda a: (np.asarray(a) == 0).astype(dt)  # noqa: E731
    elif op == "neg":
        fn = _float_op(t, lambda a: -np.asarray(a, F32)) if t in ("bf16", "f16x2", "bf16x2") else np.negative
    elif op == "abs":
        fn = _float_op(t, lambda a: np.abs(np.asarray(a, F32))) if t in ("bf16", "f16x2", "bf16x2") else np.abs
    elif op == "popc":
        fn = lambda a: np.array([bin(int(x)).count("1") for x in np.atleast_1d(a)],  # noqa: E731
                                dtype=np.uint32)
    elif op == "clz":
        bits = 8 * dt.itemsize
        fn = lambda a: np.array([bits - int(x).bit_length() for x in np.atleast_1d(a)],  # noqa: E731
                                dtype=np.uint32)
    elif op == "bfind":
        def fn(a):
            out = []
            for x in np.atleast_1d(a).tolist():
                if dt.kind == "i" and x < 0:
                    x = ~x
                out.append(0xFFFFFFFF if x == 0 else int(x).bit_length() - 1)
            return np.array(out, dtype=np.uint32)
    elif op == "brev":
        bits = 8 * dt.itemsize
        fn = lambda a: np.array([int(f"{int(x):0{bits}b}"[::-1], 2)  # noqa: E731
                                 for x in np.atleast_1d(a)], dtype=dt)
    else:
        cdt = F64 if t == "f64" else F32
        m = {"rcp": lambda a: 1.0 / a, "sqrt": np.sqrt, "rsqrt": lambda a: 1.0 / np.sqrt(a),
             "ex2": np.exp2, "lg2": np.log2, "sin": np.sin, "cos": np.cos, "tanh": np.tanh}[op]
        fn = _float_op(t, lambda a: m(np.asarray(a, cdt).astype(np.float64)).astype(cdt))
    return lambda w: wr(w, fn(ra(w)))


@_arith_handler
def _shift(ins: Instruction, prog: Program, a: _Arith) -> Callable:
    op, ops, dt, wr = a.op, a.ops, a.dt, a.wr
    ra = prog.src(ops[1], dt, ins)
    rb = prog.src(ops[2], U32, ins)
    fn = _shl if op == "shl" else _shr
    return lambda w: wr(w, fn(ra(w), rb(w), dt))


@_arith_handler
def _funnel_shift(ins: Instruction, prog: Program, a: _Arith) -> Callable:
    """Funnel shift: shf.l/r.{wrap,clamp}.b32 d, a, b, c  ({b:a} 64-bit)."""
    mods, ops, wr = a.mods, a.ops, a.wr
    left = "l" in mods
    clamp = "clamp" in mods
    ra, rb, rc = prog.src(ops[1], U32, ins), prog.src(ops[2], U32, ins), prog.src(ops[3], U32, ins)

    def shf(w):
        v = np.asarray(ra(w)).astype(U64) | (np.asarray(rb(w)).astype(U64) << np.uint64(32))
        n = np.asarray(rc(w)).astype(U64)
        n = np.minimum(n, 32) if clamp else n & np.uint64(31)
        r = ((v << n) >> np.uint64(32)) if left else (v >> n)
        return wr(w, (r & np.uint64(0xFFFFFFFF)).astype(np.uint32))
    return shf


@_arith_handler
def _selp(ins: Instruction, prog: Program, a: _Arith) -> Callable:
    ops, dt, wr = a.ops, a.dt, a.wr
    ra, rb = prog.src(ops[1], dt, ins), prog.src(ops[2], dt, ins)
    rc = prog.src(ops[3], np.dtype(bool), ins)
    return lambda w: wr(w, np.where(rc(w), ra(w), rb(w)).astype(dt))


@_arith_handler
def _compare_op(ins: Instruction, prog: Program, a: _Arith) -> Callable:
    op, mods, ops, t, dt, is_float = a.op, a.mods, a.ops, a.t, a.dt, a.is_float
    cmp = mods[0]
    boolop = next((m for m in mods[1:] if m in ("and", "or", "xor")), None)
    ra = prog.src(ops[1], dt, ins)
    rb = prog.src(ops[2], dt, ins)
    rc = prog.src(ops[3], np.dtype(bool), ins) if boolop else None
    conv = (lambda v: _half_to_f32(v, t)) if t in ("f16", "bf16") else (lambda v: v)
    comb = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(boolop or "")
    dest = ops[0]
    if dest.kind == "pair":
        wp, wq = prog.dst(dest.items[0], ins), prog.dst(dest.items[1], ins)
    else:
        wp, wq = prog.dst(dest, ins), None
    if op == "set":
        out_dt = _dt(ins.types[0])
        fl = ins.types[0] == "f32"

    def setp(w):
        r = _compare(cmp, conv(ra(w)), conv(rb(w)), is_float)
        r = as_lanes(r, w.lanes)
        if comb is not None:
            c = rc(w)
            res, q = comb(r, c), comb(~r, c)
        else:
            res, q = r, ~r
        if op == "set":
            val = np.where(res, np.float32(1.0), np.float32(0.0)) if fl else np.where(res, 0xFFFFFFFF, 0)
            return wp(w, np.asarray(val).astype(out_dt))
        wp(w, res)
        if wq is not None:
            wq(w, q)
    return setp


@_arith_handler
def _bfe_op(ins: Instruction, prog: Program, a: _Arith) -> Callable:
    ops, dt, wr = a.ops, a.dt, a.wr
    ra = prog.src(ops[1], dt, ins)
    rb, rc = prog.src(ops[2], U32, ins), prog.src(ops[3], U32, ins)
    return lambda w: wr(w, _bfe(ra(w), rb(w), rc(w), dt))


@_arith_handler
def _bfi_op(ins: Instruction, prog: Program, a: _Arith) -> Callable:
    ops, dt, wr = a.ops, a.dt, a.wr
    ra, rb = prog.src(ops[1], dt, ins), prog.src(ops[2], dt, ins)
    rc, rd = prog.src(ops[3], U32, ins), prog.src(ops[4], U32, ins)
    return lambda w: wr(w, _bfi(ra(w), rb(w), rc(w), rd(w), dt))


@_arith_handler
def _prmt_op(ins: Instruction, prog: Program, a: _Arith) -> Callable:
    mods, ops, wr = a.mods, a.ops, a.wr
    mode = next((m for m in mods if m in ("f4e", "b4e", "rc8", "ecl", "ecr", "rc16")), None)
    ra, rb, rc = (prog.src(o, U32, ins) for o in ops[1:4])
    return lambda w: wr(w, _prmt(ra(w), rb(w), rc(w), mode))


@_arith_handler
def _lop3(ins: Instruction, prog: Program, a: _Arith) -> Callable:
    ops, wr = a.ops, a.wr
    ra, rb, rc = (prog.src(o, U32, ins) for o in ops[1:4])
    lut = int(ops[4].value)  # type: ignore[arg-type]

    def lop3(w):
        a, b, c = (as_lanes(np.asarray(r(w), np.uint32), w.lanes) for r in (ra, rb, rc))
        out = np.zeros(len(a), dtype=np.uint32)
        for i in range(8):
            if lut >> i & 1:
                ta = a if i & 4 else ~a
                tb = b if i & 2 else ~b
                tc = c if i & 1 else ~c
                out |= ta & tb & tc
        return wr(w, out)
    return lop3


@_arith_handler
def _testp(ins: Instruction, prog: Program, a: _Arith) -> Callable:
    mods, ops, dt, wr = a.mods, a.ops, a.dt, a.wr
    kind = mods[0]
    ra = prog.src(ops[1], dt, ins)
    fn = {"finite": np.isfinite, "infinite": np.isinf, "number": lambda a: ~np.isnan(a), "notanumber": np.isnan,
          "normal": lambda a: np.isfinite(a) & (np.abs(a) >= np.finfo(dt).tiny),
          "subnormal": lambda a: (np.abs(a) < np.finfo(dt).tiny) & (a != 0)}[kind]
    return lambda w: wr(w, fn(np.asarray(ra(w))))


_INT_BINARY = ("add", "sub", "mul", "min", "max", "div", "rem", "and", "or", "xor", "copysign")
_FLOAT_BINARY = ("add", "sub", "mul", "min", "max", "div", "copysign")


def _binary_op(ins: Instruction, prog: Program) -> Optional[Callable]:
    """Two-operand arithmetic: the integer/predicate or the float form, by the instruction's type."""
    t = _t(ins)
    if t == "f32x2":
        return _f32x2(ins, prog)
    is_float = t in ("f16", "bf16", "f32", "f64", "f16x2", "bf16x2")
    if not is_float and ins.opcode in _INT_BINARY:
        return _int_binary(ins, prog)
    if is_float and ins.opcode in _FLOAT_BINARY:
        return _float_binary(ins, prog)
    _unsupported(ins)
    return None


def _not_emulated(ins: Instruction, prog: Program) -> None:
    _unsupported(ins)


#: opcode -> instruction compiler (rows of the ISA table, isa/table.py)
HANDLERS: dict[str, Callable] = {
    "mov": _mov, "cvt": _cvt, "cvta": _cvta,
    **{op: _binary_op for op in _INT_BINARY},
    "mad": _mad_fma, "fma": _mad_fma,
    **{op: _unary for op in ("neg", "abs", "not", "cnot", "popc", "clz", "brev", "rcp", "sqrt", "rsqrt", "ex2",
                             "lg2", "sin", "cos", "tanh", "bfind")},
    "shl": _shift, "shr": _shift, "shf": _funnel_shift, "selp": _selp, "setp": _compare_op, "set": _compare_op,
    "bfe": _bfe_op, "bfi": _bfi_op, "prmt": _prmt_op, "lop3": _lop3, "testp": _testp,
    # decoded by the parser, named here so the error says this emulator has no semantics for them
    **{op: _not_emulated for op in ("mul24", "mad24", "sad", "fns", "dp4a", "dp2a")},
}
