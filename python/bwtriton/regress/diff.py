"""`bwtriton diff OLD.json NEW.json`: what changed between two snapshots, kernel by kernel, grouped into
instructions (PTX census by family, SASS histogram, descriptors), resources (registers, spills, shared memory,
TMEM), findings (verifier) and stages (hashes), with `--fail-on` rules deciding the exit code.

Rules (comma-separated): a resource name (``registers``, ``spills``, ``shared``, ``tmem``, ``stack``) fails on
any increase, or with a threshold on an increase beyond it (``registers>+8``, ``shared>+1024``); a census family
(``tcgen05``, ``wgmma``, ``mma_sync``, ``mbarrier``, ``fences``, ``barriers``, ``tma``), ``sass``,
``descriptors`` or ``stages`` fails on any change; ``findings`` on any verifier finding count that grows,
``errors`` on a growing verifier error count; ``compile`` on a kernel that no longer compiles; ``specialisation``
on a kernel compiled with different 16-byte divisibility on the two sides; ``removed`` / ``added`` on kernels
present on one side only; ``any`` on any change at all. ``compile`` and ``specialisation`` are always on: a
kernel that stops compiling is a regression, and two specialisations are two different programs.

Stage hashes that differ in a stage a snapshot found nondeterministic (`bwtriton snapshot --check-determinism`
compiles twice) are reported as nondeterminism, not as a change, and match no rule.
"""
from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from .census import FAMILIES

RESOURCE_FIELDS = {"registers": ("registers",), "spills": ("spill_stores", "spill_loads"),
                   "shared": ("shared_bytes",), "tmem": ("tmem_columns",), "stack": ("stack_bytes",)}
_OTHER_RULES = {"sass", "descriptors", "stages", "findings", "errors", "compile", "specialisation", "removed",
                "added", "any"}
#: Rules every diff applies, whatever --fail-on says.
ALWAYS_RULES = ("compile", "specialisation")
_FAMILY_NAMES = {f for f, _ in FAMILIES}


@dataclass(frozen=True)
class Rule:
    name: str
    threshold: int | None = None  # resources: fail only when the increase exceeds this

    def __str__(self) -> str:
        return self.name + (f">+{self.threshold}" if self.threshold is not None else "")


def parse_fail_on(text: str) -> list[Rule]:
    """'spills,registers>+8,findings,tcgen05' -> rules; unknown names raise listing the valid ones."""
    rules = []
    valid = sorted(set(RESOURCE_FIELDS) | _OTHER_RULES | _FAMILY_NAMES)
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = re.fullmatch(r"(?P<name>[a-z_0-9]+)(?:>\+?(?P<n>\d+))?", part)
        if not m or m["name"] not in valid:
            raise InputError(f"--fail-on: unknown rule {part!r}; rules: {', '.join(valid)} (resources take a "
                             f"threshold, e.g. registers>+8)")
        if m["n"] is not None and m["name"] not in RESOURCE_FIELDS:
            raise InputError(f"--fail-on: {m['name']} takes no threshold (only {', '.join(RESOURCE_FIELDS)} do)")
        rules.append(Rule(m["name"], int(m["n"]) if m["n"] is not None else None))
    return rules


def _dict_changes(old: dict, new: dict, prefix: str, missing: Any = 0) -> list[dict]:
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, missing), new.get(key, missing)
        if a != b:
            out.append({"what": f"{prefix}{key}", "old": a, "new": b})
    return out


def _list_changes(old: list, new: list, what: str) -> list[dict]:
    a = {json.dumps(x, sort_keys=True) for x in old}
    b = {json.dumps(x, sort_keys=True) for x in new}
    return ([{"what": f"{what} removed", "old": json.loads(x), "new": None} for x in sorted(a - b)] +
            [{"what": f"{what} added", "old": None, "new": json.loads(x)} for x in sorted(b - a)])


