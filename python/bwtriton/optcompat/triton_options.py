"""Options of Triton's own passes, applied through Triton 3.6's Python adders or refused.

The wheel exposes each pass only as ``add_<pass>(pm, *args)``; some arguments are MLIR pass options
(``add_hoist_tmem_alloc(pm, hoist_out_of_if)`` sets ``hoist-out-of-if``). We learn which argument sets which
option by perturbing one argument at a time and reading the pass manager's pipeline string back, then, when a
user gives an option, we (1) route it to its argument, (2) refuse options no argument sets unless the value is
the pass's default, and (3) read the pipeline string back to check the option holds the value asked for. So an
option given is applied or is an error; it is never dropped.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from typing import Any

from ..errors import UnknownPassError, suggest
from ..triton_passes import CompileContext, triton_pass_table

_PIPE_RE = re.compile(r"^any\((?P<name>[\w.\-]+)(?:\{(?P<opts>.*)\})?\)$", re.S)


def printed_options(pipeline: str) -> dict[str, str]:
    """'any(p{a=1 b=x})' -> {'a': '1', 'b': 'x'} (values with nested braces are kept whole)."""
    m = _PIPE_RE.match(pipeline.strip())
    if not m or not m["opts"]:
        return {}
    return split_option_text(m["opts"])


def split_option_text(text: str) -> dict[str, str]:
    """MLIR pass option text 'a=1 b="x y" c={p q}' -> {'a': '1', 'b': 'x y', 'c': '{p q}'}."""
    out, i, n = {}, 0, len(text)
    while i < n:
        while i < n and text[i] in " ,":
            i += 1
        if i >= n:
            break
        j = i
        while j < n and text[j] not in "= ,":
            j += 1
        key = text[i:j]
        if j >= n or text[j] != "=":
            out[key] = "true"  # a bare flag option means true, as in MLIR
            i = j
            continue
        value, i = _read_value(text, j + 1)
        out[key] = value
    return out


def _read_value(text: str, i: int) -> tuple[str, int]:
    if i < len(text) and text[i] in "'\"":
        end = text.index(text[i], i + 1)
        return text[i + 1:end], end + 1
    depth, j = 0, i
    while j < len(text) and (depth or text[j] not in " ,"):
        depth += text[j] == "{"
        depth -= text[j] == "}"
        j += 1
    return text[i:j], j


def _pipeline_for(name: str, args: tuple) -> str:
    from triton._C.libtriton import ir
    _, fn, _ = triton_pass_table()[name]
    pm = ir.pass_manager(ir.context())
    fn(pm, *args)
    return pm.get_pipeline_str()


def _perturbed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value[:-1] + ("1" if value[-1:] != "1" else "2")
    raise TypeError(value)


@dataclass(frozen=True)
class TritonPassOptions:
    """What Triton 3.6's Python adder of one pass can set: option -> argument index, and printed defaults."""

    name: str
    adder: str
    defaults: dict
    arg_of: dict  # option name -> index into the adder's argument tuple


@functools.lru_cache(maxsize=None)
def pass_options(name: str) -> TritonPassOptions:
    """Learn which adder argument sets which MLIR option of Triton's pass `name`."""
    path, _, arg_factory = triton_pass_table()[name]
    base = arg_factory(CompileContext())
    defaults = printed_options(_pipeline_for(name, base))
    arg_of = {}
    for i, value in enumerate(base):
        changed = printed_options(_pipeline_for(name, base[:i] + (_perturbed(value),) + base[i + 1:]))
        for opt, text in changed.items():
            if defaults.get(opt) != text:
                arg_of[opt] = i
    return TritonPassOptions(name, path, defaults, arg_of)


def _convert(value: str, like: Any, where: str) -> Any:
    if isinstance(like, bool):
        low = value.lower()
        if low not in ("true", "false", "1", "0"):
            raise UnknownPassError(f"{where}: expected true or false, got {value!r}")
        return low in ("true", "1")
    if isinstance(like, int):
        try:
            return int(value)
        except ValueError:
            raise UnknownPassError(f"{where}: expected an integer, got {value!r}") from None
    return value


def _same(printed: str | None, wanted: str) -> bool:
    norm = {"1": "true", "0": "false"}
    return printed is not None and norm.get(printed.lower(), printed.lower()) == norm.get(wanted.lower(),
                                                                                           wanted.lower())


def adder_args(name: str, options: dict[str, str], context: CompileContext) -> tuple:
    """The adder arguments for Triton pass `name` with user `options` applied (errors for ones that cannot be)."""
    info = pass_options(name)
    args = list(triton_pass_table()[name][2](context))
    for opt, value in options.items():
        where = f"pass {name}: option {opt}"
        if opt in info.arg_of:
            args[info.arg_of[opt]] = _convert(value, args[info.arg_of[opt]], where)
        elif opt not in info.defaults:
            raise UnknownPassError(f"pass {name} has no option {opt!r}.{suggest(opt, info.defaults)} "
                                   f"Its options: {', '.join(info.defaults) or 'none'}.")
        elif not _same(info.defaults[opt], value):
            settable = ", ".join(info.arg_of) or "none"
            raise UnknownPassError(
                f"{where}={value} cannot be applied: Triton 3.6's Python binding {info.adder}() does not take "
                f"it (it sets: {settable}); only its default {opt}={info.defaults[opt]} is reachable from Python")
    return tuple(args)


def check_applied(name: str, options: dict[str, str], pipeline: str) -> None:
    """Fail unless the pass manager's pipeline string shows every user option with the value asked for."""
    printed = printed_options(pipeline)
    for opt, value in options.items():
        if not _same(printed.get(opt), value):
            raise UnknownPassError(f"pass {name}: option {opt}={value} did not take effect (the pass manager "
                                   f"shows {opt}={printed.get(opt)!r}); refusing to run with it dropped")


def context_for(capability: int | None, num_warps: int, num_ctas: int, num_stages: int) -> CompileContext:
    """Adder argument context. No target in the module: compute capability 80 and PTX 8.0, like triton-opt's
    pass defaults."""
    cap = capability if capability is not None else 80
    return replace(CompileContext(), capability=cap, num_warps=num_warps, num_ctas=num_ctas,
                   num_stages=num_stages, ptx_version=88 if capability is not None and cap >= 100 else 80)
