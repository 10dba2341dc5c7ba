"""Where bwtriton's passes enter Triton's stage pipeline.

Triton 3.6 compiles through the stages ``ttir -> ttgir -> llir -> ptx -> cubin`` (Gluon starts at ``ttgir``)
and lets one hook (``knobs.runtime.add_stages_inspection_hook``) edit that ordered dict of stages; each stage's
output is stored under the stage's name (``compiled.asm[name]``) and fed to the next one. Our hook wraps each
Triton stage that has active passes so that it runs Triton's lowering and then our passes of that stage
(in `bwtriton.passes.PIPELINE` order). So ``asm["ptx"]`` is the PTX the cubin is built from, ``asm["ttgir"]``
the TTGIR ``make_llir`` lowered, and so on. Triton's own text of a stage we ran passes on is kept as
``asm["<stage>_triton"]`` (``ptx_triton``, ``ttgir_triton``, ...): stages appended after ``cubin`` that only
return the saved text (Triton hands each stage the previous stage's output; these come last, so nothing
consumes them).

Why "after the stage": every pass we have needs Triton's own output of that stage (layouts for TTGIR, final
instructions for PTX) and must run before the next stage's lowering (the TMEM plan before
``triton-tensor-memory-allocation`` in ``make_llir``; NVFP4 decomposition before ``make_ttgir``'s
accelerate-matmul).

.ttir/.ttgir inputs: Triton stores the file as ``asm[<its stage>]`` and starts with the *next* stage, so the
passes of the input's own stage run at the start of that next stage, on the file's module; ``asm[<its stage>]``
stays the input as given and ``<stage>_triton`` is the same text (`bwtriton opt` shows what the passes made).

Triton's on-disk cache does not know about hooks, so every compile that goes through us gets a cache key that
contains bwtriton's version and the active pass selection (`PassSelection.key`): changing passes never serves a
stale cubin.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from . import passes
from .compat.stage_hook import StagesHook
from .compat.versions import check_supported
from .errors import BwTritonError, CompileError, UnknownPassError, suggest
from .passes import PassContext, all_passes, get_pass
from .targets import Target, get_target, target_for_capability
from .version import __version__

ENV_PASSES = "BWTRITON_PASSES"
STAGES = ("ttir", "ttgir", "llir", "ptx")


def triton_stage_name(stage: str) -> str:
    """Key of `compiled.asm` that keeps Triton's own text of `stage`, from before bwtriton's passes of it."""
    return f"{stage}_triton"


# --------------------------------------------------------------------------------------------------------------
# Pass selection
# --------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PassSelection:
    """The active pass configuration: which passes run, with which option values (in pipeline order)."""

    entries: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.entries]

    def options_for(self, name: str) -> dict[str, Any]:
        return dict(next(opts for n, opts in self.entries if n == name))

    def with_pass(self, name: str, **options: Any) -> "PassSelection":
        """This selection plus pass `name` (and what it requires) with `options` over its current or default
        values, in pipeline order. E.g. ``selection.with_pass("pair-ctas", mode="auto")``."""
        cls = get_pass(name)
        current = {n: dict(o) for n, o in self.entries}
        text = ",".join(f"{k}={v}" for k, v in options.items())
        current[cls.name] = {**current.get(cls.name, {}), **parse_pass_options(cls, text)}
        return _ordered_selection(current)

    def without_pass(self, name: str) -> "PassSelection":
        """This selection without pass `name` (an error when a selected pass requires it)."""
        cls = get_pass(name)
        return _ordered_selection({n: dict(o) for n, o in self.entries if n != cls.name})

    def for_stage(self, stage: str, target: Target) -> list[tuple[Any, dict[str, Any]]]:
        """(pass instance, options) for the passes of `stage` that apply to `target`."""
        out = []
        for name, opts in self.entries:
            cls = get_pass(name)
            inst = cls()
            if cls.stage.value == stage and inst.applies_to(target):
                out.append((inst, dict(opts)))
        return out

    def key(self) -> str:
        """Cache-key component: bwtriton version, the source of bwtriton and its passes, passes + options.
        Equal selections of the same code give equal keys; editing a pass invalidates its cached kernels."""
        text = f"bwtriton-{__version__}|{source_digest()}|" + ";".join(
            f"{n}{{{','.join(f'{k}={v!r}' for k, v in opts)}}}" for n, opts in self.entries)
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def describe(self) -> str:
        return ", ".join(self.names) or "(no bwtriton passes)"


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """Hash of every Python file of bwtriton and bwtriton.passes (read once per process)."""
    h = hashlib.sha256()
    for root in (os.path.dirname(os.path.abspath(__file__)), os.path.dirname(passes.__file__)):
        for dirpath, dirnames, filenames in sorted(os.walk(root)):
            dirnames.sort()
            for name in sorted(f for f in filenames if f.endswith(".py")):
                path = os.path.join(dirpath, name)
                h.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class PassEntry:
    """One entry of a pass spec: ``name``, ``name{key=value,...}``, ``+name``, ``-name``, ``none`` or ``default``."""

    sign: str          # '', '+' or '-'
    name: str
    options: str = ""  # the text inside the braces

    @property
    def is_keyword(self) -> bool:
        return not self.sign and self.name in ("none", "default")


_ENTRY_RE = re.compile(r"^(?P<sign>[+-]?)(?P<name>[A-Za-z0-9_.\-]+)(?:\{(?P<opts>[^{}]*)\})?$")
_SPEC_GRAMMAR = "name, name{opt=value,...}, +name, -name, none or default, separated by commas"


def parse_pass_spec(spec: "str | Iterable[str]") -> list[PassEntry]:
    """The one parser of pass specs (compile, enable, BWTRITON_PASSES, --passes, opt): 'a,b{x=1,y=2},-c' ->
    entries, commas inside braces kept. Empty entries ('a,,b', a trailing comma, '') are errors."""
    items = [spec] if isinstance(spec, str) else list(spec)
    entries: list[PassEntry] = []
    for item in items:
        if not isinstance(item, str):
            raise UnknownPassError(f"pass spec entries must be strings, got {item!r}")
        for raw in split_top_level_commas(item):
            text = raw.strip()
            if not text:
                raise UnknownPassError(f"empty entry in pass spec {item!r}; expected {_SPEC_GRAMMAR} (use 'none' "
                                       f"for no passes, 'default' for the defaults)")
            m = _ENTRY_RE.match(text)
            if not m:
                raise UnknownPassError(f"cannot parse pass entry {text!r}; expected {_SPEC_GRAMMAR}")
            entries.append(PassEntry(m["sign"], m["name"], m["opts"] or ""))
    return entries


def split_top_level_commas(text: str, opening: str = "{", closing: str = "}") -> list[str]:
    """Split at commas outside the brackets `opening`/`closing` ('a,b{x=1,y=2}' -> ['a', 'b{x=1,y=2}'])."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in opening
        depth -= ch in closing
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def default_pass_names(target: Target) -> list[str]:
    """Passes that run when the user asks for nothing: default-enabled ones that apply to the target."""
    return [n for n, cls in all_passes().items() if cls.default_enabled and cls().applies_to(target)]


