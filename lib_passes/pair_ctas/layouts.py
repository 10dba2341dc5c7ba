"""Text rewrites of printed TTGIR that make an MMA 2-CTA: ``twoCTAs = true`` on a TMEM encoding alias, a unit
attribute on an op line, an alias redefinition. Reading (MMA lines, encodings) is `bwtriton.mlir`'s."""
from __future__ import annotations

import re

from bwtriton.mlir.mma import split_op_line
from bwtriton.mlir.syntax import split_top_level

#: Module attribute that marks a module as paired (Triton's lowering reads it).
TWO_CTAS_MODULE_ATTR = "ttng.two-ctas"


def with_two_ctas(encoding: str) -> str:
    """A tensor_memory_encoding with ``twoCTAs = true`` (unchanged if it already has it)."""
    if "twoCTAs = true" in encoding:
        return encoding
    if not encoding.rstrip().endswith(">") or "tensor_memory_encoding<" not in encoding:
        raise ValueError(f"not a tensor_memory_encoding: {encoding!r}")
    body = encoding.rstrip()[:-1]
    return body + ", twoCTAs = true>"


def add_unit_attr(line: str, name: str) -> str:
    """The op line with unit attribute `name` added to its attr dict (created if missing)."""
    parts = split_op_line(line)
    if parts is None:
        raise ValueError(f"cannot find the type list of op line: {line.strip()[:120]}")
    head, attr, types, loc = parts
    if attr:
        names = {a.strip().split("=")[0].strip() for a in split_top_level(attr.strip("{}"))}
        if name in names:
            return line
        new_head = head[:len(head) - len(attr)] + attr[:-1].rstrip() + f", {name}}}"
    else:
        new_head = head.rstrip() + f" {{{name}}}"
    return f"{new_head} : {types}{loc}"


def replace_alias(text: str, alias: str, new_value: str) -> str:
    """Replace the definition of module alias `alias` (``#tmem = ...``)."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith(alias + " = "):
            end = "\n" if line.endswith("\n") else ""
            lines[i] = f"{alias} = {new_value}{end}"
            return "".join(lines)
    raise KeyError(f"no alias {alias} in module")


def with_module_bool(text: str, name: str, value: bool = True) -> str:
    """The module with boolean attribute `name` set on its ``module attributes {...}`` line (replaced or added),
    so the text verifies before the attribute could be set on the parsed module."""
    lines = text.splitlines(keepends=True)
    word = "true" if value else "false"
    for i, line in enumerate(lines):
        if not line.startswith("module"):
            continue
        key = f'"{name}" = '
        if key in line:
            lines[i] = re.sub(re.escape(key) + r"(true|false)", key + word, line, count=1)
        elif line.startswith("module attributes {"):
            lines[i] = line.replace("module attributes {", f"module attributes {{{key}{word}, ", 1)
        else:
            lines[i] = line.replace("module {", f"module attributes {{{key}{word}}} {{", 1)
        return "".join(lines)
    raise ValueError("no module line in the text")
