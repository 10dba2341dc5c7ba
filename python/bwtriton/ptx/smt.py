"""Satisfiability of branch facts over value-numbered PTX values (z3 bit-vectors).

The path checks learn facts on branch edges, e.g. "K + 63 < 64" (the guard that skips the pipeline prologue) and
"max(cdiv(K, 64), 1) - 1 != 0" (the loop ran at least once). Each fact is a canonical comparison of two
`ValueKey`s (`bwtriton.ptx.values.ValueNumbering`). Two facts over differently computed values can contradict
each other only through arithmetic, which key equality cannot see; `Facts.feasible` asks z3 whether the
conjunction has a model, so a path whose facts contradict is dropped.

The translation over-approximates: an operation it does not model (bfe, prmt, popc, ...) becomes a fresh
variable named by its key, so the same value is still the same variable, and a model of the translated
constraints may not be a real execution, but an unsat answer is always right. Without z3 installed every
conjunction is reported as feasible (no pruning beyond equal keys).
"""
from __future__ import annotations

from typing import Iterable, Optional

try:  # z3-solver is a dependency; the verifier still runs (less precisely) without it
    import z3
except ImportError:  # pragma: no cover - exercised only where z3-solver is missing
    z3 = None

ValueKey = tuple
Fact = tuple  # (predicate key, bool)

_TIMEOUT_MS = 1000   # wall-clock: generous, so that results do not depend on the machine's load
#: Assumption: 32-bit kernel arguments, loaded sizes and special registers lie in [-2^30, 2^30), so index
#: arithmetic such as `K - 64` does not wrap. Triton's own index computations assume the same (LLVM `nsw`);
#: without it, "K < 1 and K - 64 >= 1" would be satisfiable by K = INT_MIN and every peeled loop would look
#: unsafe. Documented in docs/verifier.md ("Assumptions").
_SIZE_BOUND = 1 << 30
_SIZE_LEAVES = ("ld.param", "var", "sreg")


def _width_of(types: tuple, index: int = 0) -> Optional[int]:
    if len(types) <= index:
        return None
    t = types[index]
    digits = t.lstrip("bsuf")
    return int(digits) if digits.isdigit() and t[:1] in "bsu" else None


def _fit(e, w: int):
    """Resize bit-vector `e` to `w` bits (zero-extend or truncate)."""
    have = e.size()
    if have == w:
        return e
    return z3.ZeroExt(w - have, e) if have < w else z3.Extract(w - 1, 0, e)


