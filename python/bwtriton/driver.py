"""`bwtriton.compile`: offline compilation of Triton/Gluon kernels (or .ttir/.ttgir files) for a named target,
through Triton's pipeline with bwtriton's passes inserted. Needs no GPU."""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from .errors import CompileError, InputError
from .pipeline import PassSelection, resolve_passes, stages_hook
from .targets import Target, get_target

#: Signature types that `@triton.jit` specialises for 16-byte divisibility at launch.
_DIVISIBLE_INT_TYPES = ("i32", "i64", "u32", "u64")


@dataclass
class CompileResult:
    """What `bwtriton.compile` returns.

    `asm` maps stage name -> text (bytes for `cubin`); `asm["sass"]` disassembles the cubin on first use.
    `metadata` is Triton's metadata as a dict; `reports` maps pass name -> what that pass found or changed.
    `kernel` is Triton's `CompiledKernel` (launchable with ``kernel[grid](*args)`` when the target is the GPU's).
    """

    kernel: Any
    target: Target
    selection: PassSelection
    asm: "_Asm" = field(init=False)

    def __post_init__(self) -> None:
        self.asm = _Asm(self.kernel.asm)

    @property
    def metadata(self) -> dict[str, Any]:
        return self.kernel.metadata._asdict()

    @property
    def reports(self) -> dict[str, dict]:
        return dict((self.metadata.get("bwtriton") or {}).get("reports", {}))

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def stages(self) -> list[str]:
        return list(self.asm.keys())

    def summary(self) -> dict[str, Any]:
        """Key resources: shared memory bytes, TMEM columns, CTAs per cluster, warps."""
        md = self.metadata
        return {"kernel": self.name, "target": self.target.name, "num_warps": md.get("num_warps"),
                "num_ctas": md.get("num_ctas"),
                # Triton 3.6's launcher sets the cluster to (num_ctas, 1, 1); it keeps no cluster_dims itself.
                "cluster_dims": md.get("cluster_dims") or (md.get("num_ctas", 1), 1, 1),
                "shared_bytes": md.get("shared"), "tmem_columns": md.get("tmem_size"),
                "passes": self.selection.names}

    def write(self, outdir: "str | os.PathLike", stages: Iterable[str] | None = None) -> list[Path]:
        """Write the chosen stages (default: all, plus sass) as `<kernel>.<stage>` files; returns the paths."""
        out = Path(outdir)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for stage in (list(stages) if stages else self.stages + ["sass"]):
            data = self.asm[stage]
            path = out / f"{self.name}.{stage}"
            path.write_bytes(data) if isinstance(data, bytes) else path.write_text(data)
            written.append(path)
        return written


class _Asm(dict):
    """Stage -> IR text, with `sass` produced from the cubin on demand by Triton's bundled cuobjdump."""

    def __init__(self, asm: Mapping[str, Any]):
        super().__init__(asm)

    def __missing__(self, key: str):
        if key == "sass" and "cubin" in self:
            from triton.tools.disasm import get_sass
            self["sass"] = get_sass(self["cubin"])
            return self["sass"]
        raise KeyError(f"no stage {key!r}; available: {', '.join(list(self.keys()) + ['sass'])}")


def _is_gluon(fn: Any) -> bool:
    try:
        from triton.experimental.gluon._runtime import GluonJITFunction
    except ImportError:  # pragma: no cover - triton without gluon
        return False
    return isinstance(fn, GluonJITFunction)