def resolve_passes(spec: "str | Iterable[str] | None", target: "str | Target",
                   *, use_env: bool = True) -> PassSelection:
    """Turn a user pass spec into a `PassSelection`.

    Grammar (comma-separated, MLIR-like options): ``name``, ``name{opt=value,opt2=value}``, ``+name`` (add to the
    defaults), ``-name`` (remove), ``none``, ``default``. A spec with any bare name is an exact list; a spec of
    only ``+``/``-`` entries edits the target's defaults. With ``spec=None`` the ``BWTRITON_PASSES`` environment
    variable (same grammar; unset or blank: no edits) edits the defaults. Passes a selected pass `requires` are
    selected with it. Unknown passes or options raise with the closest valid names.
    """
    target = get_target(target)
    if spec is None:
        env = os.environ.get(ENV_PASSES, "") if use_env else ""
        entries = parse_pass_spec(env) if env.strip() else []
    else:
        entries = parse_pass_spec(spec)
    exact = any(not e.sign and e.name != "default" for e in entries)
    chosen: dict[str, dict[str, Any]] = {}
    if not exact or any(e.is_keyword and e.name == "default" for e in entries):
        chosen = {n: {} for n in default_pass_names(target)}
    removed: set[str] = set()
    for entry in entries:
        if entry.is_keyword:
            if entry.name == "none":
                chosen.clear()
            continue
        cls = get_pass(entry.name)
        if entry.sign == "-":
            chosen.pop(cls.name, None)
            removed.add(cls.name)
            continue
        chosen[cls.name] = parse_pass_options(cls, entry.options)
    return _ordered_selection(chosen, removed)


def _ordered_selection(chosen: dict[str, dict[str, Any]], removed: "set[str] | None" = None) -> PassSelection:
    """`chosen` (name -> options given) plus what it requires, in pipeline order, options over defaults."""
    work = list(chosen)
    while work:
        for dep in get_pass(work.pop()).requires:
            if dep in (removed or ()):
                users = [n for n in chosen if dep in get_pass(n).requires]
                raise UnknownPassError(f"pass {dep} is required by {', '.join(users)}; remove "
                                       f"{' and '.join('-' + u for u in users)} as well, or keep {dep}")
            if dep not in chosen:
                chosen[dep] = {}
                work.append(dep)
    order = list(all_passes())
    ordered = sorted(chosen.items(), key=lambda kv: order.index(kv[0]))
    return PassSelection(tuple((n, tuple(sorted({**get_pass(n).option_defaults(), **o}.items())))
                               for n, o in ordered))


