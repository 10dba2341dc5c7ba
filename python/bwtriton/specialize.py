"""How `bwtriton.compile` turns a `@triton.jit` function plus a signature into a Triton source, specialised the way
`@triton.jit` would specialise a launch: argument names and types checked first, and 16-byte divisibility
(``tt.divisibility = 16``) decided from example values when the caller gives them.

`@triton.jit` marks a pointer divisible when the tensor's address is a multiple of 16 (torch allocations are) and an
integer when its value is a multiple of 16. Offline there is no launch, so the values come from `example=`
(``--example M=200,N=512``), an explicit `divisible_by_16=[...]`, or, with neither, the assumption of aligned
shapes (every pointer and integer) which the compile summary states.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .errors import InputError, suggest

#: Signature types that `@triton.jit` specialises for 16-byte divisibility at launch.
DIVISIBLE_INT_TYPES = ("i32", "i64", "u32", "u64")
_TYPE_EXAMPLES = "'*fp16', '*bf16', '*fp32', '*fp8e4nv', '*u8', 'i32', 'i64', 'fp32', 'tensordesc<fp16[128,64]>'"
_TENSORDESC = re.compile(r"^tensordesc<\s*\w+\s*\[[\d\s,]+\]\s*(,.*)?>$")


@dataclass(frozen=True)
class Specialisation:
    """Which arguments were assumed 16-byte divisible, and from what (`example`, `explicit` or `assumed`)."""

    divisible: tuple[str, ...]
    source: str

    def describe(self) -> str:
        names = ", ".join(self.divisible) or "none"
        how = {"example": "from the example values", "explicit": "as given",
               "assumed": "assumed: aligned pointers and sizes; give example= / --example for your shapes"}
        return f"{names} ({how[self.source]})"


def check_type(kernel: str, arg: str, ty: Any) -> None:
    """Raise `InputError` unless `ty` is a Triton signature type Triton can parse (e.g. '*fp16', 'i32')."""
    if not isinstance(ty, str) or not ty:
        raise InputError(f"kernel {kernel}: the type of argument {arg!r} must be a string such as {_TYPE_EXAMPLES}; "
                         f"got {ty!r}")
    if ty == "constexpr" or ty.startswith("tensordesc"):
        if ty != "constexpr" and not _TENSORDESC.match(ty):
            raise InputError(f"kernel {kernel}: argument {arg!r} has type {ty!r}; a tensor descriptor type looks "
                             f"like 'tensordesc<fp16[128,64]>'")
        return
    import triton.language as tl
    try:
        tl.str_to_ty(ty, None)
    except Exception:  # KeyError/IndexError from Triton's parser: name the argument instead
        base = ty.lstrip("*")
        hint = " (a pointer type puts '*' first: '*fp16')" if ty.endswith("*") else \
            suggest(base, ("fp16", "bf16", "fp32", "fp64", "fp8e4nv", "fp8e5", "i1", "i8", "i16", "i32", "i64",
                           "u8", "u16", "u32", "u64"))
        raise InputError(f"kernel {kernel}: argument {arg!r} has unknown type {ty!r}.{hint} Valid types look like "
                         f"{_TYPE_EXAMPLES}.") from None


def _names(value: Any, what: str) -> list[str]:
    """A list of argument names from a list/tuple/set of strings (a bare string is a mistake worth naming)."""
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InputError(f"{what} takes a list of argument names, e.g. ['a_ptr', 'M']; got {value!r}")
    items = list(value)
    bad = [v for v in items if not isinstance(v, str)]
    if bad:
        raise InputError(f"{what} takes argument names (strings); got {bad!r}")
    return items


def divisible_args(kernel: str, sig: Mapping[str, str], divisible_by_16: Iterable[str] | None,
                   example: Mapping[str, Any] | None) -> Specialisation:
    """The arguments to mark ``tt.divisibility = 16``, checked against the signature."""
    specialisable = [n for n, t in sig.items() if t.startswith("*") or t in DIVISIBLE_INT_TYPES]
    ints = [n for n in specialisable if not sig[n].startswith("*")]
    if divisible_by_16 is not None and example is not None:
        raise InputError("give divisible_by_16= or example=, not both (example= derives the divisible arguments)")
    if divisible_by_16 is not None:
        names = _names(divisible_by_16, "divisible_by_16=")
        bad = [n for n in names if n not in specialisable]
        if bad:
            what = "is not a pointer or integer argument" if len(bad) == 1 else "are not pointer or integer arguments"
            raise InputError(f"kernel {kernel}: divisible_by_16 names {', '.join(map(repr, bad))}, which {what}; "
                             f"valid: {', '.join(specialisable) or 'none'}")
        return Specialisation(tuple(n for n in sig if n in names), "explicit")
    if example is None:
        return Specialisation(tuple(specialisable), "assumed")
    if not isinstance(example, Mapping):
        raise InputError(f"example= maps integer arguments to values, e.g. {{'M': 200, 'N': 512}}; got {example!r}")
    bad = [n for n in example if n not in ints]
    if bad:
        raise InputError(f"kernel {kernel}: example= names {', '.join(map(repr, bad))}; example values are for "
                         f"the integer arguments: {', '.join(ints) or 'none'}")
    values = {}
    for n, v in example.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise InputError(f"kernel {kernel}: example value of {n!r} must be an integer, got {v!r}")
        values[n] = v
    # Pointers: torch allocations are 16-byte aligned. Integers not given are unknown, so not assumed.
    chosen = [n for n in specialisable if sig[n].startswith("*") or (n in values and values[n] % 16 == 0)]
    return Specialisation(tuple(chosen), "example")


def _complete_signature(fn: Any, signature: Mapping[str, str], constexprs: dict[str, Any]) -> dict[str, str]:
    """The signature in the kernel's argument order, constexprs included, every name and type checked."""
    name = fn.__name__
    if not isinstance(signature, Mapping):
        raise InputError(f"signature= maps argument names to Triton types, e.g. {{'a_ptr': '*fp16', 'M': 'i32'}}; "
                         f"got a {type(signature).__name__} ({signature!r:.60})")
    if not isinstance(constexprs, Mapping):
        raise InputError(f"constexprs= maps constexpr argument names to values, e.g. {{'BLOCK_M': 128}}; "
                         f"got a {type(constexprs).__name__}")
    names = list(fn.arg_names)
    sig = dict(signature)
    unknown = [n for n in list(sig) + list(constexprs) if n not in names]
    if unknown:
        raise InputError(f"kernel {name} has no argument(s) {', '.join(unknown)}; "
                         f"its arguments are: {', '.join(names)}")
    for n, ty in sig.items():
        check_type(name, n, ty)
    for n in constexprs:
        sig.setdefault(n, "constexpr")
    for n in names:  # constexpr parameters with defaults may be left out
        if n not in sig:
            param = next(p for p in fn.params if p.name == n)
            if param.is_constexpr and param.has_default:
                sig[n] = "constexpr"
                constexprs[n] = param.default
    missing = [n for n in names if n not in sig]
    if missing:
        raise InputError(f"kernel {name}: no type for argument(s) {', '.join(missing)}; give them in "
                         f"signature= (e.g. '*fp16', 'i32') or constexprs=")
    bad_const = [n for n, t in sig.items() if t == "constexpr" and n not in constexprs]
    if bad_const:
        raise InputError(f"kernel {name}: constexpr argument(s) {', '.join(bad_const)} need values in "
                         f"constexprs=")
    return {n: sig[n] for n in names}  # Triton expects the kernel's argument order


def _is_gluon(fn: Any) -> bool:
    try:
        from triton.experimental.gluon._runtime import GluonJITFunction
    except ImportError:  # pragma: no cover - triton without gluon
        return False
    return isinstance(fn, GluonJITFunction)


def build_source(fn: Any, signature: Mapping[str, str], constexprs: Mapping[str, Any] | None,
                 divisible_by_16: Iterable[str] | None, example: Mapping[str, Any] | None = None):
    """(`ASTSource`/`GluonASTSource` with @jit-like specialisation, the `Specialisation` chosen)."""
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    if not isinstance(fn, JITFunction):
        raise InputError(f"{fn!r} is not a @triton.jit or @gluon.jit function; decorate it, or pass a "
                         f".ttir/.ttgir file path")
    constexprs = dict(constexprs or {}) if isinstance(constexprs, Mapping) or constexprs is None else constexprs
    sig = _complete_signature(fn, signature, constexprs)
    spec = divisible_args(fn.__name__, sig, divisible_by_16, example)
    names = list(sig)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in spec.divisible}
    if _is_gluon(fn):
        from triton.experimental.gluon._runtime import GluonASTSource
        return GluonASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs), spec
    return ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs), spec
