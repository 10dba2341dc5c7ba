"""`bwtriton.compile`: offline compilation of Triton/Gluon kernels (or .ttir/.ttgir files) for a named target,
through Triton's pipeline with bwtriton's passes inserted. Needs no GPU."""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from .errors import BwTritonError, CompileError, InputError, UnknownStageError, suggest
from .pairing import should_pair
from .compat.versions import check_supported
from .pipeline import PassSelection, resolve_passes, stages_hook, triton_stage_name
from .specialize import Specialisation, build_source
from .userfiles import make_output_dir, read_text
from .targets import Target, get_target



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
    specialisation: "Specialisation | None" = None
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
        """Key resources: shared memory bytes, TMEM columns, CTAs per cluster, warps; and `repairs`: for each
        repair pass that changed the PTX, at how many places it inserted statements (insert-proxy-fence's
        fences, insert-tcgen05-wait-ld's waits)."""
        md = self.metadata
        return {"kernel": self.name, "target": self.target.name, "num_warps": md.get("num_warps"),
                "num_ctas": md.get("num_ctas"),
                # Triton 3.6's launcher sets the cluster to (num_ctas, 1, 1); it keeps no cluster_dims itself.
                "cluster_dims": md.get("cluster_dims") or (md.get("num_ctas", 1), 1, 1),
                "shared_bytes": md.get("shared"), "tmem_columns": md.get("tmem_size"),
                "divisible_by_16": self.specialisation.describe() if self.specialisation else "(from the IR file)",
                "passes": self.selection.names,
                "repairs": {name: r["count"] for name, r in self.reports.items()
                            if r.get("inserted") and r.get("count")}}

    def write(self, outdir: "str | os.PathLike", stages: Iterable[str] | None = None) -> list[Path]:
        """Write the chosen stages (default: all, plus sass) as `<kernel>.<stage>` files; returns the paths.

        Triton's text of a stage bwtriton rewrote (``ptx_triton``) goes to `<kernel>.triton.<stage>`, so
        `<kernel>.ptx` is always the PTX the cubin was built from."""
        chosen = list(stages) if stages else self.stages + ["sass"]
        data_of = {stage: self.asm[stage] for stage in chosen}  # unknown stages fail before anything is written
        out = make_output_dir(outdir, "-o/--out")  # the named folder only, never missing parents
        written = []
        for stage, data in data_of.items():
            base = stage[:-len(TRITON_SUFFIX)] if stage.endswith(TRITON_SUFFIX) else None
            path = out / (f"{self.name}.triton.{base}" if base else f"{self.name}.{stage}")
            path.write_bytes(data) if isinstance(data, bytes) else path.write_text(data)
            written.append(path)
        return written


#: Suffix of the stage names that keep Triton's own text of a stage bwtriton's passes rewrote ("_triton").
TRITON_SUFFIX = triton_stage_name("")


def _disassemble(cubin: bytes) -> str:
    """SASS of a cubin through Triton's bundled cuobjdump/nvdisasm; a cubin they cannot decode (sm_103a with
    Triton 3.6's tools) is a CompileError naming the architecture and what still works."""
    import subprocess
    from triton.tools.disasm import get_sass
    try:
        return get_sass(cubin)
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or exc.output or b"")
        detail = detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)
        raise CompileError("cannot disassemble this cubin: Triton's bundled cuobjdump/nvdisasm failed"
                           f"{' (' + detail.strip().splitlines()[-1] + ')' if detail.strip() else ''}. Triton 3.6's "
                           "tools decode sm_90a and sm_100a but not sm_103a; the cubin itself is fine (asm['cubin']), "
                           "and asm['ptx'] shows the code. Disassemble with a newer CUDA's cuobjdump -sass, or "
                           "compile for sm_100a to read SASS.") from None


