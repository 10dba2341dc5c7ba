"""The tree's layering rules (docs/architecture.md), checked from the source text with `ast`, no imports run:
the library reaches the passes only through `bwtriton.pipeline`; modules of python/bwtriton and lib_passes import
each other without cycles, even through function-local imports (late binding hides a cycle, it does not remove
it); a function-local import of a bwtriton module says why it is local; lit files are small hand-written inputs,
except the named real compiler outputs a test must read whole."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "python" / "bwtriton"
PASSES = ROOT / "lib_passes"  # importable as bwtriton.passes (python/bwtriton/passes links here)

#: Real compiler outputs that a lit test reads whole (shortening them would test a different kernel).
LONG_LIT_FILES = {
    "verify_tcgen05/Inputs/triton39_tma_matmul.ptx",  # Triton 3.9's PTX of the TMA matmul, checked by triton39.test
}
MAX_LIT_LINES = 150

#: Function-local imports of bwtriton modules that do not yet say why they are local (module, import text) ->
#: occurrences: bwtriton.cli and bwtriton.verify, whose owners move them to module level or give each a trailing
#: `# reason` (optional or heavy dependency, or the cycle it avoids). Everywhere else, the emulator included, has
#: none. The test fails when an entry is no longer needed.
UNEXPLAINED_LOCAL_IMPORTS = {
    ('bwtriton.cli', 'from . import __version__'): 1,
    ('bwtriton.cli', 'from .demo import run_demo'): 1,
    ('bwtriton.cli', 'from .driver import compile as bw_compile'): 1,
    ('bwtriton.cli', 'from .loading import add_kernel_arguments'): 1,
    ('bwtriton.cli', 'from .loading import compile_keywords, load_kernel'): 1,
    ('bwtriton.cli', 'from .targets import TARGETS'): 1,
    ('bwtriton.cli', 'from .targets import TARGETS, target_name'): 1,
    ('bwtriton.cli', 'from .triton_passes import triton_pass_table'): 1,
    ('bwtriton.cli', 'from bwtriton.pipeline import all_passes'): 1,
    ('bwtriton.cli', 'from bwtriton.tmem import write_tmem_map'): 1,
    ('bwtriton.demo', 'from . import compile as bw_compile'): 3,
    ('bwtriton.demo', 'from .examples.matmul import matmul_constexprs, matmul_kernel, matmul_signature'): 1,
    ('bwtriton.demo', 'from .examples.runners import run_fp4_scaled'): 1,
    ('bwtriton.demo', 'from .examples.runners import run_matmul'): 1,
    ('bwtriton.demo', 'from .examples.scaled import fp4_scaled_constexprs, fp4_scaled_matmul_kernel, fp4_scaled_signature'): 1,
    ('bwtriton.demo', 'from .examples.tma_matmul import matmul_tma_bt_kernel, tma_bt_spec'): 1,
    ('bwtriton.demo', 'from .pipeline import disable, enable'): 1,
    ('bwtriton.demo', 'from .targets import get_target'): 1,
    ('bwtriton.kernels.nvfp4_linear', 'from ..formats.e2m1 import E2M1_MAX'): 1,
    ('bwtriton.kernels.nvfp4_linear', 'from ..formats.nvfp4 import E4M3_MAX, FP32_MAX'): 1,
    ('bwtriton.opt', 'from .mlir import load_module'): 1,
    ('bwtriton.opt', 'from .mlir import module_attr_int'): 1,
    ('bwtriton.opt', 'from .pipeline import PassSelection, run_stage_passes'): 1,
    ('bwtriton.opt', 'from .pipeline import all_passes'): 2,
    ('bwtriton.opt', 'from .pipeline import parse_pass_options'): 1,
    ('bwtriton.opt', 'from .pipeline import parse_pass_spec'): 1,
    ('bwtriton.opt', 'from .pipeline import split_top_level_commas'): 1,
    ('bwtriton.opt', 'from .targets import target_for_capability'): 1,
    ('bwtriton.opt', 'from .triton_passes import triton_pass_table'): 2,
    ('bwtriton.regress.snapshot', 'from . import census'): 1,
    ('bwtriton.regress.snapshot', 'from .. import __version__'): 1,
    ('bwtriton.regress.snapshot', 'from ..driver import compile as bw_compile'): 1,
    ('bwtriton.regress.snapshot', 'from ..targets import get_target'): 2,
    ('bwtriton.regress.snapshot', 'from bwtriton.ptx import parse_ptx'): 1,
    ('bwtriton.regress.snapshot_cli', 'from .diff import diff_snapshots, parse_fail_on, render'): 1,
    ('bwtriton.regress.snapshot_cli', 'from .snapshot import _progress, default_cache_dir, discover_jobs, take_snapshot, without_timing, write_snapshot'): 1,
    ('bwtriton.regress.snapshot_cli', 'from .snapshot import load_snapshot'): 1,
    ('bwtriton.report', 'from bwtriton.pipeline import all_passes'): 1,
    ('bwtriton.report', 'from bwtriton.ptx import parse_ptx'): 1,
    ('bwtriton.report', 'from bwtriton.tmem import write_tmem_map'): 1,
    ('bwtriton.report', 'from bwtriton.verify.explain import explain_mmas'): 1,
    ('bwtriton.verify.checks.launch', 'from .dataflow import IMPRECISE, run_dataflow'): 1,
    ('bwtriton.verify.checks.launch', 'from bwtriton.ptx.smt import z3'): 1,
    ('bwtriton.verify.checks.mbarrier_phase', 'from .async_copy import _arrives'): 1,
    ('bwtriton.verify.cli', 'from . import verify_module'): 1,
    ('bwtriton.verify.cli', 'from .checks.resources import TCGEN05_TARGETS'): 1,
    ('bwtriton.verify.cli', 'from .explain import explain_mmas, format_explain'): 1,
    ('bwtriton.verify.cli', 'from bwtriton.ptx import parse_ptx'): 2,
    ('bwtriton.verify.cli', 'from bwtriton.targets import TARGETS'): 1,
}


def _module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the library and of the passes."""
    modules = {}
    for base, prefix in ((LIBRARY, "bwtriton"), (PASSES, "bwtriton.passes")):
        for path in base.rglob("*.py"):
            rel = path.relative_to(base)
            if rel.parts[0] == "passes" and base == LIBRARY:  # the link to lib_passes, named through PASSES
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([prefix, *parts])] = path
    return modules


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(test, (ast.Name, ast.Attribute)) and "TYPE_CHECKING" in ast.unparse(test)


