"""`-mlir-print-local-scope` for IR printed through Triton's bindings, which print attribute and type aliases
(``#blocked = #ttg.blocked<...>`` then ``tensor<..., #blocked>``) and expose no printing flags. We inline each
alias into its uses and drop the alias lines, which is what MLIR's local-scope printing shows."""
from __future__ import annotations

import re

_ALIAS_DEF_RE = re.compile(r"^(?P<alias>[#!][A-Za-z_][\w.$\-]*) = (?P<body>.*)$")


def _use_re(alias: str) -> re.Pattern:
    return re.compile(re.escape(alias) + r"(?![\w.$\-])")


def inline_aliases(text: str) -> str:
    """Replace every `#alias`/`!alias` use by its definition; remove the definition lines."""
    defs: list[tuple[str, str]] = []
    body_lines = []
    for line in text.splitlines(keepends=True):
        m = _ALIAS_DEF_RE.match(line.rstrip("\n"))
        if m and not body_lines:
            value = m["body"]
            for alias, expansion in defs:  # an alias may use the ones defined before it
                value = _use_re(alias).sub(lambda _m, e=expansion: e, value)
            defs.append((m["alias"], value))
        else:
            body_lines.append(line)
    out = "".join(body_lines)
    for alias, expansion in sorted(defs, key=lambda d: -len(d[0])):  # '#blocked1' before '#blocked'
        out = _use_re(alias).sub(lambda _m, e=expansion: e, out)
    return out