def specialisation_change(old: dict, new: dict) -> list[dict]:
    """The specialisation group of a kernel: what differs between the two records' integer specialisation.
    A record written before snapshots recorded it says so (a note: it cannot be compared, so nothing fails)."""
    if "specialisation" not in old or "specialisation" not in new:
        side = "old" if "specialisation" not in old else "new"
        if "specialisation" not in old and "specialisation" not in new:
            return []
        return [{"what": f"specialisation not recorded in the {side} snapshot (re-snapshot it to compare like "
                         f"with like)", "old": old.get("specialisation"), "new": new.get("specialisation"),
                 "note": True}]
    a, b = old["specialisation"] or {}, new["specialisation"] or {}
    return [{"what": f"specialisation {key}", "old": a.get(key), "new": b.get(key)}
            for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]


def _stage_changes(old: dict, new: dict) -> tuple[list[dict], list[dict]]:
    """(stage hash changes, those in stages either side found nondeterministic)."""
    unstable = set(old.get("nondeterministic", [])) | set(new.get("nondeterministic", []))
    hashes = [dict(c, what=f"{c['what']} hash") for c in _dict_changes(old.get("hashes", {}),
                                                                       new.get("hashes", {}), "", None)]
    changed = [c for c in hashes if c["what"][:-len(" hash")] not in unstable]
    noisy = [dict(c, what=f"{c['what']} (stage is nondeterministic: differs between compiles of one input)")
             for c in hashes if c["what"][:-len(" hash")] in unstable]
    return changed, noisy


def record_changes(old: dict, new: dict, compare_hashes: bool = True) -> dict[str, list[dict]]:
    """Changes between two records of one kernel, by group; 'specialisation' first, since it explains the rest,
    and 'nondeterministic' last (not changes: what one input compiles to differently from run to run)."""
    spec = specialisation_change(old, new)
    if "error" in old or "error" in new:
        if old.get("error") == new.get("error"):
            return {"specialisation": spec} if spec else {}
        return {**({"specialisation": spec} if spec else {}),
                "compile": [{"what": "compile error", "old": old.get("error"), "new": new.get("error")}]}
    groups: dict[str, list[dict]] = {"specialisation": spec, "instructions": [], "resources": [], "findings": [],
                                     "stages": []}
    for family in sorted(set(old.get("census", {})) | set(new.get("census", {}))):
        groups["instructions"] += [dict(c, family=family) for c in _dict_changes(
            old.get("census", {}).get(family, {}), new.get("census", {}).get(family, {}), "")]
    groups["instructions"] += [dict(c, family="sass") for c in _dict_changes(old.get("sass", {}),
                                                                            new.get("sass", {}), "SASS ")]
    for kind in ("idesc", "smem_desc"):
        groups["instructions"] += [dict(c, family="descriptors") for c in _list_changes(
            old.get("descriptors", {}).get(kind, []), new.get("descriptors", {}).get(kind, []), kind)]
    groups["resources"] = _dict_changes(old.get("resources", {}), new.get("resources", {}), "", None)
    groups["findings"] = _dict_changes(old.get("findings", {}).get("by_check", {}),
                                       new.get("findings", {}).get("by_check", {}), "")
    if compare_hashes:
        groups["stages"], groups["nondeterministic"] = _stage_changes(old, new)
    if old.get("ptx_version") != new.get("ptx_version"):
        groups["stages"].append({"what": "PTX .version", "old": old.get("ptx_version"),
                                 "new": new.get("ptx_version")})
    return {g: c for g, c in groups.items() if c}


def is_change(groups: dict[str, list[dict]]) -> bool:
    """Whether a kernel changed: any group but nondeterminism and notes that a field was not recorded."""
    return any(g != "nondeterministic" and any(not c.get("note") for c in changes)
               for g, changes in groups.items())


def _num(v: Any) -> int:
    return v if isinstance(v, int) else 0