class _Translator:
    """ValueKey -> z3 term. Unmodelled operations are fresh variables named by their key."""

    def __init__(self, ntid: int = 1024) -> None:
        self.names: dict[tuple, object] = {}
        self.sizes: list = []   # 32-bit parameter / loaded / special-register leaves
        self.ntid = ntid        # threads per CTA (.reqntid / .maxntid): %tid.x < ntid
        self.lanes: list = []   # elect.sync leaders: lane numbers, < 32

    def fresh(self, key: ValueKey, w: int):
        name = (repr(key), w)
        if name not in self.names:
            self.names[name] = z3.BitVec(f"v{len(self.names)}", w)
            if w == 32 and key[0] in _SIZE_LEAVES:
                self.sizes.append(self.names[name])
        return self.names[name]

    def size_bounds(self) -> list:
        """The no-overflow assumption on 32-bit integer leaves (see `_SIZE_BOUND`), with the thread facts."""
        return [z3.And(v >= -_SIZE_BOUND, v < _SIZE_BOUND) for v in self.sizes] + self.thread_bounds()

    def thread_bounds(self) -> list:
        """Facts of the launch, not assumptions: %tid.x < ntid, an elected lane is a lane (< 32)."""
        out = [z3.ULT(v, 32) for v in self.lanes]
        tid = self.names.get((repr(("sreg", "%tid.x")), 32))
        if tid is not None:
            out.append(z3.ULT(tid, self.ntid))
        return out

    def bool_of(self, key: ValueKey):
        """A z3 Bool for a predicate-valued key: setp, constants, and/or/xor/not of predicates, elect.sync's
        predicate (this lane is the leader the mask elects); anything else a fresh Bool."""
        if key and key[0] == "setp" and len(key) == 5:
            return self.compare(key[1], key[2], key[3], key[4])
        if key and key[0] == "imm" and isinstance(key[1], int):
            return z3.BoolVal(key[1] != 0)
        if key and key[0] == "elect.pred" and len(key) == 2:
            return self.term(("sreg", "%laneid"), 32) == self.term(("elect.leader", key[1]), 32)
        if key and key[0] in ("and", "or", "xor", "not") and len(key) >= 4 and key[2] == ("pred",):
            xs = [self.bool_of(k) for k in key[3:]]
            if key[0] == "not" and len(xs) == 1:
                return z3.Not(xs[0])
            if len(xs) == 2:
                return {"and": z3.And, "or": z3.Or, "xor": z3.Xor}[key[0]](*xs)
        name = (repr(key), "bool")
        if name not in self.names:
            self.names[name] = z3.Bool(f"b{len(self.names)}")
        return self.names[name]

    def compare(self, mods: tuple, types: tuple, ka: ValueKey, kb: ValueKey):
        w = _width_of(types) or 32
        a, b = self.term(ka, w), self.term(kb, w)
        unsigned = types[0][:1] != "s" or bool(set(mods) & {"lo", "ls", "hi", "hs"})
        rel = mods[0] if mods else "eq"
        rel = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}.get(rel, rel)
        if rel == "eq":
            return a == b
        if rel == "ne":
            return a != b
        ops = {"lt": (z3.ULT, lambda x, y: x < y), "le": (z3.ULE, lambda x, y: x <= y),
               "gt": (z3.UGT, lambda x, y: x > y), "ge": (z3.UGE, lambda x, y: x >= y)}
        if rel not in ops:
            return self.bool_of(("setp", mods, types, ka, kb, "opaque"))
        return ops[rel][0 if unsigned else 1](a, b)

    def tid(self):
        """The thread index %tid.x (the variable facts about %tid.x use as well)."""
        return self.fresh(("sreg", "%tid.x"), 32)

    def term(self, key: ValueKey, w: int):
        """The value of `key` as a `w`-bit vector."""
        kind = key[0]
        if kind == "warp.of.tid" or key == ("sreg", "%warpid"):  # %warpid, modelled as %tid.x / 32 (1-D CTAs)
            return _fit(z3.LShR(self.tid(), 5), w)
        if key == ("sreg", "%laneid"):  # 1-D CTAs: warps are consecutive runs of 32 thread ids
            return _fit(self.tid() & 31, w)
        if kind == "elect.leader" and len(key) == 2:
            # the lane elect.sync picks: PTX "the same leader thread is chosen for the same membermask"
            v = self.fresh(key, 32)
            if all(v is not x for x in self.lanes):
                self.lanes.append(v)
            return _fit(v, w)
        if kind == "shfl.lane0" and len(key) == 2:  # shfl.sync.idx(x, 0): lane 0's value of x in this warp
            if not thread_arith(key[1]):
                return self.fresh(key, w)   # an unmodelled piece of x would be shared with this thread's x
            t = self.tid()
            return z3.substitute(self.term(key[1], w), (t, t & ~z3.BitVecVal(31, 32)))
        if kind == "imm":
            return z3.BitVecVal(key[1] & ((1 << w) - 1), w) if isinstance(key[1], int) else self.fresh(key, w)
        if kind in ("sreg", "sym", "ld.param") or len(key) < 3 or not isinstance(key[2], tuple):
            return self.fresh(key, w)
        op, mods, types, args = key[0], key[1], key[2], key[3:]
        nat = _width_of(types)
        if nat is None:
            return self.fresh(key, w)
        e = self._op(op, mods, types, args, nat, key)
        return _fit(e, w)

    def _op(self, op: str, mods: tuple, types: tuple, args: tuple, w: int, key: ValueKey):
        signed = types[0][:1] == "s"
        if op == "cvt" and len(types) == 2 and len(args) == 1:
            sw = _width_of(types, 1)
            if sw is None:
                return self.fresh(key, w)
            src = self.term(args[0], sw)
            if sw >= w:
                return z3.Extract(w - 1, 0, src)
            return (z3.SignExt if types[1][:1] == "s" else z3.ZeroExt)(w - sw, src)
        if op == "selp" and len(args) == 3:
            return z3.If(self.bool_of(args[2]), self.term(args[0], w), self.term(args[1], w))
        if "wide" in mods and op in ("mul", "mad"):
            half = w  # the type names the source width; the result is twice as wide
            a, b = (self.term(k, half) for k in args[:2])
            ext = z3.SignExt if signed else z3.ZeroExt
            prod = ext(half, a) * ext(half, b)
            if op == "mad" and len(args) == 3:
                prod = prod + self.term(args[2], 2 * half)
            return prod
        if op in ("mul", "mad") and "hi" in mods:
            return self.fresh(key, w)
        xs = [self.term(k, w) for k in args]
        simple = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
                  "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
                  "shl": lambda a, b: a << b}
        if op in simple and len(xs) == 2:
            return simple[op](*xs)
        if op == "mad" and len(xs) == 3:
            return xs[0] * xs[1] + xs[2]
        if op == "shr" and len(xs) == 2:
            return xs[0] >> xs[1] if signed else z3.LShR(xs[0], xs[1])
        if op in ("min", "max") and len(xs) == 2:
            a, b = xs
            lt = (a < b) if signed else z3.ULT(a, b)
            return z3.If(lt, a, b) if op == "min" else z3.If(lt, b, a)
        if op == "not" and len(xs) == 1:
            return ~xs[0]
        if op == "neg" and len(xs) == 1:
            return -xs[0]
        return self.fresh(key, w)  # div/rem (undefined on 0), bfe, prmt, popc, ...: unmodelled

    def fact(self, key: ValueKey, value: bool):
        """z3 Bool of a canonical fact ("eq", w, a, b) / ("ge", sign, w, a, b) having truth `value`; None if the
        key is not a value comparison (register-keyed facts are left to equality)."""
        if key[0] == "eq" and len(key) == 4:
            w = key[1]
            e = self.term(key[2], w) == self.term(key[3], w)
        elif key[0] == "ge" and len(key) == 5:
            w = key[2]
            a, b = self.term(key[3], w), self.term(key[4], w)
            e = z3.UGE(a, b) if key[1] == "u" else a >= b
        else:
            return None
        return e if value else z3.Not(e)