def parse_pass_options(cls: type, text: str) -> dict[str, Any]:
    """The `key=value` options text of a pass entry, typed by the pass's `PassOption`s; unknown keys raise."""
    valid = {o.name: o for o in cls.options}
    out = {}
    for item in filter(None, (s.strip() for s in re.split(r"[,\s]+", text))):
        key, sep, value = item.partition("=")
        if not sep:
            raise UnknownPassError(f"pass {cls.name}: option {item!r} needs a value (key=value)")
        if key not in valid:
            raise UnknownPassError(f"pass {cls.name} has no option {key!r}.{suggest(key, valid)} "
                                   f"Valid options: {', '.join(valid) or 'none'}.")
        try:
            out[key] = valid[key].parse(value)
        except ValueError as exc:
            raise UnknownPassError(f"pass {cls.name}: {exc}") from None
    return out


# --------------------------------------------------------------------------------------------------------------
# Running passes on one stage's output
# --------------------------------------------------------------------------------------------------------------

def run_stage_passes(stage: str, ir: Any, selection: PassSelection, target: Target,
                     metadata: dict, reports: dict, provided: "dict[str, Any] | None" = None) -> Any:
    """Run the selected passes of `stage` over `ir` (module or text), recording reports. Returns the new IR.
    `provided` is the per-compile dict through which passes hand values to the passes that require them."""
    provided = {} if provided is None else provided
    for inst, opts in selection.for_stage(stage, target):
        ctx = PassContext(pass_name=inst.name, target=target, options=opts, metadata=metadata,
                          requires=tuple(inst.requires), provided=provided)
        reports[inst.name] = ctx.report
        try:
            out = inst.run(ir, ctx)
        except BwTritonError:
            raise
        except Exception as exc:  # a bug in a pass or an MLIR failure inside it: name the pass
            raise CompileError(f"[{inst.name}] pass failed on the {stage} stage: {type(exc).__name__}: {exc}",
                               pass_name=inst.name) from exc
        if out is not None:
            ir = out
    return ir


@dataclass
class _CompileRun:
    """One compile's state: the values passes provide each other (`requires`) and Triton's text of each stage
    before our passes changed it."""

    selection: PassSelection
    target: Target
    provided: dict[str, Any] = field(default_factory=dict)
    triton_text: dict[str, str] = field(default_factory=dict)
    started: bool = False

    def run_passes(self, stage: str, ir: Any, metadata: dict) -> Any:
        self.triton_text[stage] = str(ir)  # before the passes: they (and the next stage) may edit `ir` in place
        reports = metadata.setdefault("bwtriton", {"version": __version__, "passes": self.selection.names,
                                                   "key": self.selection.key(), "reports": {}})["reports"]
        return run_stage_passes(stage, ir, self.selection, self.target, metadata, reports, self.provided)


def _wrapped_stage(name: str, lower: Any, run: _CompileRun, own: bool, previous: "str | None"):
    """Triton's stage `name`, then our passes of it (`own`). `previous`: the stage before it, when that one has
    passes: if this is the first stage of the compile (a .ttir/.ttgir input), its passes run here first."""
    def stage(src, metadata):
        first, run.started = not run.started, True
        if first and previous is not None:
            src = run.run_passes(previous, src, metadata)
        out = lower(src, metadata)
        return run.run_passes(name, out, metadata) if own else out
    return stage


def _saved_triton_text(name: str, run: _CompileRun):
    def stage(src, metadata):
        return run.triton_text.get(name, "")
    return stage


def make_stages_hook(selection: PassSelection, target: "Target | None" = None):
    """A Triton ``add_stages_inspection_hook`` that runs our passes inside Triton's stages (see the module doc).

    `target=None` derives the target from the compile's capability (used by `enable()` for live launches).
    """
    def edit(backend, stages: dict, options, language, capability):
        tgt = target or target_for_capability(capability)
        run = _CompileRun(selection, tgt)
        active = [name for name in stages if name in STAGES and selection.for_stage(name, tgt)]
        items = list(stages.items())
        stages.clear()
        previous = None
        for name, lower in items:
            stages[name] = _wrapped_stage(name, lower, run, name in active, previous if previous in active else None)
            previous = name
        for name in active:
            stages[triton_stage_name(name)] = _saved_triton_text(name, run)
    return StagesHook(edit, f"{selection.key()}-{target.name if target else 'device'}")