class _Asm(dict):
    """Stage -> IR text (final text under the stage's name, Triton's under ``<stage>_triton`` when bwtriton
    rewrote it), with `sass` produced from the cubin on demand by Triton's bundled cuobjdump."""

    def __init__(self, asm: Mapping[str, Any]):
        super().__init__(asm)

    def __missing__(self, key: str):
        if key == "sass" and "cubin" in self:
            self["sass"] = _disassemble(self["cubin"])
            return self["sass"]
        if key.startswith("bw") and key[2:] + TRITON_SUFFIX in self:  # bwptx etc.: the final text's old name
            return self[key[2:]]
        raise UnknownStageError(f"no stage {key!r}.{suggest(key, self.valid())} Available stages: "
                                f"{', '.join(self.valid())}.")

    def valid(self) -> list[str]:
        """Every stage name that can be read, `sass` after `cubin`, Triton's originals last."""
        names = [n for n in self if not n.endswith(TRITON_SUFFIX) and n != "sass"]
        if "cubin" in self:
            names.insert(names.index("cubin") + 1, "sass")
        return names + [n for n in self if n.endswith(TRITON_SUFFIX)]


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
    return should_pair(*map(int, problem_shape), int(block_m), int(block_n))


def valid_option_names() -> list[str]:
    """Keyword options `bwtriton.compile` accepts: its own, then the fields of Triton's `CUDAOptions`."""
    import dataclasses
    import inspect
    from triton.backends.nvidia.compiler import CUDAOptions
    ours = [n for n, p in inspect.signature(compile).parameters.items()
            if p.kind is p.KEYWORD_ONLY and n not in ("num_warps", "num_stages", "num_ctas")]
    return ours + [f.name for f in dataclasses.fields(CUDAOptions) if f.name not in ours]


def _check_options(num_warps: Any, num_stages: Any, num_ctas: Any, options: Mapping[str, Any]) -> None:
    """Unknown keyword options and launch numbers Triton would assert on are `InputError`s, named."""
    unknown = [k for k in options if k not in valid_option_names()]
    if unknown:
        raise InputError(f"bwtriton.compile has no option {', '.join(map(repr, unknown))}."
                         f"{suggest(unknown[0], valid_option_names())} Valid options: "
                         f"{', '.join(valid_option_names())}.")
    for name, value in (("num_warps", num_warps), ("num_stages", num_stages), ("num_ctas", num_ctas)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "num_stages" else 1):
            raise InputError(f"{name} must be a {'non-negative' if name == 'num_stages' else 'positive'} "
                             f"integer, got {value!r}")
    if num_warps & (num_warps - 1):
        raise InputError(f"num_warps must be a power of 2 (1, 2, 4, 8, 16, 32), got {num_warps}")


def _ir_file_source(path: Path) -> str:
    """A .ttir/.ttgir path checked before Triton's MLIR parser sees it (an empty file crashes that parser)."""
    if path.suffix not in (".ttir", ".ttgir"):
        raise InputError(f"{path}: can compile .ttir/.ttgir files or @triton.jit functions, not "
                         f"{path.suffix or 'extensionless'} files (for a .py kernel use `bwtriton compile "
                         f"FILE.py:KERNEL`)")
    text = read_text(path, path.suffix[1:].upper(), allow_empty=True)  # missing, folder, binary: named errors
    body = "\n".join(ln for ln in text.splitlines() if not ln.strip().startswith("//")).strip()
    if not body:
        raise InputError(f"{path} is empty; write a {path.suffix[1:].upper()} module into it (e.g. "
                         f"`bwtriton compile k.py:kernel -o out/ --stages {path.suffix[1:]}`)")
    if "module" not in body or "tt.func" not in body:
        raise InputError(f"{path} holds no Triton module (no `module` with a `tt.func`); pass the text of a "
                         f"{path.suffix[1:]} stage, e.g. written by `bwtriton compile ... -o out/`")
    return str(path)


def check_resources(result: "CompileResult", num_stages: int | None,
                    constexprs: Mapping[str, Any] | None) -> None:
    """Shared memory and TMEM over the target's per-CTA limits are a `CompileError` now, not a launch failure."""
    md, tgt = result.metadata, result.target
    blocks = ", ".join(f"{k}={v}" for k, v in (constexprs or {}).items() if k.startswith(("BLOCK", "BM", "BN", "BK")))
    knobs = f"lower num_stages{f' (now {num_stages})' if num_stages is not None else ''} or the BLOCK sizes" + \
        (f" ({blocks})" if blocks else "")
    shared = md.get("shared") or 0
    if shared > tgt.max_shared_bytes:
        raise CompileError(f"kernel {result.name} needs {shared} bytes of shared memory per CTA; {tgt.name} allows "
                           f"{tgt.max_shared_bytes} ({tgt.max_shared_bytes // 1024} KiB). To fit, {knobs}.")
    tmem = md.get("tmem_size") or 0
    if tgt.tmem_columns and tmem > tgt.tmem_columns:
        raise CompileError(f"kernel {result.name} allocates {tmem} TMEM columns per CTA; {tgt.name} has "
                           f"{tgt.tmem_columns}. To fit, {knobs}, or use fewer accumulators.")