def failing_reasons(groups: dict[str, list[dict]], rules: list[Rule]) -> list[str]:
    """Which rules a kernel's changes match, as short sentences."""
    reasons = []
    res = {c["what"]: c for c in groups.get("resources", [])}
    for rule in rules:
        if rule.name == "any" and is_change(groups):
            reasons.append("any: changed")
        elif rule.name == "specialisation":
            hits = [c for c in groups.get("specialisation", []) if not c.get("note")]
            reasons += [f"specialisation: {c['what'][len('specialisation '):]} {c['old']} -> {c['new']} (the two "
                        f"sides compiled different programs; give both the same example/divisible_by_16)"
                        for c in hits]
        elif rule.name in RESOURCE_FIELDS:
            for field in RESOURCE_FIELDS[rule.name]:
                c = res.get(field)
                if c and _num(c["new"]) - _num(c["old"]) > (rule.threshold or 0):
                    reasons.append(f"{rule}: {field} {c['old']} -> {c['new']}")
        elif rule.name in _FAMILY_NAMES or rule.name in ("sass", "descriptors"):
            hits = [c for c in groups.get("instructions", []) if c.get("family") == rule.name]
            if hits:
                reasons.append(f"{rule}: {len(hits)} change(s), e.g. {hits[0]['what']} {hits[0]['old']} -> "
                               f"{hits[0]['new']}")
        elif rule.name == "stages" and groups.get("stages"):
            reasons.append(f"stages: {', '.join(c['what'] for c in groups['stages'])}")
        elif rule.name in ("findings", "errors"):
            for c in groups.get("findings", []):
                if _num(c["new"]) > _num(c["old"]) and (rule.name == "findings" or c["what"].startswith("error/")):
                    reasons.append(f"{rule}: {c['what']} {c['old']} -> {c['new']}")
        elif rule.name == "compile" and groups.get("compile") and groups["compile"][0]["new"] and \
                not groups["compile"][0]["old"]:
            reasons.append(f"compile: {groups['compile'][0]['new']}")
    return reasons


def with_always_rules(rules: list[Rule]) -> list[Rule]:
    """`rules` plus the rules every diff applies (`ALWAYS_RULES`), those first."""
    names = {r.name for r in rules}
    return [Rule(n) for n in ALWAYS_RULES if n not in names] + list(rules)


def diff_snapshots(old: dict, new: dict, rules: list[Rule]) -> dict[str, Any]:
    """The whole comparison: per kernel changes, plus the list of rule matches that make the exit code 1
    (`rules` plus `ALWAYS_RULES`). `specialisation_differs` lists the kernels compiled with different
    specialisations, which a report names before anything else."""
    rules = with_always_rules(rules)
    a, b = old["records"], new["records"]
    same_hashing = old.get("format") == new.get("format")  # each format version hashes stages its own way
    kernels, failing, spec_differs = [], [], []
    for key in sorted(set(a) | set(b)):
        if key not in b or key not in a:
            status = "removed" if key not in b else "added"
            kernels.append({"kernel": key, "status": status, "groups": {}})
            if any(r.name in (status, "any") for r in rules):
                failing.append(f"{key}: {status}")
            continue
        groups = record_changes(a[key], b[key], compare_hashes=same_hashing)
        if any(not c.get("note") for c in groups.get("specialisation", [])):
            spec_differs.append(key)
        kernels.append({"kernel": key, "status": "changed" if is_change(groups) else "unchanged", "groups": groups})
        failing += [f"{key}: {r}" for r in failing_reasons(groups, rules)]
    meta = lambda d: {k: d.get(k) for k in ("format", "triton", "bwtriton", "passes", "targets")}  # noqa: E731
    return {"old": meta(old), "new": meta(new), "rules": [str(r) for r in rules], "kernels": kernels,
            "specialisation_differs": spec_differs, "failing": failing}


# --------------------------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------------------------