def build_source(fn: Any, signature: Mapping[str, str], constexprs: Mapping[str, Any] | None,
                 divisible_by_16: Iterable[str] | None):
    """An `ASTSource`/`GluonASTSource` with @jit-like specialisation, validating argument names first."""
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    if not isinstance(fn, JITFunction):
        raise InputError(f"{fn!r} is not a @triton.jit or @gluon.jit function; decorate it, or pass a "
                         f".ttir/.ttgir file path")
    names = list(fn.arg_names)
    constexprs = dict(constexprs or {})
    sig = dict(signature)
    unknown = [n for n in list(sig) + list(constexprs) if n not in names]
    if unknown:
        raise InputError(f"kernel {fn.__name__} has no argument(s) {', '.join(unknown)}; "
                         f"its arguments are: {', '.join(names)}")
    for n in constexprs:
        sig.setdefault(n, "constexpr")
    for n in names:  # constexpr parameters with defaults may be left out
        if n not in sig:
            param = next(p for p in fn.params if p.name == n)
            if param.is_constexpr and param.has_default:
                sig[n] = "constexpr"
                constexprs[n] = param.default
    missing = [n for n in names if n not in sig]
    if missing:
        raise InputError(f"kernel {fn.__name__}: no type for argument(s) {', '.join(missing)}; give them in "
                         f"signature= (e.g. '*fp16', 'i32') or constexprs=")
    bad_const = [n for n, t in sig.items() if t == "constexpr" and n not in constexprs]
    if bad_const:
        raise InputError(f"kernel {fn.__name__}: constexpr argument(s) {', '.join(bad_const)} need values in "
                         f"constexprs=")
    sig = {n: sig[n] for n in names}  # Triton expects the kernel's argument order
    if divisible_by_16 is None:
        divisible_by_16 = [n for n, t in sig.items() if t.startswith("*") or t in _DIVISIBLE_INT_TYPES]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in divisible_by_16}
    if _is_gluon(fn):
        from triton.experimental.gluon._runtime import GluonASTSource
        return GluonASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    return ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)


class _NativeStderr:
    """Captures what C++ (MLIR diagnostics, ptxas) writes to fd 2 while active, so failures can quote it.

    On success the text is written back to stderr (warnings are not lost); on failure it is only written back
    when BWTRITON_VERBOSE=1, because the error message already quotes the relevant lines.
    """

    def __init__(self) -> None:
        self._saved: int | None = None
        self._tmp = None
        self.text = ""

    def __enter__(self) -> "_NativeStderr":
        try:
            self._saved = os.dup(2)
        except OSError:  # no real fd 2 (embedded interpreters): capture nothing
            return self
        self._tmp = tempfile.TemporaryFile(mode="w+b")
        os.dup2(self._tmp.fileno(), 2)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._saved is None:
            return
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._tmp.seek(0)
        self.text = self._tmp.read().decode(errors="replace")
        self._tmp.close()
        if self.text and (exc_type is None or os.environ.get("BWTRITON_VERBOSE") == "1"):
            os.write(2, self.text.encode())


_DIAG_KEYWORDS = ("error", "Assertion", "LLVM ERROR", "note:", "warning:")


def _diagnostic_tail(text: str, lines: int = 12) -> str:
    """The diagnostic lines of captured compiler output (errors, notes, assertions), without IR dumps."""
    keep = [ln.strip() for ln in text.splitlines() if any(k in ln for k in _DIAG_KEYWORDS)]
    keep = [ln[:400] + (" ..." if len(ln) > 400 else "") for ln in keep]
    return "\n".join(keep[-lines:])


def _auto_two_cta(tgt: Target, problem_shape, constexprs: Mapping[str, Any]) -> bool:
    """The `two_cta="auto"` decision (see docs/two_cta.md for the heuristic)."""
    if not tgt.has_tcgen05:
        return False
    if problem_shape is None or len(problem_shape) != 3:
        raise InputError("two_cta='auto' needs problem_shape=(M, N, K) to decide; or pass two_cta=True/False")
    block_m = constexprs.get("BLOCK_M", constexprs.get("BM"))
    block_n = constexprs.get("BLOCK_N", constexprs.get("BN"))
    if block_m is None or block_n is None:
        raise InputError("two_cta='auto' reads the tile from the BLOCK_M/BLOCK_N (or BM/BN) constexprs; "
                         "name them so, or pass two_cta=True/False")
    from .pairing import should_pair
    return should_pair(*map(int, problem_shape), int(block_m), int(block_n))