def _check_kernel_object(fn: Any) -> None:
    """What bwtriton.compile compiles: a @triton.jit / @gluon.jit function (or, handled before, an IR path)."""
    from triton.runtime.jit import JITFunction  # triton loads when a compile starts, not with bwtriton
    if not isinstance(fn, JITFunction):
        raise InputError(f"bwtriton.compile takes a @triton.jit or @gluon.jit function, or a .ttir/.ttgir file "
                         f"path; got {type(fn).__name__} {fn!r:.60} (decorate the kernel with @triton.jit, or "
                         f"pass the IR file's path)")


def _with_constexpr_hint(exc: CompileError, constexprs: Any) -> CompileError:
    """A front-end failure of a kernel given string constexprs starts by naming them: a string where the kernel
    wants a number fails deep in Triton's code generator with an unrelated AttributeError."""
    strings = {k: v for k, v in (constexprs or {}).items() if isinstance(v, str)} \
        if isinstance(constexprs, Mapping) else {}
    if not strings or not str(exc).startswith("Triton's front end rejected"):
        return exc
    given = ", ".join(f"{k}={v!r}" for k, v in strings.items())
    return CompileError(f"constexpr {given} is a string and the kernel failed to compile with it (give a number, "
                        f"e.g. {next(iter(strings))}=128, unless the kernel takes a string)\n{exc}",
                        pass_name=exc.pass_name, findings=exc.findings)


def _front_end_message(exc: BaseException) -> str:
    """The front end's error at each `@jit` call on the path to the failure, outermost first. Triton's own text
    marks only the outermost call site; the reason (a failed reshape, a static_assert) is at the innermost."""
    from triton.compiler.errors import CompilationError
    parts = []
    while isinstance(exc, CompilationError):
        parts.append(str(exc).strip())
        exc = exc.__cause__
    return "\n-- in the function called there --\n".join(parts)


def _run_triton(src: Any, tgt: Target, selection: PassSelection, opts: dict[str, Any]):
    """triton.compile with our stage hook, its failures turned into short `CompileError`s."""
    check_supported()
    import triton
    from triton._C.libtriton import get_cache_invalidating_env_vars
    env_vars = {**get_cache_invalidating_env_vars(), "BWTRITON_PIPELINE": selection.key()}
    native = _NativeStderr()
    try:
        with stages_hook(selection, tgt), native:
            return triton.compile(src, target=tgt.gpu_target(), options=opts, _env_vars=env_vars)
    except BwTritonError:  # ours, raised by a pass inside Triton's stage: already names the problem and the fix
        raise
    except triton.compiler.errors.CompilationError as exc:
        raise CompileError(f"Triton's front end rejected the kernel:\n{_front_end_message(exc)}") from None
    except Exception as exc:
        diag = _diagnostic_tail(native.text)
        where = f"\n--- compiler diagnostics (BWTRITON_VERBOSE=1 shows all) ---\n{diag}" if diag else ""
        raise CompileError(f"Triton failed compiling for {tgt.name}: {type(exc).__name__}: {exc}{where}") from exc