def _is_main_guard(node: ast.AST) -> bool:
    """`if __name__ == "__main__":` -- runs only when the file is a script, never on import."""
    return isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(node.test)


def _parse(path: Path) -> ast.Module:
    """The module's syntax tree without its `if __name__ == "__main__":` block."""
    tree = ast.parse(path.read_text(), str(path))
    tree.body = [n for n in tree.body if not _is_main_guard(n)]
    return tree


def _module_level_statements(body: list[ast.stmt]):
    """Statements that run on import: the body, and the bodies of top-level if/try (not `if TYPE_CHECKING`)."""
    for node in body:
        if isinstance(node, ast.If) and not _is_type_checking(node):
            yield from _module_level_statements(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _module_level_statements(node.body + node.orelse + node.finalbody)
        else:
            yield node


def _imported(module: str, path: Path, node: ast.stmt, known: set[str]) -> list[str]:
    """The known modules an import statement of `module` loads (a package's `from . import x` loads x)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.level and node.module else (package if node.level else node.module)
        # `from pkg import sub` loads pkg.sub when that is a module, else reads an attribute of pkg itself
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    else:
        return []
    return [n for n in names if n in known]


def _function_local_imports() -> list[tuple[str, int, tuple[str, ...], str]]:
    """(module, line, bwtriton modules it loads, source text of its last line) of every import inside a function."""
    files = _module_files()
    found = set()
    for module, path in files.items():
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines), str(path))
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):  # nested functions' imports are seen twice; the set keeps one
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        deps = tuple(_imported(module, path, node, set(files)))
                        found.add((module, node.lineno, deps, lines[node.end_lineno - 1]))
    return sorted(found)


def _imports(only_module_level: bool) -> dict[str, set[str]]:
    files = _module_files()
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = _parse(path)
        nodes = _module_level_statements(tree.body) if only_module_level else ast.walk(tree)
        graph[module] = {dep for node in nodes for dep in _imported(module, path, node, set(files)) if dep != module}
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search, white/grey/black)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_only_the_pipeline_imports_the_passes():
    graph = _imports(only_module_level=False)
    offenders = sorted(m for m, deps in graph.items()
                       if not m.startswith("bwtriton.passes") and m != "bwtriton.pipeline"
                       and any(d == "bwtriton.passes" or d.startswith("bwtriton.passes.") for d in deps))
    assert not offenders, f"import bwtriton.passes only in bwtriton.pipeline (its API re-exports what callers need): " \
                          f"{offenders}"


def test_no_import_cycles_among_library_and_pass_modules():
    graph = _imports(only_module_level=True)
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle (module-level imports): " + " -> ".join(cycle or [])


def test_no_import_cycles_even_through_function_local_imports():
    graph = _imports(only_module_level=False)
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle (counting function-local imports): " + " -> ".join(cycle or [])


def test_function_local_imports_of_bwtriton_modules_say_why():
    """A function-local import of a bwtriton module carries a trailing comment giving its reason."""
    unexplained = [(m, n, t.strip()) for m, n, deps, t in _function_local_imports() if deps and "#" not in t]
    in_emu = [u for u in unexplained if u[0].startswith("bwtriton.emu")]
    assert not in_emu, f"function-local imports without a reason in the emulator: {in_emu}"
    seen: dict = {}
    for m, _, t in unexplained:
        seen[(m, t)] = seen.get((m, t), 0) + 1
    new = {k: v for k, v in seen.items() if v > UNEXPLAINED_LOCAL_IMPORTS.get(k, 0)}
    assert not new, f"function-local imports without a `# reason` comment (or move them to module level): {new}"
    fixed = {k: v for k, v in UNEXPLAINED_LOCAL_IMPORTS.items() if seen.get(k, 0) < v}
    assert not fixed, f"these have a reason or are gone now: lower their counts in UNEXPLAINED_LOCAL_IMPORTS: {fixed}"


def test_the_local_import_reader_sees_imports_inside_functions():
    found = {(m, t.strip()) for m, _, deps, t in _function_local_imports() if deps}
    assert ("bwtriton.emu.integration.driver",
            "from ...pipeline import enable  # heavy: the pass pipeline (Triton's compiler), loaded when a driver "
            "activates") in found


def test_the_cycle_finder_finds_a_cycle():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_import_graph_sees_relative_and_package_imports():
    graph = _imports(only_module_level=True)
    assert "bwtriton.passes" in graph["bwtriton.pipeline"]  # `from . import passes`
    assert "bwtriton.passes.plan_tmem" in graph["bwtriton.passes"]  # `from .plan_tmem import ...` in lib_passes
    assert "bwtriton.errors" in graph["bwtriton.passes"]  # absolute import from lib_passes into the library


@pytest.mark.parametrize("path", sorted(p for p in (ROOT / "test_lit").rglob("*")
                                        if p.is_file() and "Output" not in p.parts and p.suffix != ".pyc"),
                         ids=lambda p: str(p.relative_to(ROOT / "test_lit")))
def test_lit_files_are_small(path: Path):
    rel = str(path.relative_to(ROOT / "test_lit"))
    lines = len(path.read_text(errors="replace").splitlines())
    if rel in LONG_LIT_FILES:
        assert lines > MAX_LIT_LINES, f"{rel} is short now ({lines} lines): drop it from LONG_LIT_FILES"
        return
    assert lines <= MAX_LIT_LINES, f"{rel}: {lines} lines; lit inputs are minimal hand-written cases (split with " \
                                   f"`// -----`), or list a real compiler output in LONG_LIT_FILES"