_SAMPLES = (0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 191, 192, 193, 255, 256,
            257, 511, 512, 1000, 1024, 4096, 8192, 65536, -1, -2, -64, -1000)


class _Sampler:
    """Concrete evaluation of keys under random leaf values, with the translator's semantics (an unmodelled op
    is a free value). A satisfying sample proves the translated conjunction satisfiable without calling z3."""

    def __init__(self, rng, ntid: int = 1024) -> None:
        self.rng = rng
        self.ntid = ntid
        self.env: dict = {}

    def free(self, key, w: int) -> int:
        name = (repr(key), w)
        if name not in self.env:
            if key == ("sreg", "%tid.x"):      # a thread of the launch
                v = self.rng.choice([x for x in _SAMPLES if 0 <= x < self.ntid] or [0])
            elif key[0] == "elect.leader":     # a lane
                v = self.rng.randrange(32)
            else:
                v = self.rng.choice(_SAMPLES)
            self.env[name] = v & ((1 << w) - 1)
        return self.env[name]

    @staticmethod
    def _signed(x: int, w: int) -> int:
        return x - (1 << w) if x >> (w - 1) & 1 else x

    def boolean(self, key) -> bool:
        if key and key[0] == "imm" and isinstance(key[1], int):
            return key[1] != 0
        if key and key[0] == "elect.pred" and len(key) == 2:
            return self.value(("sreg", "%laneid"), 32) == self.value(("elect.leader", key[1]), 32)
        if key and key[0] in ("and", "or", "xor", "not") and len(key) >= 4 and key[2] == ("pred",):
            xs = [self.boolean(k) for k in key[3:]]
            if key[0] == "not" and len(xs) == 1:
                return not xs[0]
            if len(xs) == 2:
                return {"and": xs[0] and xs[1], "or": xs[0] or xs[1], "xor": xs[0] != xs[1]}[key[0]]
        if key and key[0] == "setp" and len(key) == 5:
            mods, types, ka, kb = key[1], key[2], key[3], key[4]
            w = _width_of(types) or 32
            a, b = self.value(ka, w), self.value(kb, w)
            rel = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}.get(mods[0] if mods else "eq", mods[0] if mods else "eq")
            if types[0][:1] == "s" and not set(mods) & {"lo", "ls", "hi", "hs"}:
                a, b = self._signed(a, w), self._signed(b, w)
            ops = {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}
            if rel in ops:
                return ops[rel]
        return bool(self.free(("bool", key), 1))

    def value(self, key, w: int) -> int:
        mask = (1 << w) - 1
        kind = key[0]
        if kind == "imm":
            return key[1] & mask if isinstance(key[1], int) else self.free(key, w)
        if kind == "warp.of.tid" or key == ("sreg", "%warpid"):
            return (self.value(("sreg", "%tid.x"), 32) >> 5) & mask
        if key == ("sreg", "%laneid"):
            return self.value(("sreg", "%tid.x"), 32) & 31 & mask
        if kind == "shfl.lane0" and len(key) == 2 and thread_arith(key[1]):
            tid = (repr(("sreg", "%tid.x")), 32)
            own = self.value(("sreg", "%tid.x"), 32)
            self.env[tid] = own & ~31          # evaluate x in lane 0 of this thread's warp
            try:
                return self.value(key[1], w)
            finally:
                self.env[tid] = own
        if kind in ("sreg", "sym", "ld.param", "var", "shfl.lane0", "tmem.base", "elect.leader") or len(key) < 3 \
                or not isinstance(key[2], tuple):
            return self.free(key, w)
        op, mods, types, args = key[0], key[1], key[2], key[3:]
        nat = _width_of(types)
        if nat is None:
            return self.free(key, w)
        return self._op(op, mods, types, args, nat, key) & mask

    def _op(self, op, mods, types, args, w, key) -> int:
        m = (1 << w) - 1
        signed = types[0][:1] == "s"
        if op == "cvt" and len(types) == 2 and len(args) == 1:
            sw = _width_of(types, 1)
            if sw is None:
                return self.free(key, w)
            v = self.value(args[0], sw)
            return (self._signed(v, sw) if types[1][:1] == "s" else v) & m
        if op == "selp" and len(args) == 3:
            return self.value(args[0], w) if self.boolean(args[2]) else self.value(args[1], w)
        if "wide" in mods and op in ("mul", "mad"):
            a, b = (self.value(k, w) for k in args[:2])
            if signed:
                a, b = self._signed(a, w), self._signed(b, w)
            r = a * b + (self.value(args[2], 2 * w) if op == "mad" and len(args) == 3 else 0)
            return r & ((1 << (2 * w)) - 1)
        if op in ("mul", "mad") and "hi" in mods:
            return self.free(key, w)
        xs = [self.value(k, w) for k in args]
        if op in ("add", "sub", "mul", "and", "or", "xor", "shl") and len(xs) == 2:
            a, b = xs
            return {"add": a + b, "sub": a - b, "mul": a * b, "and": a & b, "or": a | b, "xor": a ^ b,
                    "shl": a << b if b < w else 0}[op] & m
        if op == "mad" and len(xs) == 3:
            return (xs[0] * xs[1] + xs[2]) & m
        if op == "shr" and len(xs) == 2:
            a, b = xs
            if signed:
                return (self._signed(a, w) >> min(b, w - 1)) & m
            return a >> b if b < w else 0
        if op in ("min", "max") and len(xs) == 2:
            a, b = (self._signed(x, w) for x in xs) if signed else xs
            r = min(a, b) if op == "min" else max(a, b)
            return r & m
        if op == "not" and len(xs) == 1:
            return ~xs[0] & m
        if op == "neg" and len(xs) == 1:
            return -xs[0] & m
        return self.free(key, w)

    def fact(self, key, value: bool) -> Optional[bool]:
        if key[0] == "eq" and len(key) == 4:
            w = key[1]
            return (self.value(key[2], w) == self.value(key[3], w)) == value
        if key[0] == "ge" and len(key) == 5:
            w = key[2]
            a, b = self.value(key[3], w), self.value(key[4], w)
            if key[1] == "s":
                a, b = self._signed(a, w), self._signed(b, w)
            return (a >= b) == value
        return None