def compile(fn_or_path: Any, *, signature: Mapping[str, str] | None = None,  # noqa: A001
            constexprs: Mapping[str, Any] | None = None, target: "str | Target" = "sm_100a",
            num_warps: int = 4, num_stages: int = 3, num_ctas: int = 1,
            passes: "str | Iterable[str] | None" = None, divisible_by_16: Iterable[str] | None = None,
            example: Mapping[str, int] | None = None,
            two_cta: "bool | str" = False, problem_shape: "tuple[int, int, int] | None" = None,
            check_limits: bool = True, clc: bool = False, **options: Any) -> CompileResult:
    """Compile a kernel for `target` without a GPU, with bwtriton's passes in Triton's pipeline.

    `fn_or_path` is a `@triton.jit`/`@gluon.jit` function (then `signature` maps argument names to Triton types,
    e.g. ``{"a_ptr": "*fp16", "M": "i32"}``, and `constexprs` gives constexpr values) or a path to a .ttir/.ttgir
    file (a .ttgir module carries its num_warps/num_ctas, which win over the arguments; a .ttir one takes them).
    16-byte divisibility is specialised as `@triton.jit` would for a launch: `example={"M": 200, ...}` gives
    the integer values (pointers count as aligned; integers not given are not assumed divisible),
    `divisible_by_16=[...]` names the arguments outright, and with neither every pointer and integer is assumed
    divisible (aligned tensors and sizes); `summary()["divisible_by_16"]` says which were. `passes` selects passes
    (see `bwtriton.pipeline.resolve_passes`). `two_cta=True` asks for 2-CTA (``cta_group::2``) MMAs on tcgen05
    targets: it compiles with ``num_ctas=2`` and adds the ``pair-ctas`` pass (elsewhere it changes nothing, so one
    kernel source serves every target). ``two_cta="auto"`` pairs only when `bwtriton.pairing.should_pair` says the
    problem (`problem_shape=(M, N, K)`, tile from the BLOCK_M/BLOCK_N constexprs) is large and tail-light enough.
    ``clc=True`` rewrites a one-tile-per-program kernel into a Cluster Launch Control persistent loop on
    sm_100a/sm_103a (same arguments and grid; `bwtriton.language.clc.make_persistent`, docs/clc.md) and leaves
    it as it is elsewhere. Other keyword options are Triton's `CUDAOptions` fields (e.g. ``maxnreg=168``); any other name is an error.
    Shared memory or TMEM beyond the target's per-CTA limits is a `CompileError` (such a cubin cannot launch);
    `check_limits=False` keeps the kernel anyway, to inspect what Triton emits for it.
    """
    tgt = get_target(target)
    _check_options(num_warps, num_stages, num_ctas, options)
    if two_cta == "auto":
        two_cta = _auto_two_cta(tgt, problem_shape, constexprs or {})
    elif two_cta not in (True, False):
        raise InputError(f"two_cta must be True, False or 'auto', got {two_cta!r}")
    if two_cta and tgt.has_tcgen05:
        if num_ctas not in (1, 2):
            raise InputError(f"two_cta=True pairs 2 CTAs per cluster; num_ctas={num_ctas} conflicts with it")
        num_ctas = 2
    if clc:
        from .language.clc import make_persistent, supported  # heavy: imports Triton
        fn_or_path = make_persistent(fn_or_path, num_ctas) if supported(tgt) else fn_or_path
    selection = resolve_passes(passes, tgt)
    if two_cta and tgt.has_tcgen05:
        selection = selection.with_pass("pair-ctas")
    if "verify-tcgen05" in selection.names:  # limits are checked below, with the knobs named (or not at all)
        selection = selection.with_pass("verify-tcgen05", limits=False)
    opts = dict(num_warps=num_warps, num_stages=num_stages, num_ctas=num_ctas, **options)
    spec = None
    if isinstance(fn_or_path, (str, os.PathLike)):
        src: Any = _ir_file_source(Path(fn_or_path))
        if src.endswith(".ttgir"):  # a TTGIR module carries ttg.num-warps / ttg.num-ctas; a TTIR one does not
            opts = {k: v for k, v in opts.items() if k not in ("num_warps", "num_ctas")}
    else:
        _check_kernel_object(fn_or_path)
        if signature is None:
            raise InputError("signature= is required for a kernel function: map each non-constexpr argument to a "
                             "Triton type, e.g. {'a_ptr': '*fp16', 'M': 'i32'}")
        src, spec = build_source(fn_or_path, signature, constexprs, divisible_by_16, example)
    try:
        kernel = _run_triton(src, tgt, selection, opts)
    except CompileError as exc:
        raise _with_constexpr_hint(exc, constexprs) from None
    result = CompileResult(kernel=kernel, target=tgt, selection=selection, specialisation=spec)
    if check_limits:
        check_resources(result, num_stages, constexprs if isinstance(constexprs, Mapping) else None)
    return result
