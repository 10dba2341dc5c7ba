"""`bwtriton diff OLD.json NEW.json`: what changed between two snapshots, kernel by kernel, grouped into
instructions (PTX census by family, SASS histogram, descriptors), resources (registers, spills, shared memory,
TMEM), findings (verifier) and stages (hashes), with `--fail-on` rules deciding the exit code.

Rules (comma-separated): a resource name (``registers``, ``spills``, ``shared``, ``tmem``, ``stack``) fails on
any increase, or with a threshold on an increase beyond it (``registers>+8``, ``shared>+1024``); a census family
(``tcgen05``, ``wgmma``, ``mma_sync``, ``mbarrier``, ``fences``, ``barriers``, ``tma``), ``sass``,
``descriptors`` or ``stages`` fails on any change; ``findings`` on any verifier finding count that grows,
``errors`` on a growing verifier error count; ``compile`` on a kernel that no longer compiles; ``removed`` /
``added`` on kernels present on one side only; ``any`` on any change at all.
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
_OTHER_RULES = {"sass", "descriptors", "stages", "findings", "errors", "compile", "removed", "added", "any"}
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


def record_changes(old: dict, new: dict) -> dict[str, list[dict]]:
    """Changes between two records of one kernel, by group."""
    if "error" in old or "error" in new:
        if old.get("error") == new.get("error"):
            return {}
        return {"compile": [{"what": "compile error", "old": old.get("error"), "new": new.get("error")}]}
    groups: dict[str, list[dict]] = {"instructions": [], "resources": [], "findings": [], "stages": []}
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
    hashes = _dict_changes(old.get("hashes", {}), new.get("hashes", {}), "", None)
    groups["stages"] = [dict(c, what=f"{c['what']} hash") for c in hashes]
    if old.get("ptx_version") != new.get("ptx_version"):
        groups["stages"].append({"what": "PTX .version", "old": old.get("ptx_version"),
                                 "new": new.get("ptx_version")})
    return {g: c for g, c in groups.items() if c}


def _num(v: Any) -> int:
    return v if isinstance(v, int) else 0


def failing_reasons(groups: dict[str, list[dict]], rules: list[Rule]) -> list[str]:
    """Which rules a kernel's changes match, as short sentences."""
    reasons = []
    res = {c["what"]: c for c in groups.get("resources", [])}
    for rule in rules:
        if rule.name == "any" and groups:
            reasons.append("any: changed")
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
        elif rule.name == "compile" and groups.get("compile") and groups["compile"][0]["new"]:
            reasons.append(f"compile: {groups['compile'][0]['new']}")
    return reasons


def diff_snapshots(old: dict, new: dict, rules: list[Rule]) -> dict[str, Any]:
    """The whole comparison: per kernel changes, plus the list of rule matches that make the exit code 1."""
    a, b = old["records"], new["records"]
    kernels, failing = [], []
    for key in sorted(set(a) | set(b)):
        if key not in b or key not in a:
            status = "removed" if key not in b else "added"
            kernels.append({"kernel": key, "status": status, "groups": {}})
            if any(r.name in (status, "any") for r in rules):
                failing.append(f"{key}: {status}")
            continue
        groups = record_changes(a[key], b[key])
        kernels.append({"kernel": key, "status": "changed" if groups else "unchanged", "groups": groups})
        failing += [f"{key}: {r}" for r in failing_reasons(groups, rules)]
    meta = lambda d: {k: d.get(k) for k in ("triton", "bwtriton", "passes", "targets")}  # noqa: E731
    return {"old": meta(old), "new": meta(new), "rules": [str(r) for r in rules], "kernels": kernels,
            "failing": failing}


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
    if result["rules"]:
        lines += [f"**--fail-on {','.join(result['rules'])}: {len(result['failing'])} match(es)**", ""]
        lines += [_bullet(f"- {f}") for f in result["failing"]] + ([""] if result["failing"] else [])
    for k in result["kernels"]:
        if k["status"] == "unchanged":
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