def compile(fn_or_path: Any, *, signature: Mapping[str, str] | None = None,  # noqa: A001
            constexprs: Mapping[str, Any] | None = None, target: "str | Target" = "sm_100a",
            num_warps: int = 4, num_stages: int = 3, num_ctas: int = 1,
            passes: "str | Iterable[str] | None" = None, divisible_by_16: Iterable[str] | None = None,
            two_cta: "bool | str" = False, problem_shape: "tuple[int, int, int] | None" = None,
            **options: Any) -> CompileResult:
    """Compile a kernel for `target` without a GPU, with bwtriton's passes in Triton's pipeline.

    `fn_or_path` is a `@triton.jit`/`@gluon.jit` function (then `signature` maps argument names to Triton types,
    e.g. ``{"a_ptr": "*fp16", "M": "i32"}``, and `constexprs` gives constexpr values) or a path to a .ttir/.ttgir
    file. Pointer and integer arguments are assumed 16-byte divisible, as `@triton.jit` specialises them at launch
    for aligned tensors and sizes; pass `divisible_by_16=[...]` to choose. `passes` selects passes (see
    `bwtriton.pipeline.resolve_passes`). `two_cta=True` asks for 2-CTA (``cta_group::2``) MMAs on tcgen05 targets:
    it compiles with ``num_ctas=2`` and adds the ``pair-ctas`` pass (elsewhere it changes nothing, so one kernel
    source serves every target). ``two_cta="auto"`` pairs only when `bwtriton.pairing.should_pair` says the problem
    (`problem_shape=(M, N, K)`, tile from the BLOCK_M/BLOCK_N constexprs) is large and tail-light enough.
    Extra keyword options go to Triton (e.g. ``maxnreg=168``).
    """
    import triton

    tgt = get_target(target)
    if two_cta == "auto":
        two_cta = _auto_two_cta(tgt, problem_shape, constexprs or {})
    elif two_cta not in (True, False):
        raise InputError(f"two_cta must be True, False or 'auto', got {two_cta!r}")
    if two_cta and tgt.has_tcgen05:
        if num_ctas not in (1, 2):
            raise InputError(f"two_cta=True pairs 2 CTAs per cluster; num_ctas={num_ctas} conflicts with it")
        num_ctas = 2
    selection = resolve_passes(passes, tgt)
    if two_cta and tgt.has_tcgen05:
        selection = selection.with_pass("pair-ctas")
    opts = dict(num_warps=num_warps, num_stages=num_stages, num_ctas=num_ctas, **options)
    if isinstance(fn_or_path, (str, os.PathLike)):
        path = Path(fn_or_path)
        if path.suffix not in (".ttir", ".ttgir"):
            raise InputError(f"{path}: can compile .ttir/.ttgir files or @triton.jit functions, not "
                             f"{path.suffix or 'extensionless'} files (for a .py kernel use `bwtriton compile "
                             f"FILE.py:KERNEL`)")
        if not path.exists():
            raise InputError(f"{path}: no such file")
        src: Any = str(path)
        opts = {k: v for k, v in opts.items() if k not in ("num_warps", "num_ctas")}  # taken from the module
    else:
        if signature is None:
            raise InputError("signature= is required for a kernel function: map each non-constexpr argument to a "
                             "Triton type, e.g. {'a_ptr': '*fp16', 'M': 'i32'}")
        src = build_source(fn_or_path, signature, constexprs, divisible_by_16)

    from triton._C.libtriton import get_cache_invalidating_env_vars
    env_vars = {**get_cache_invalidating_env_vars(), "BWTRITON_PIPELINE": selection.key()}
    native = _NativeStderr()
    try:
        with stages_hook(selection, tgt), native:
            kernel = triton.compile(src, target=tgt.gpu_target(), options=opts, _env_vars=env_vars)
    except CompileError:
        raise
    except triton.compiler.errors.CompilationError as exc:
        raise CompileError(f"Triton's front end rejected the kernel:\n{exc}") from None
    except Exception as exc:
        diag = _diagnostic_tail(native.text)
        where = f"\n--- compiler diagnostics (BWTRITON_VERBOSE=1 shows all) ---\n{diag}" if diag else ""
        raise CompileError(f"Triton failed compiling for {tgt.name}: {type(exc).__name__}: {exc}{where}") from exc
    return CompileResult(kernel=kernel, target=tgt, selection=selection)
