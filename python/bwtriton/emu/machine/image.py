"""A kernel image: a PTX entry parsed and compiled once (closures, parameter layout, symbol addresses), cached
per PTX text. The instruction semantics come in as `dispatch` (the ISA table), so the machine imports no
instruction family."""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Optional

from ...errors import InputError
from ...ptx import parse_ptx
from ...ptx.ir import Directive, Function
from ...ptx.shared import ELEM_BYTES, parse_shared_decl
from ..errors import UnsupportedInstructionError
from .memory import PARAM_BASE, SMEM_BASE
from .program import NP_TYPES, CompileEnv, Dispatch, Program

#: Static variables sit below the dynamic `global_smem` window, which starts 1 KiB-aligned (as swizzled
#: operands need), like ptxas's layout (static first, then dynamic).
_DYNAMIC_ALIGN = 1024


@dataclass
class ParamSlot:
    """One kernel parameter's place in param space; `type` is the PTX type, or "b8[N]" for an array."""

    name: str
    type: str
    offset: int
    size: int


@dataclass
class KernelImage:
    """A parsed, compiled kernel entry plus its param layout (cached per PTX text)."""

    fn: Function
    prog: Program
    params: list[ParamSlot]
    param_bytes: int


def _param_layout(fn: Function) -> tuple[list[ParamSlot], int]:
    """Byte offset and size of every kernel parameter in param space (array parameters such as the TMA tensor
    maps `.param .align 64 .b8 NAME[128]` included), and the total size."""
    slots, off = [], 0
    for p in fn.params:
        count = p.count
        elem = NP_TYPES[p.type].itemsize if p.type in NP_TYPES else 8
        align = elem
        if ".align" in p.attrs:
            align = int(p.attrs[p.attrs.index(".align") + 1])
        off = (off + align - 1) // align * align
        slots.append(ParamSlot(p.name, p.type if count == 1 else f"b8[{count}]", off, elem * count))
        off += elem * count
    return slots, off


def static_shared_layout(fn: Function) -> tuple[dict[str, int], int]:
    """Offsets of the `.shared` variables declared inside `fn` (inline-asm scopes, e.g. CLC responses) and the
    bytes to reserve before the dynamic shared memory. Same-named declarations of different scopes share one
    allocation: the asm that declares them runs its protocol to completion each time, so sharing is not
    observable."""
    offsets: dict[str, int] = {}
    off = 0
    for st in fn.statements:
        if not isinstance(st, Directive) or st.name != "shared":
            continue
        decl = parse_shared_decl(st.args)
        if decl is None or decl.type not in ELEM_BYTES or decl.extern or len(decl.dims) > 1 or None in decl.dims:
            raise UnsupportedInstructionError(f"function-scope .shared declaration {st.args!r} is not emulated "
                                              "(expected `.shared [.align N] .type name[count]`)", line=st.line)
        if decl.name in offsets:
            continue
        off = (off + decl.align - 1) // decl.align * decl.align
        offsets[decl.name] = off
        off += decl.nbytes
    reserved = (off + _DYNAMIC_ALIGN - 1) // _DYNAMIC_ALIGN * _DYNAMIC_ALIGN if off else 0
    return offsets, reserved


@functools.lru_cache(maxsize=32)
def _image(text_hash: str, text: str, name: Optional[str], dispatch: Dispatch) -> KernelImage:
    mod = parse_ptx(text)
    entries = mod.entries
    if not entries:
        raise InputError("the PTX has no .entry kernel")
    if name is None:
        fn = entries[0]
    else:
        cands = [f for f in entries if f.name == name]
        if not cands:
            raise InputError(f"no kernel {name!r} in the PTX; entries: {', '.join(f.name for f in entries)}")
        fn = cands[0]
    params, nbytes = _param_layout(fn)
    symbols = {p.name: PARAM_BASE + p.offset for p in params}
    static, reserved = static_shared_layout(fn)  # inline-asm `.shared` variables (CLC), below global_smem
    symbols.update({n: SMEM_BASE + off for n, off in static.items()})
    symbols["global_smem"] = SMEM_BASE + reserved
    return KernelImage(fn, Program(fn, CompileEnv(symbols, mod.target), dispatch), params, nbytes)


def load_image(ptx: str, name: Optional[str], dispatch: Dispatch) -> KernelImage:
    """Parse and compile the entry `name` (default: the first) of `ptx` with `dispatch`, cached by the text's
    hash."""
    return _image(hashlib.sha1(ptx.encode()).hexdigest(), ptx, name, dispatch)
