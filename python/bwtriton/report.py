"""Plain-text tables for compile results: the summary, pass reports, and the census of what the Blackwell path
emitted (tcgen05 instruction kinds from the PTX, MMA opcodes from the SASS)."""
from __future__ import annotations

import collections
import re
import textwrap
from pathlib import Path
from typing import Any, Iterable, Sequence

from .errors import UnknownPassError, suggest
from .pipeline import all_passes
from .ptx import parse_ptx
from .ptx.descriptors import spelled_scale_vec
from .tmem import write_tmem_map

# `--report` short names -> pass names.
REPORT_ALIASES = {"tmem": "plan-tmem", "verify": "verify-tcgen05", "verifier": "verify-tcgen05"}

_SASS_MMA = re.compile(r"\b(UTC\w*MMA[\w.]*|HMMA[\w.]*|HGMMA[\w.]*|QGMMA[\w.]*|IMMA[\w.]*|IGMMA[\w.]*|"
                       r"OMMA[\w.]*|UTCCP[\w.]*|UTCBAR[\w.]*|LDTM[\w.]*|STTM[\w.]*)")


#: Widest line a command prints (terminals and logs of 100 columns show it unwrapped).
MAX_WIDTH = 100


def format_table(header: Sequence[str], rows: Iterable[Sequence[Any]], width: int | None = MAX_WIDTH) -> str:
    """A left-aligned text table with a rule under the header. A last column that would take a line past `width`
    is wrapped at word boundaries under itself (width None: never wrapped, as `--wide` asks)."""
    rows = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    lead = sum(w + 2 for w in widths[:-1])
    if width is not None and widths and lead + widths[-1] > width:
        widths[-1] = max(width - lead, 20)
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    out = [line(header), line(["-" * w for w in widths])]
    for r in rows:
        last = textwrap.wrap(r[-1], widths[-1], break_on_hyphens=False) if width is not None else [r[-1]]
        out.append(line(r[:-1] + [(last or [""])[0]]))
        out += [" " * lead + more for more in last[1:]]
    return "\n".join(out)


def wrap(text: str, width: int = MAX_WIDTH, indent: str = "", first: str = "") -> str:
    """Prose wrapped to `width` columns at word boundaries: each paragraph starts with `first`, its later lines
    with `indent`."""
    return "\n".join(textwrap.fill(p, width, initial_indent=first, subsequent_indent=indent,
                                    break_on_hyphens=False, break_long_words=False) if p.strip() else p
                      for p in text.split("\n"))


def summary_table(result) -> str:
    """Resources and passes of one compile, as a two-column table (values wrapped to 100 columns)."""
    s = result.summary()
    rows = [(k, v) for k, v in s.items() if k != "passes"]
    rows.append(("passes", ", ".join(s["passes"]) or "(none)"))
    rows.append(("stages", ", ".join(result.stages)))
    return "\n".join(format_table(("", ""), rows).splitlines()[2:])  # no header: the names say what each row is


def report_names() -> list[str]:
    """What `--report` accepts: 'all', the short aliases and every registered pass name."""
    return ["all", *REPORT_ALIASES, *all_passes()]


def check_report_names(names: Sequence[str]) -> None:
    """Fail on a `--report` name that is no pass before anything compiles, listing the valid ones."""
    valid = report_names()
    for name in names:
        if name not in valid:
            raise UnknownPassError(f"--report {name}: no such pass to report on.{suggest(name, valid)} Valid: "
                                   f"{', '.join(valid)}")


def sass_mma_opcodes(sass: str) -> collections.Counter:
    """Counts of tensor-core / TMEM SASS opcodes (UTCHMMA, UTCOMMA.4X, HGMMA, LDTM, ...)."""
    return collections.Counter(m.group(1) for m in _SASS_MMA.finditer(sass))


def ptx_census(ptx: str) -> dict[str, Any]:
    """What the tcgen05 path emitted: instruction counts by opcode, MMA kinds, cta_groups, scale_vec, TMEM columns
    allocated, and the MxNxK decoded from each MMA's instruction descriptor. Uses the project's PTX front end."""
    module = parse_ptx(ptx)
    counts: collections.Counter = collections.Counter()
    kinds: collections.Counter = collections.Counter()
    groups, scale_vecs, alloc_cols = set(), set(), []
    other = collections.Counter()
    for entry in module.entries:
        for ins in entry.instructions:
            op = ins.opcode
            if op.startswith("tcgen05."):
                counts[op] += 1
                for mod in ins.modifiers:
                    if mod.startswith("kind::") and op == "tcgen05.mma":
                        kinds[mod[len("kind::"):]] += 1
                    elif mod.startswith("cta_group::"):
                        groups.add(int(mod.split("::")[1]))
                if op == "tcgen05.mma" and "block_scale" in ins.modifiers:
                    sv = spelled_scale_vec(ins.modifiers, ins.modifier_value("kind") or "")
                    scale_vecs.update([sv] if sv else [])
                if op == "tcgen05.alloc":
                    cols = ins.operands[-1]
                    alloc_cols.append(getattr(cols, "value", str(cols)))
            elif op.startswith(("wgmma.", "mma.")):
                other[op] += 1
    from bwtriton.verify.explain import explain_mmas  # heavy: the verifier loads z3
    shapes = sorted({f"{d['M']}x{d['N']}x{d['K']}" for d in (r["idesc"] for r in explain_mmas(module))
                     if d and d.get("M") and d.get("N")})
    return {"tcgen05": dict(counts), "mma_kinds": dict(kinds), "cta_groups": sorted(groups),
            "scale_vec": sorted(scale_vecs), "alloc_columns": alloc_cols, "other_mma": dict(other),
            "mma_shapes": shapes}


def _fit(text: str) -> str:
    """A pass's rendered report with prose lines wider than MAX_WIDTH wrapped (JSON lines are kept whole, so the
    text stays valid JSON where a pass renders its report as JSON)."""
    def fit(line: str) -> str:
        if len(line) <= MAX_WIDTH or line.lstrip().startswith(('"', "{", "}", "[", "]")):
            return line
        lead = line[:len(line) - len(line.lstrip())]
        return wrap(line.strip(), MAX_WIDTH, indent=lead + "  ", first=lead)
    return "\n".join(fit(line) for line in text.splitlines())


def render_reports(result, names: Sequence[str], outdir: "str | Path | None" = None) -> str:
    """Text of the requested pass reports ('all' for every one); writes the TMEM map next to the stages."""
    registry = all_passes()
    reports = result.reports
    wanted = list(reports) if "all" in names else [REPORT_ALIASES.get(n, n) for n in names]
    out = []
    check_report_names(names)
    for name in wanted:
        if name not in reports:
            out.append(f"== {name}: did not run (disabled, or does not apply to {result.target.name})")
            continue
        out.append(f"== {name}\n{_fit(registry[name].render_report(reports[name]))}")
        if name == "plan-tmem" and outdir is not None:
            path = Path(outdir) / f"{result.name}.tmem.svg"
            write_tmem_map(reports[name], path)
            out.append(f"  wrote {path}")
    return "\n".join(out)