def _sampled_model(facts: frozenset, tries: int = 48, ntid: int = 1024) -> bool:
    """Whether random leaf values satisfy every fact (then the conjunction is satisfiable)."""
    import random
    rng = random.Random(len(facts))
    for _ in range(tries):
        smp = _Sampler(rng, ntid)
        if all(smp.fact(k, v) is not False for k, v in facts):
            return True
    return False


def _fold(op: str, parts: list) -> Optional[bool]:
    """and/or/not of predicate truths, None for unknown operands, short-circuited where one operand decides."""
    if op == "not":
        return None if parts[0] is None else not parts[0]
    if op == "and":
        return False if False in parts else (True if all(p is True for p in parts) else None)
    return True if True in parts else (False if all(p is False for p in parts) else None)


def _takes_both_values(key: ValueKey, ntid: int, tries: int = 24) -> bool:
    """Whether random leaf values (the translator's semantics) give the predicate `key` both truth values: then it
    is not a constant, and z3 need not be asked."""
    import random
    rng = random.Random(hash(key) & 0xFFFF)
    seen = set()
    for _ in range(tries):
        seen.add(_Sampler(rng, ntid).boolean(key))
        if len(seen) == 2:
            return True
    return False


class Facts:
    """Feasibility oracle for conjunctions of canonical branch facts, cached per conjunction. `translator` is
    shared with checks that add their own constraints (`solve`)."""

    def __init__(self, ntid: int = 1024) -> None:
        self._cache: dict[frozenset, Optional[bool]] = {}
        self._const: dict[tuple, Optional[bool]] = {}
        self.ntid = ntid
        self._tr = _Translator(ntid) if z3 is not None else None
        self.calls = 0

    @property
    def translator(self) -> Optional[_Translator]:
        return self._tr

    def _solver(self, facts: Iterable[Fact], extra: list) -> "z3.Solver":
        """A z3 solver holding the value facts, the constraints `extra` and the size bounds."""
        solver = z3.Solver()
        solver.set("timeout", _TIMEOUT_MS)
        for key, val in facts:
            if isinstance(key, tuple) and key[:1] in (("eq",), ("ge",)):
                e = self._tr.fact(key, val)
                if e is not None:
                    solver.add(e)
        solver.add(*extra)
        solver.add(*self._tr.size_bounds())
        return solver

    def solve(self, facts: Iterable[Fact], extra: list) -> Optional[dict]:
        """A model (as {name: value}) of the value facts plus z3 constraints `extra`, or None when unsat or
        undecided. The caller builds `extra` with `translator`."""
        if self._tr is None:
            return None
        solver = self._solver(facts, extra)
        if solver.check() != z3.sat:
            return None
        m = solver.model()
        return {str(d): m[d].as_long() for d in m.decls() if z3.is_bv_value(m[d])}

    def unsat_with(self, facts: Iterable[Fact], extra: list) -> bool:
        """True only when z3 proves the value facts plus `extra` unsatisfiable (a timeout is not a proof)."""
        if self._tr is None:
            return False
        return self._solver(facts, extra).check() == z3.unsat

    def unsat(self, extra: list) -> bool:
        """True only when z3 proves the constraints `extra` (with the size assumptions) unsatisfiable; then no
        set of facts can make them satisfiable, which lets a caller skip the per-path queries."""
        if self._tr is None:
            return False
        solver = z3.Solver()
        solver.set("timeout", _TIMEOUT_MS)
        solver.add(*extra)
        solver.add(*self._tr.size_bounds())
        return solver.check() == z3.unsat

    def constant_truth(self, key: ValueKey) -> Optional[bool]:
        """True/False when the predicate-valued `key` has that value in every thread of every launch (z3 proves
        the other value impossible, from the launch facts only: no size assumption); None otherwise."""
        if key and key[0] == "imm" and isinstance(key[1], int):
            return key[1] != 0
        if self._tr is None or key in self._const:
            return self._const.get(key)
        if key[0] in ("and", "or", "not") and len(key) >= 4 and key[2] == ("pred",):
            parts = [self.constant_truth(k) for k in key[3:]]   # and/or/not fold on constant operands
            verdict = _fold(key[0], parts)
            if verdict is not None or None not in parts:
                self._const[key] = verdict
                return verdict
        # launch-invariant values (parameters, loads, symbols) are not constants a compiler left behind; only
        # thread-index predicates are worth a proof
        if not _leaves_of(key) <= _CONSTANT_CANDIDATE_LEAVES or _takes_both_values(key, self.ntid):
            self._const[key] = None
            return None
        verdict = None
        try:
            e = self._tr.bool_of(key)
            for value in (True, False):
                solver = z3.Solver()
                solver.set("timeout", _TIMEOUT_MS)
                solver.add(e if not value else z3.Not(e))
                solver.add(*self._tr.thread_bounds())
                if solver.check() == z3.unsat:
                    verdict = value
                    break
        except z3.Z3Exception:
            verdict = None
        self._const[key] = verdict
        return verdict

    def feasible(self, facts: Iterable[Fact], new: Optional[Iterable[Fact]] = None) -> Optional[bool]:
        """False when the value facts provably contradict each other (z3 unsat), True when z3 finds a model of
        the translation (or there is nothing to relate), None when the solver gave up (timeout). With `new`
        (the facts just added to an already feasible set) only the facts sharing leaves with them are sent."""
        value_facts = frozenset(f for f in facts if isinstance(f[0], tuple) and f[0][:1] in (("eq",), ("ge",)))
        if not value_facts or self._tr is None:
            return True
        if new is not None:
            value_facts = _connected(value_facts, new)
        if value_facts in self._cache:
            return self._cache[value_facts]
        if _sampled_model(value_facts, ntid=self.ntid):
            self._cache[value_facts] = True
            return True
        self.calls += 1
        solver = z3.Solver()
        solver.set("timeout", _TIMEOUT_MS)
        try:
            for key, val in value_facts:
                e = self._tr.fact(key, val)
                if e is not None:
                    solver.add(e)
            solver.add(*self._tr.size_bounds())
            answer = solver.check()
            verdict = False if answer == z3.unsat else True if answer == z3.sat else None
        except z3.Z3Exception:
            verdict = None  # a translation the solver rejects proves nothing
        self._cache[value_facts] = verdict
        return verdict