@contextlib.contextmanager
def stages_hook(selection: PassSelection, target: "Target | None" = None) -> Iterator[None]:
    """Install our stage hook for the duration of a block, restoring whatever was there."""
    from triton import knobs
    previous = knobs.runtime.add_stages_inspection_hook
    knobs.runtime.add_stages_inspection_hook = make_stages_hook(selection, target)
    try:
        yield
    finally:
        knobs.runtime.add_stages_inspection_hook = previous


# --------------------------------------------------------------------------------------------------------------
# enable() / disable(): ordinary @triton.jit launches through our pipeline
# --------------------------------------------------------------------------------------------------------------

@dataclass
class _EnabledState:
    """What `enable()` replaced, and the stack of active (selection, explicit target) for nested enables."""

    previous_hook: Any = None
    previous_cache_dir: Any = None
    stack: list[tuple[PassSelection, Target | None]] = field(default_factory=list)


_state = _EnabledState()


def _clear_jit_caches() -> None:
    """Drop in-memory compiled kernels of every JITFunction, so the next launch compiles through the new
    pipeline (Triton keys its in-memory cache on arguments and options only, not on hooks)."""
    from triton.runtime.jit import JITFunction
    for obj in gc.get_objects():
        if issubclass(type(obj), JITFunction):  # type(), not isinstance: no __class__ proxies
            obj.device_caches.clear()


def _cache_dir_for(selection: PassSelection) -> str:
    """The on-disk cache folder of kernels compiled through `selection`: one sub-folder per selection key under the
    cache folder the user had before any `enable()` (Triton's cache key does not see hooks, the folder does)."""
    from triton import knobs
    base = _state.previous_cache_dir if _state.stack else knobs.cache.dir
    return os.path.join(str(base), f"bwtriton-{selection.key()}")


def _activate(selection: PassSelection, target: Target | None) -> None:
    """Point Triton's hook and cache folder at `selection` (target None: derived per compile from the GPU)."""
    from triton import knobs
    knobs.runtime.add_stages_inspection_hook = make_stages_hook(selection, target)
    knobs.cache.dir = _cache_dir_for(selection)
    _clear_jit_caches()


@contextlib.contextmanager
def scoped(selection: PassSelection, target: "Target | None" = None) -> Iterator[None]:
    """Compile inside this block through `selection` (for `target`; None: each compile's own GPU): installs our stage
    hook and moves the on-disk cache to the selection's folder (the one `enable()` uses), restoring both after.

    Unlike `enable()` it leaves in-memory JIT caches alone, so use it for kernels that are only ever launched
    inside such a block (their cache entries are then always pipeline-compiled)."""
    from triton import knobs
    previous_dir = knobs.cache.dir
    knobs.cache.dir = _cache_dir_for(selection)
    try:
        with stages_hook(selection, target):
            yield
    finally:
        knobs.cache.dir = previous_dir


class _Enabled(contextlib.AbstractContextManager):
    def __exit__(self, *exc) -> None:
        disable()


def enable(passes: "str | Iterable[str] | None" = None, *, target: "str | None" = None) -> _Enabled:
    """Make `@triton.jit` launches compile through bwtriton's passes. Usable as a context manager.

    The pass selection is resolved for the current GPU (or `target`); the on-disk cache moves to a folder
    keyed by bwtriton's version and that selection, and in-memory JIT caches are cleared.
    """
    check_supported()
    from triton import knobs
    if target is None:
        try:
            import triton
            cap = triton.runtime.driver.active.get_current_target().arch
            tgt = target_for_capability(int(cap))
        except Exception:  # no GPU: resolve for Blackwell, the only place our defaults matter most
            tgt = get_target("sm_100a")
    else:
        tgt = get_target(target)
    selection = resolve_passes(passes, tgt)
    if not _state.stack:
        _state.previous_hook = knobs.runtime.add_stages_inspection_hook
        _state.previous_cache_dir = knobs.cache.dir
    explicit = None if target is None else tgt
    _state.stack.append((selection, explicit))
    _activate(selection, explicit)
    return _Enabled()


def disable() -> None:
    """Undo the last `enable()`; nested enables restore the outer selection and its target."""
    from triton import knobs
    if not _state.stack:
        return
    _state.stack.pop()
    if _state.stack:
        _activate(*_state.stack[-1])
        return
    knobs.runtime.add_stages_inspection_hook = _state.previous_hook
    knobs.cache.dir = _state.previous_cache_dir
    _clear_jit_caches()


def is_enabled() -> bool:
    """Whether `enable()` is active: ordinary `@triton.jit` launches compile through bwtriton's passes."""
    return bool(_state.stack)


def active_selection() -> "PassSelection | None":
    """The pass selection `@triton.jit` launches compile through (the innermost `enable()`), or None when
    bwtriton is not enabled. ``active_selection().names`` lists the passes in pipeline order."""
    return _state.stack[-1][0] if _state.stack else None
