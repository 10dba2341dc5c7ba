"""`bwtriton snapshot`: compile a corpus of kernels for some targets and record what was emitted (see census.py),
one record per kernel x config x target, in parallel and incrementally.

Kernels come from files that declare ``BWTRITON_SPECS = {"kernel": spec | [spec, ...]}`` (a spec is what
`bwtriton.compile` takes: signature, constexprs, num_warps, ...; an optional "name" labels the config), from
``FILE.py:KERNEL``, or from PTX corpus modules that define ``corpus_kernels()`` (name -> callable returning sm_100a
PTX; these are recorded for sm_100a only).

Incremental: each worker compiles (Triton's own cache makes an unchanged compile cheap), hashes the stages, and
reuses the cached analysis (ptxas -v, SASS, verifier, census) when the cache entry for kernel+config+target+passes+
Triton version has the same stage hashes.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import hashlib
import json
import multiprocessing
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..driver import compile as bw_compile
from ..errors import BwTritonError, InputError, suggest
from ..loading import SPEC_KEYS, import_kernel_file, kernel_file_contents
from ..optcompat.diagnostics import captured_stderr
from ..ptx import parse_ptx
from ..specialize import build_source
from ..targets import get_target
from ..userfiles import read_text
from ..compat.versions import installed_text
from ..version import __version__
from . import census
from .atomic import write_atomic

FORMAT_VERSION = 2  # 2: records carry their specialisation; stage hashes of canonical text


@dataclass(frozen=True)
class Job:
    """One thing to compile and record (picklable, so it can go to a worker process)."""

    file: str
    kernel: str
    config: str
    config_index: int
    target: str
    passes: str
    kind: str = "jit"  # "jit" (BWTRITON_SPECS) or "ptx" (a corpus_kernels() entry)

    @property
    def key(self) -> str:
        return f"{self.file}:{self.kernel}[{self.config}]@{self.target}"


# --------------------------------------------------------------------------------------------------------------
# Finding the kernels
# --------------------------------------------------------------------------------------------------------------

#: Keys a snapshot config may hold: what `bwtriton compile` reads from BWTRITON_SPECS, plus a config's label and
#: the 2-CTA request (`bwtriton.compile(two_cta=...)`).
CONFIG_KEYS = (*SPEC_KEYS, "name", "two_cta")


def kernel_configs(module: Any, kernel: str) -> list[dict]:
    """The configs of `kernel` in the module's BWTRITON_SPECS (a dict is one config, a list several); a key no
    compile reads is an error rather than a silently different compile."""
    entry = getattr(module, "BWTRITON_SPECS", {}).get(kernel)
    if entry is None:
        return []
    configs = [dict(entry)] if isinstance(entry, dict) else [dict(e) for e in entry]
    for config in configs:
        unknown = [k for k in config if k not in CONFIG_KEYS]
        if unknown:
            raise InputError(f"BWTRITON_SPECS[{kernel!r}] has unknown key(s) {', '.join(map(repr, unknown))}."
                             f"{suggest(unknown[0], CONFIG_KEYS)} Valid keys: {', '.join(CONFIG_KEYS)}.")
    return configs


def _config_name(spec: dict, index: int, count: int) -> str:
    return str(spec.get("name") or ("default" if count == 1 else f"cfg{index}"))


def _display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def discover_jobs(inputs: Iterable[str], targets: list[str], passes: str,
                  skipped: "list[tuple[str, str]] | None" = None) -> list[Job]:
    """Jobs for every kernel config in `inputs` (files, FILE.py:KERNEL, folders) x `targets`. A folder's .py files
    are read (parsed, not run) and only kernel files are imported; each file passed over is appended to `skipped`
    as (path, why). A file named outright must declare kernels."""
    jobs: list[Job] = []
    skipped = [] if skipped is None else skipped
    for item in inputs:
        path_text, _, only = item.rpartition(":") if ".py:" in item else (item, "", "")
        path = Path(path_text)
        if not path.exists():
            raise InputError(f"{path}: no such file or folder (name kernel files, FILE.py:KERNEL or folders)")
        if path.is_dir():
            if only:
                raise InputError(f"{path} is a folder; FILE.py:KERNEL names a kernel in a .py file")
            for file in sorted(path.rglob("*.py")):
                why = _why_not_a_kernel_file(file)
                if why:
                    skipped.append((_display_path(file), why))
                else:
                    jobs.extend(_jobs_of_file(file, only, targets, passes, named=False))
        else:
            jobs.extend(_jobs_of_file(path, only, targets, passes, named=True))
    if not jobs:
        raise InputError(f"no kernels found in {' '.join(inputs)} (declare BWTRITON_SPECS = {{'kernel': {{"
                         f"'signature': ..., 'constexprs': ...}}}} in the file, or give a corpus module with "
                         f"corpus_kernels())")
    return jobs


def _why_not_a_kernel_file(file: Path) -> str:
    """'' for a file a folder snapshot imports (it declares BWTRITON_SPECS or corpus_kernels()), else why not:
    decided by parsing, so a helper script beside the kernels never runs."""
    try:
        found = kernel_file_contents(read_text(file, "Python", allow_empty=True))
    except InputError as exc:  # binary or unreadable: not a kernel file, and no reason to stop the others
        return f"unreadable ({exc})"
    if found & {"specs", "corpus"}:
        return ""
    if "jit" in found:
        return "@triton.jit kernels but no BWTRITON_SPECS to compile them with"
    return "no BWTRITON_SPECS, @triton.jit function or corpus_kernels()"


def _jobs_of_file(file: Path, only: str, targets: list[str], passes: str, named: bool) -> list[Job]:
    if file.suffix != ".py":
        raise InputError(f"{file}: not a Python file (snapshot reads .py kernel files with BWTRITON_SPECS or "
                         f"corpus_kernels(), and folders of them)")
    read_text(file, "Python")  # binary, empty or unreadable files fail here with their own message
    module = import_kernel_file(file)
    specs = getattr(module, "BWTRITON_SPECS", None)
    if named and specs is None and not hasattr(module, "corpus_kernels"):
        raise InputError(f"{file} declares no kernels (add BWTRITON_SPECS = {{'kernel': {{'signature': ..., "
                         f"'constexprs': ...}}}}, or define corpus_kernels())")
    shown = _display_path(file)
    jobs = []
    for kernel in specs or {}:
        if only and kernel != only:
            continue
        configs = kernel_configs(module, kernel)
        for i, spec in enumerate(configs):
            jobs += [Job(shown, kernel, _config_name(spec, i, len(configs)), i, t, passes) for t in targets]
    if hasattr(module, "corpus_kernels") and "sm_100a" in targets:
        for name in module.corpus_kernels():
            if not only or name == only:
                jobs.append(Job(shown, name, "ptx", 0, "sm_100a", passes, kind="ptx"))
    if only and not jobs:
        raise InputError(f"{file} has no kernel {only!r} in BWTRITON_SPECS or corpus_kernels() (kernels there: "
                         f"{', '.join(list(specs or {})) or 'none'})")
    return jobs


# --------------------------------------------------------------------------------------------------------------
# Compiling one job
# --------------------------------------------------------------------------------------------------------------

def _specialisation_args(spec: dict) -> dict[str, Any]:
    """The 16-byte divisibility a config asks for, given to every mode alike (a diff between modes must not
    measure a different integer specialisation)."""
    return {"divisible_by_16": spec.get("divisible_by_16"), "example": spec.get("example")}


def _compile_plain(fn: Any, spec: dict, target: str) -> dict[str, Any]:
    """Triton alone, no bwtriton hook (works with Triton versions our pipeline hook was not written for)."""
    import triton
    args = _specialisation_args(spec)
    src, chosen = build_source(fn, spec.get("signature", {}), spec.get("constexprs", {}), args["divisible_by_16"],
                               args["example"])
    opts = {k: spec[k] for k in ("num_warps", "num_stages", "num_ctas") if k in spec}
    kernel = triton.compile(src, target=get_target(target).gpu_target(), options=opts)
    return {**kernel.asm, "_metadata": kernel.metadata._asdict(), "_specialisation": chosen}


def compile_job(job: Job) -> tuple[dict[str, Any], float]:
    """Stage name -> text/bytes for one job (plus `_metadata` and the `_specialisation` chosen), and the compile
    wall time in seconds."""
    module = import_kernel_file(job.file)
    start = time.perf_counter()
    if job.kind == "ptx":
        asm = {"ptx": module.corpus_kernels()[job.kernel]()}
        return asm, time.perf_counter() - start
    spec = kernel_configs(module, job.kernel)[job.config_index]
    fn = getattr(module, job.kernel)
    if job.passes == "none":
        asm = _compile_plain(fn, spec, job.target)
    else:
        opts = {k: spec[k] for k in ("num_warps", "num_stages", "num_ctas", "two_cta") if k in spec}
        res = bw_compile(fn, signature=spec.get("signature", {}), constexprs=spec.get("constexprs", {}),
                         target=job.target, passes=None if job.passes == "default" else job.passes,
                         **_specialisation_args(spec), **opts)
        asm = {**res.asm, "_metadata": res.metadata, "_specialisation": res.specialisation}
    return asm, time.perf_counter() - start


def specialisation_record(chosen: Any) -> "dict[str, Any] | None":
    """What a record says about the integer specialisation: the arguments compiled as 16-byte divisible and
    where that came from ('example', 'explicit', 'assumed'); None for PTX corpus entries (nothing compiled)."""
    if chosen is None:
        return None
    return {"divisible_by_16": list(chosen.divisible), "source": chosen.source}


def _metadata(asm: dict) -> dict:
    md = asm.get("_metadata")
    if md is None and "json" in asm:
        md = json.loads(asm["json"]) if isinstance(asm["json"], str) else asm["json"]
    return md or {}


def analyse(job: Job, asm: dict[str, Any]) -> dict[str, Any]:
    """Everything a record holds except timing, from the compiled stages."""
    tgt = get_target(job.target)
    ptx = asm["ptx"]
    module = parse_ptx(ptx)
    resources, cubin = census.ptxas_resources(ptx, job.target, tgt.capability)
    md = _metadata(asm)
    resources.update({"shared_bytes": md.get("shared"), "tmem_columns": md.get("tmem_size"),
                      "num_warps": md.get("num_warps"), "num_ctas": md.get("num_ctas")})
    sass_text = _sass(asm.get("cubin") or cubin)
    stages = {k: v for k, v in asm.items() if not k.startswith("_") and k != "cubin"}
    return {"specialisation": specialisation_record(asm.get("_specialisation")),
            "ptx_version": module.version, "census": census.ptx_census(module),
            "descriptors": census.decoded_descriptors(module, job.target) if tgt.has_tcgen05 else {},
            "resources": resources, "sass": census.sass_histogram(sass_text),
            "findings": census.verifier_findings(module, job.target),
            "hashes": census.stage_hashes({**stages, "sass": sass_text})}


def _sass(cubin: bytes) -> str:
    from triton.tools.disasm import get_sass
    return get_sass(cubin) if cubin else ""


# --------------------------------------------------------------------------------------------------------------
# Cache
# --------------------------------------------------------------------------------------------------------------

def analysis_digest() -> str:
    """Hash of the code that turns compiled stages into a record (regress/, verify/, ptx/). Compiler changes,
    bwtriton's passes included, show up in the stage hashes instead, so they need not invalidate the cache."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for sub in ("regress", "verify", "ptx"):
        for path in sorted((root / sub).rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _versions() -> dict[str, str]:
    return {"triton": installed_text() or "none", "bwtriton": __version__, "analysis": analysis_digest()}


def _cache_file(cache_dir: str, job: Job, spec_text: str) -> Path:
    v = _versions()
    text = json.dumps([asdict(job), spec_text, v["triton"], v["analysis"], FORMAT_VERSION])
    return Path(cache_dir) / f"{hashlib.sha256(text.encode()).hexdigest()[:32]}.json"


def _validity_hashes(asm: dict[str, Any]) -> dict[str, str]:
    """Hashes of every stage as compiled (cubin bytes included): equal means the analysis is still right."""
    return {k: hashlib.sha256(v if isinstance(v, bytes) else str(v).encode()).hexdigest()[:16]
            for k, v in sorted(asm.items()) if not k.startswith("_") and k not in ("json", "source")}


#: What a failing compile or analysis of one kernel raises (Triton's and ptxas's errors included): recorded as that
#: kernel's failure. Anything else is a bug of ours and propagates.
_COMPILE_FAILURES = (BwTritonError, RuntimeError, KeyError, ValueError, TypeError, AttributeError, ImportError,
                     FileNotFoundError)


def _error_record(job: Job, exc: BaseException, native: list[str]) -> dict[str, Any]:
    """The record of a job that failed to compile: the exception's first line and Triton's C++ error, if any."""
    first = (str(exc).strip().splitlines() or [""])[0]
    cause = next((l.strip() for l in "".join(native).splitlines() if ": error: " in l
                  and "Failures have been detected" not in l), "")
    cause = f" ({cause.split(': error: ', 1)[1][:200]})" if cause else ""
    return {"file": job.file, "kernel": job.kernel, "config": job.config, "target": job.target,
            "passes": job.passes, "error": f"{type(exc).__name__}: {first[:300]}{cause}"}


def read_cache_entry(path: Path, job: "Job | None" = None) -> tuple["dict | None", str]:
    """(the entry, '') for a readable cache entry (of `job`, when given); (None, why) for a damaged or mismatched
    one, which is deleted: a cache entry is a copy of work that can be redone, so its damage is a note, never a
    kernel's failure."""
    try:
        entry = json.loads(path.read_text())
        if not (isinstance(entry, dict) and isinstance(entry.get("validity"), dict)
                and isinstance(entry.get("record"), dict)):
            why = "not a snapshot cache entry"
        elif job is not None and any(entry["record"].get(k) != getattr(job, k) for k in _IDENTITY):
            why = f"it holds {entry['record'].get('file')}:{entry['record'].get('kernel')}, not this kernel"
        else:
            return entry, ""
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        why = f"{type(exc).__name__}: {exc}"
    try:
        path.unlink()
    except OSError:
        pass
    return None, f"damaged cache entry {path.name} discarded and recomputed ({why[:120]})"


#: Record fields that name the job a record belongs to.
_IDENTITY = ("file", "kernel", "config", "target", "passes")


@contextlib.contextmanager
def _always_compile() -> Iterator[None]:
    """Triton compiles afresh instead of answering from its cache (its TRITON_ALWAYS_COMPILE switch)."""
    before = os.environ.get("TRITON_ALWAYS_COMPILE")
    os.environ["TRITON_ALWAYS_COMPILE"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["TRITON_ALWAYS_COMPILE"]
        else:
            os.environ["TRITON_ALWAYS_COMPILE"] = before


def unstable_stages(job: Job, hashes: dict[str, str]) -> list[str]:
    """The stages whose canonical hash differs when `job` is compiled once more, afresh: what stays
    nondeterministic after canonicalisation (a diff reports it as such, not as a change)."""
    if job.kind != "jit":
        return []
    with captured_stderr(), _always_compile():
        again, _ = compile_job(job)
    stages = {k: v for k, v in again.items() if not k.startswith("_") and k != "cubin"}
    again_hashes = census.stage_hashes({**stages, "sass": _sass(again.get("cubin") or b"")})
    return sorted(k for k, h in hashes.items() if k in again_hashes and again_hashes[k] != h)


def run_job(job: Job, cache_dir: str | None, check_determinism: bool = False) -> dict[str, Any]:
    """Compile and record one job (the worker function); errors become a record with 'error'. A damaged cache
    entry is recomputed and leaves a `cache_note` in the record. `check_determinism` compiles once more and
    lists the stages that came out differently under 'nondeterministic'."""
    record = _run_job(job, cache_dir)
    if check_determinism and "error" not in record:
        try:
            record["nondeterministic"] = unstable_stages(job, record["hashes"])
        except (BwTritonError, RuntimeError) as exc:  # compiled once, failed the second time: say so
            record["nondeterministic"] = [f"recompile failed: {type(exc).__name__}: {exc}"[:200]]
    return record


def _run_job(job: Job, cache_dir: str | None) -> dict[str, Any]:
    native: list[str] = []
    try:
        with captured_stderr() as native:  # Triton's C++ diagnostics and reproducers: quoted on failure only
            asm, seconds = compile_job(job)
        spec_text = repr(kernel_configs(import_kernel_file(job.file), job.kernel)[job.config_index]) \
            if job.kind == "jit" else job.kernel
    except _COMPILE_FAILURES as exc:
        return _error_record(job, exc, native)
    valid = _validity_hashes(asm)
    cache = _cache_file(cache_dir, job, spec_text) if cache_dir else None
    note = ""
    if cache and cache.exists():
        cached, note = read_cache_entry(cache, job)
        if cached is not None and cached["validity"] == valid:
            return {**cached["record"], "compile_seconds": round(seconds, 3), "cached": True}
    try:
        record = {"file": job.file, "kernel": job.kernel, "config": job.config, "target": job.target,
                  "passes": job.passes, **analyse(job, asm)}
    except _COMPILE_FAILURES as exc:  # ptxas rejecting the PTX is this kernel's failure too
        return _error_record(job, exc, native)
    if cache:
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(cache, json.dumps({"validity": valid, "record": record}, default=str))
    return {**record, "compile_seconds": round(seconds, 3), "cached": False, **({"cache_note": note} if note else {})}


# --------------------------------------------------------------------------------------------------------------
# Running a corpus
# --------------------------------------------------------------------------------------------------------------

def _progress(done: int, total: int, label: str, stream=sys.stderr) -> None:
    width = 30
    filled = width * done // max(total, 1)
    head = f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
    room = 100 - len(head)  # within 100 columns, keeping the label's end (kernel, config, target)
    bar = head + (label if len(label) <= room else "..." + label[len(label) - room + 3:])
    if stream.isatty():  # redraw one line; logs get one line per kernel
        stream.write(f"\r{bar:100s}" + ("\n" if done == total else ""))
    else:
        stream.write(bar + "\n")
    stream.flush()


def take_snapshot(jobs: list[Job], *, jobs_n: int = 1, cache_dir: str | None = None,
                  progress: Callable[[int, int, str], None] | None = _progress,
                  check_determinism: bool = False) -> dict[str, Any]:
    """Run every job (kernels x configs x targets, in `jobs_n` worker processes, under this process's Triton) and
    return the snapshot document: the one function a driver over Triton versions or machines calls per batch."""
    records: dict[str, dict] = {}
    started = time.perf_counter()

    def collect(job: Job, rec: dict, n: int) -> None:
        records[job.key] = rec
        if progress:
            progress(n, len(jobs), job.key + (" (cached)" if rec.get("cached") else ""))

    if jobs_n <= 1:
        for n, job in enumerate(jobs, 1):
            collect(job, run_job(job, cache_dir, check_determinism), n)
    else:
        # fork: workers inherit the imported modules; Triton holds no GPU state offline.
        ctx = multiprocessing.get_context("fork")
        with cf.ProcessPoolExecutor(max_workers=jobs_n, mp_context=ctx) as pool:
            futures = {pool.submit(run_job, job, cache_dir, check_determinism): job for job in jobs}
            for n, fut in enumerate(cf.as_completed(futures), 1):
                collect(futures[fut], fut.result(), n)
    return {"format": FORMAT_VERSION, **_versions(), "passes": jobs[0].passes if jobs else None,
            "targets": sorted({j.target for j in jobs}), "wall_seconds": round(time.perf_counter() - started, 2),
            "records": dict(sorted(records.items()))}


def default_cache_dir() -> str:
    return os.environ.get("BWTRITON_SNAPSHOT_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "bwtriton", "snapshots")


VOLATILE_FIELDS = ("compile_seconds", "cached", "cache_note")


def without_timing(doc: dict) -> dict:
    """The snapshot without what changes from run to run (compile times, cache hits): for checked-in files."""
    records = {k: {f: v for f, v in r.items() if f not in VOLATILE_FIELDS} for k, r in doc["records"].items()}
    return {**{k: v for k, v in doc.items() if k != "wall_seconds"}, "records": records}


def write_snapshot(doc: dict, path: str) -> None:
    """Write a snapshot as sorted, indented JSON (line-oriented, so `git diff` of it reads well); the folder must
    exist (`userfiles.check_output_file` says so before the work)."""
    write_atomic(path, json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n")


def load_snapshot(path: str) -> dict:
    """Read a snapshot written by `bwtriton snapshot`; clear errors for files that are not one."""
    text = read_text(path, "snapshot JSON")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON ({exc}); expected a file written by `bwtriton snapshot`") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), dict):
        raise InputError(f"{path}: not a bwtriton snapshot (no 'records'); write one with `bwtriton snapshot`")
    return doc