def _cell(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items() if x is not None)
    return "-" if v is None else str(v)


def _delta(old: Any, new: Any) -> str:
    if isinstance(old, (int, float)) and isinstance(new, (int, float)) and not isinstance(old, bool):
        return f"{new - old:+}"
    return ""


def render_markdown(result: dict) -> str:
    o, n = result["old"], result["new"]
    counts = {s: sum(1 for k in result["kernels"] if k["status"] == s)
              for s in ("changed", "unchanged", "added", "removed")}
    lines = [f"# bwtriton diff: Triton {o['triton']} (passes {o['passes']}) -> Triton {n['triton']} "
             f"(passes {n['passes']})", "",
             f"{len(result['kernels'])} kernel configs: {counts['changed']} changed, {counts['unchanged']} "
             f"unchanged, {counts['added']} added, {counts['removed']} removed.", ""]
    spec = result.get("specialisation_differs", [])
    if spec:
        lines = lines[:2] + [_bullet(f"**Specialisation differs for {len(spec)} kernel config(s)**: the two "
                                     f"snapshots compiled them with different 16-byte divisibility, so their other "
                                     f"changes may come from that, not from the compiler: {', '.join(spec)}"),
                             ""] + lines[2:]
    if o.get("format") != n.get("format"):
        lines += [_bullet(f"Stage hashes not compared: the snapshots have formats {o.get('format')} and "
                          f"{n.get('format')}, which hash stages differently (re-snapshot the old side)"), ""]
    noisy = [k["kernel"] for k in result["kernels"] if "nondeterministic" in k["groups"]]
    if noisy:
        lines += [_bullet(f"Nondeterministic stages (not counted as changes): {', '.join(noisy)}"), ""]
    if result["rules"]:
        lines += [f"**--fail-on {','.join(result['rules'])}: {len(result['failing'])} match(es)**", ""]
        lines += [_bullet(f"- {f}") for f in result["failing"]] + ([""] if result["failing"] else [])
    unrecorded = [k["kernel"] for k in result["kernels"]
                  if any(c.get("note") for c in k["groups"].get("specialisation", []))]
    if unrecorded:
        lines += [_bullet(f"Specialisation not recorded on one side for {len(unrecorded)} kernel config(s) "
                          f"(a snapshot by an older bwtriton): re-snapshot it to compare like with like"), ""]
    for k in result["kernels"]:
        notes_only = all(c.get("note") for c in k["groups"].get("specialisation", [])) and \
            set(k["groups"]) <= {"specialisation"}
        if k["status"] == "unchanged" and notes_only:
            continue
        lines += [f"## `{k['kernel']}` ({k['status']})", ""]
        for group, changes in k["groups"].items():
            lines += [f"**{group}**", ""] + _group_lines(changes) + [""]
    return "\n".join(lines) + "\n"


def _bullet(text: str, width: int = 100) -> str:
    """A markdown bullet wrapped to `width` columns, continued two spaces in (still one bullet when rendered)."""
    return textwrap.fill(text, width, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False)


def _group_lines(changes: list[dict], width: int = 100) -> list[str]:
    """One group's changes as a table; a row wider than `width` (a descriptor's fields, a finding's message)
    becomes a wrapped bullet under it, so the report reads in a 100-column terminal as well as rendered."""
    rows, long = [], []
    for c in changes:
        row = f"| {c['what']} | {_cell(c['old'])} | {_cell(c['new'])} | {_delta(c['old'], c['new'])} |"
        if len(row) <= width:
            rows.append(row)
        else:
            long.append(_bullet(f"- {c['what']}: {_cell(c['old'])} -> {_cell(c['new'])}", width))
    table = ["| what | old | new | delta |", "|---|---|---|---|"] + rows if rows else []
    return table + ([""] if rows and long else []) + long


def render(result: dict, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(result, indent=1, default=str) + "\n"
    return render_markdown(result)
