"""A verifier finding: check id, severity, message, PTX line, and the function it is in."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional


@dataclass(frozen=True)
class Finding:
    check: str            # stable check id, e.g. "dealloc-missing"
    rule: str             # reference rule, e.g. "P4" (or "T1" for checks beyond P1-P20)
    severity: str         # "error" | "warning" | "note"
    message: str
    line: int
    function: str
    related_line: Optional[int] = None

    def to_dict(self) -> dict:
        return asdict(self)

    def format(self, filename: str = "<ptx>") -> str:
        rel = f" (see line {self.related_line})" if self.related_line else ""
        return f"{filename}:{self.line}: {self.severity}: [{self.check}/{self.rule}] {self.message}{rel}"


def _rule_order(rule: str) -> tuple:
    """'P9' before 'P11': the letter, then the number (rules without one sort by name)."""
    digits = rule.lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    return (rule[:len(rule) - len(digits)], int(digits)) if digits.isdigit() else (rule, -1)


def finding_order(f: Finding) -> tuple:
    """The stable order findings are reported in: line, then rule id, then check id and text (never the order
    the checks happened to emit them in, which follows set iteration)."""
    return (f.line, _rule_order(f.rule), f.check, f.message, f.related_line or 0, f.function)