#: thread-index leaves: one variable in the translation (%tid.x), so facts about any of them are related
_THREAD_LEAVES = frozenset((("sreg", "%laneid"), ("sreg", "%warpid"), ("warp.of.tid",)))


def thread_arith(key) -> bool:
    """Whether `key` is integer arithmetic the translator models exactly, over constants, parameters, symbols
    and %tid.x (so that substituting another thread's %tid.x gives that thread's value)."""
    if not isinstance(key, tuple) or not key:
        return False
    if key[0] in ("imm", "ld.param", "sym") or key == ("sreg", "%tid.x") or key in _THREAD_LEAVES:
        return True
    if key[0] in ("add", "sub", "mul", "shl", "shr", "and", "or", "xor", "cvt") and len(key) >= 4 \
            and isinstance(key[2], tuple) and "hi" not in key[1]:
        return all(thread_arith(k) for k in key[3:])
    return False


def _leaves(key, out: set) -> set:
    """Leaf values (parameters, special registers, symbols) a key depends on."""
    if isinstance(key, tuple) and key:
        if key in _THREAD_LEAVES:
            out.add(("sreg", "%tid.x"))
        elif key[0] in ("ld.param", "sreg", "sym", "tmem.base", "warp.of.tid", "var", "elect.leader"):
            out.add(key)
        else:
            for k in key:
                _leaves(k, out)
    return out


_LEAVES: dict = {}
_CONSTANT_CANDIDATE_LEAVES = frozenset((("sreg", "%tid.x"),))


def _leaves_of(key) -> frozenset:
    if key not in _LEAVES:
        _LEAVES[key] = frozenset(_leaves(key, set()))
    return _LEAVES[key]


def _connected(facts: frozenset, new: Iterable[Fact]) -> frozenset:
    """The facts linked to `new` through shared leaves (the rest was satisfiable before and is independent)."""
    leaves = {f: _leaves_of(f[0]) for f in facts}
    picked = {f for f in new if f in leaves}
    reach = set().union(*(leaves[f] for f in picked)) if picked else set()
    changed = True
    while changed:
        changed = False
        for f, ls in leaves.items():
            if f not in picked and ls & reach:
                picked.add(f)
                reach |= ls
                changed = True
    return frozenset(picked)
