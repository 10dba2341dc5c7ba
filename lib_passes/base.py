"""The pass interface and registry shared by every bwtriton pass.

A pass is a small class with a registered `name`, the `stage` whose output it transforms, a one-line
`purpose`, typed `options`, the passes it `requires`, and a `run` method (the xDSL shape). Passes never talk
to Triton's stage machinery directly: `bwtriton.pipeline` calls `run` with a `PassContext`. Where a pass runs
within its stage is written in one table, `PIPELINE` in lib_passes/__init__.py.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar, NoReturn

from bwtriton.errors import CompileError


class Stage(str, enum.Enum):
    """Triton stage whose output a pass receives. TTIR/TTGIR passes get an `ir.module`; LLIR/PTX get text."""

    TTIR = "ttir"
    TTGIR = "ttgir"
    LLIR = "llir"
    PTX = "ptx"

    @property
    def is_mlir(self) -> bool:
        return self in (Stage.TTIR, Stage.TTGIR)


@dataclass(frozen=True)
class PassOption:
    """One typed option of a pass; values come from `passes=["name:key=value"]`, the env or the CLI."""

    name: str
    type: type
    default: Any
    help: str = ""

    def parse(self, text: str) -> Any:
        if self.type is bool:
            low = text.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"option {self.name!r} takes a boolean (true/false), got {text!r}")
        try:
            return self.type(text)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"option {self.name!r} takes a {self.type.__name__}, got {text!r}") from exc


class PassError(CompileError):
    """Raised by `PassContext.error`: the pass refuses the kernel."""


@dataclass
class PassContext:
    """What a pass sees besides its IR: target, its option values, Triton's metadata (read it, do not write
    it: it becomes the cached metadata JSON), its report, and what the passes it `requires` provided."""

    pass_name: str
    target: Any                      # bwtriton.targets.Target
    options: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    #: Per-compile values passes provide to each other (pass name -> value); shared by all contexts of a compile.
    provided: dict[str, Any] = field(default_factory=dict)

    def provide(self, value: Any) -> None:
        """Hand `value` to the passes that declare `requires = ("<this pass>",)` (they run later)."""
        self.provided[self.pass_name] = value

    def required(self, name: str) -> Any:
        """What pass `name` (declared in this pass's `requires`) provided in this compile; None when it did not
        run (e.g. a .ttgir input starts after the TTIR passes)."""
        if name not in self.requires:
            raise TypeError(f"pass {self.pass_name} reads {name!r} without declaring requires = ({name!r},)")
        return self.provided.get(name)

    def warn(self, message: str) -> None:
        """Record a warning in this pass's report (the compile goes on)."""
        self.report.setdefault("warnings", []).append(message)

    def error(self, message: str, *, findings: list | None = None) -> NoReturn:
        """Fail the compile with a message that names the problem and the fix."""
        self.report.setdefault("errors", []).append(message)
        raise PassError(f"[{self.pass_name}] {message}", pass_name=self.pass_name, findings=findings)


class Pass:
    """Base class of all bwtriton passes. Subclasses set the class attributes and implement `run`."""

    name: ClassVar[str]
    stage: ClassVar[Stage]
    purpose: ClassVar[str]
    options: ClassVar[tuple[PassOption, ...]] = ()
    default_enabled: ClassVar[bool] = True
    #: Passes this one needs (they are selected with it and run before it: earlier stage, or earlier in the same
    #: stage's row of `PIPELINE`); it reads what they provide with `ctx.required(name)`.
    requires: ClassVar[tuple[str, ...]] = ()

    def applies_to(self, target) -> bool:
        """Whether the pass is meaningful for `target` (it is skipped elsewhere, even when enabled)."""
        return True

    def run(self, ir: Any, ctx: PassContext) -> Any:
        """Transform or analyse `ir`; return the new IR, or None when it was changed in place or not at all."""
        raise NotImplementedError

    @classmethod
    def option_defaults(cls) -> dict[str, Any]:
        return {o.name: o.default for o in cls.options}

    @classmethod
    def render_report(cls, report: dict) -> str:
        """Human-readable form of this pass's report (the CLI prints it). Override for tables."""
        import json
        return json.dumps(report, indent=2, default=str)


REGISTRY: dict[str, type[Pass]] = {}


def register_pass(cls: type[Pass]) -> type[Pass]:
    """Class decorator: add a pass to the registry, checking the declaration is complete."""
    for attr in ("name", "stage", "purpose"):
        if not getattr(cls, attr, None):
            raise TypeError(f"pass class {cls.__name__} must set `{attr}`")
    if not isinstance(cls.stage, Stage):
        raise TypeError(f"pass {cls.name}: stage must be a bwtriton.passes.base.Stage, got {cls.stage!r}")
    if cls.name in REGISTRY and REGISTRY[cls.name] is not cls:
        raise TypeError(f"pass name {cls.name!r} registered twice ({REGISTRY[cls.name].__name__}, {cls.__name__})")
    REGISTRY[cls.name] = cls
    return cls
