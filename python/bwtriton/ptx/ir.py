"""Data model of parsed PTX: Module -> Function -> (Instruction | Label | Directive) plus basic blocks.

Stable API (the verifier and the CPU emulator both build on it):

`Instruction`
    opcode     the operation, without modifiers or types: "tcgen05.mma", "tcgen05.wait", "tcgen05.fence",
               "mbarrier.try_wait", "ld", "st", "cvt", "bra", "fence.proxy.async", "cp.async.bulk.tensor", ...
               For tcgen05 the `::` part of the operation component becomes the first modifier:
               `tcgen05.wait::ld.sync.aligned` -> opcode "tcgen05.wait", modifiers ("ld", "sync", "aligned").
    modifiers  tuple of the remaining dotted components that are not types, in source order:
               ("cta_group::1", "kind::f16"), ("shared",), ("32x32b", "x128") ...
    types      tuple of the PTX type components in source order: cvt.u64.u32 -> ("u64", "u32")
    operands   tuple of `Operand`
    guard      `Guard(reg, negated)` for `@%p` / `@!%p`, else None
    line       1-based line of the statement in the source text
    text       the statement text (without the trailing `;`)
    targets    resolved branch targets (label keys, see `Function.labels`) for bra / brx.idx, else ()
    index      position in `Function.instructions`; `block`: id of its basic block
    defs/uses  register names written / read (guard predicate included in uses)
    Helpers: `has(mod)`, `modifier_value("kind") -> "f16"`, `full_opcode` (the dotted text as written).

`Operand.kind` is one of
    "reg"   name="%r12" (or a scoped name such as "complete"); negated=True for `!%p`
    "sreg"  special register, name="%tid.x"
    "imm"   value=int or float (0fXXXXXXXX / 0dXXXXXXXXXXXXXXXX are decoded to float)
    "sym"   name of a variable/param/function (e.g. "global_smem")
    "label" name=label key
    "addr"  `[base + offset]`: base=Operand (reg/sym/imm) or None, offset=int; `[%rd1, {%r1, %r2}]` gives
            base=%rd1 and items=(the coordinate vector,)
    "vec"   `{a, b, ...}`: items
    "list"  `(a, b)` in call: items
    "pair"  `%r1|%p1`: items (two regs)
    "sink"  `_`
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional, Union


@dataclass(frozen=True)
class Operand:
    """One instruction operand; see the module docstring for the meaning of `kind`."""

    kind: str
    text: str
    name: Optional[str] = None
    value: Union[int, float, None] = None
    base: Optional["Operand"] = None
    offset: int = 0
    items: tuple["Operand", ...] = ()
    negated: bool = False

    def regs(self) -> Iterator[str]:
        """Every register name mentioned in this operand (address bases, vector elements...)."""
        if self.kind == "reg":
            yield self.name  # type: ignore[misc]
        if self.base is not None:
            yield from self.base.regs()
        for it in self.items:
            yield from it.regs()

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Guard:
    """Predicate guard `@%p` (negated=False) or `@!%p` (negated=True)."""

    reg: str
    negated: bool = False


@dataclass
class Instruction:
    """One PTX instruction; see the module docstring for the field contract."""

    opcode: str
    modifiers: tuple[str, ...]
    types: tuple[str, ...]
    operands: tuple[Operand, ...]
    guard: Optional[Guard]
    line: int
    text: str
    full_opcode: str
    scope: int = 0
    targets: tuple[str, ...] = ()
    index: int = -1
    block: int = -1
    defs: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()

    def has(self, modifier: str) -> bool:
        return modifier in self.modifiers

    def modifier_value(self, key: str) -> Optional[str]:
        """For a modifier `key::value` (e.g. kind::f16) return "value"; None when absent."""
        prefix = key + "::"
        for m in self.modifiers:
            if m.startswith(prefix):
                return m[len(prefix):]
        return None

    @property
    def is_tcgen05(self) -> bool:
        return self.opcode.startswith("tcgen05.")

    def __repr__(self) -> str:
        return f"Instruction(line={self.line}, {self.text!r})"


@dataclass
class Label:
    """A label definition. `key` is unique per function (scoped labels get a `#scope` suffix)."""

    name: str
    key: str
    line: int
    scope: int


@dataclass
class Directive:
    """A directive statement inside a function (`.reg`, `.shared`, `.branchtargets`, `.pragma`...)."""

    name: str
    args: str
    line: int
    scope: int = 0
    label: Optional[str] = None  # label key when the directive is labelled ($L_brx_0: .branchtargets ...)


@dataclass
class Param:
    name: str
    type: str
    attrs: tuple[str, ...] = ()
    space: str = "param"
    count: int = 1  # elements: `.param .align 64 .b8 tmap[128]` (a TMA tensor map) has count 128


@dataclass
class RegDecl:
    """`.reg .b32 %r<618>;` -> RegDecl(type="b32", name="%r", count=618); a plain name has count=None."""

    type: str
    name: str
    count: Optional[int]
    line: int
    scope: int = 0


@dataclass
class BasicBlock:
    id: int
    labels: list[str] = field(default_factory=list)
    instructions: list[Instruction] = field(default_factory=list)
    succs: list[int] = field(default_factory=list)
    preds: list[int] = field(default_factory=list)
    # "exit" (ret/exit or falling off the end), "trap", or None (has successors)
    terminal: Optional[str] = None

    @property
    def first_line(self) -> int:
        return self.instructions[0].line if self.instructions else 0


@dataclass
class Function:
    """An `.entry` (kernel) or `.func`. `directives` holds performance directives: reqntid, maxntid,
    reqnctapercluster, explicitcluster, maxnreg, minnctapersm, maxclusterrank (values as int tuples,
    explicitcluster as True)."""

    name: str
    is_entry: bool
    line: int
    params: list[Param] = field(default_factory=list)
    directives: dict[str, object] = field(default_factory=dict)
    registers: list[RegDecl] = field(default_factory=list)
    statements: list[Union[Instruction, Label, Directive]] = field(default_factory=list)
    instructions: list[Instruction] = field(default_factory=list)
    labels: dict[str, Label] = field(default_factory=dict)          # key -> Label
    branch_tables: dict[str, tuple[str, ...]] = field(default_factory=dict)  # label key -> target keys
    blocks: list[BasicBlock] = field(default_factory=list)
    label_block: dict[str, int] = field(default_factory=dict)      # label key -> block id
    end_line: int = 0
    _defs: Optional[dict[str, list[Instruction]]] = field(default=None, repr=False)

    def find(self, opcode_prefix: str) -> list[Instruction]:
        """Instructions whose opcode equals or starts with `opcode_prefix` (e.g. "tcgen05.")."""
        return [i for i in self.instructions if i.opcode == opcode_prefix or i.opcode.startswith(opcode_prefix)]

    def definitions(self, reg: str) -> list[Instruction]:
        """Every instruction writing `reg` (PTX registers are not SSA: loops reassign them)."""
        if self._defs is None:
            d: dict[str, list[Instruction]] = {}
            for ins in self.instructions:
                for r in ins.defs:
                    d.setdefault(r, []).append(ins)
            self._defs = d
        return self._defs.get(reg, [])

    @property
    def cluster_size(self) -> Optional[int]:
        """CTAs per cluster from `.reqnctapercluster` (product of the dims), or None when not declared."""
        dims = self.directives.get("reqnctapercluster")
        if not dims:
            return None
        n = 1
        for d in dims:  # type: ignore[union-attr]
            n *= d
        return n


@dataclass
class Module:
    version: Optional[str] = None
    target: Optional[str] = None
    address_size: Optional[int] = None
    functions: list[Function] = field(default_factory=list)
    globals: list[Directive] = field(default_factory=list)
    source: str = ""

    @property
    def entries(self) -> list[Function]:
        return [f for f in self.functions if f.is_entry]

    def function(self, name: str) -> Function:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(name)
