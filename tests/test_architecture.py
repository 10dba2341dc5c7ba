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
    # hand-written, several cases each; over the limit because each case is a whole 2-CTA / pipelined kernel body
    # (the CHECK lines sit in the file's head, so splitting means moving them per case: still to do)
    "verify_tcgen05/pair_tx_balance.ptx", "verify_tcgen05/accumulator_exit.ptx",
    "verify_tcgen05/stage_reuse_entry.ptx",
}
MAX_LIT_LINES = 150


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
    """A function-local import of a bwtriton module carries a trailing `# reason` (an optional or heavy dependency,
    or the cycle it avoids); anything else belongs at module level."""
    unexplained = [(m, n, t.strip()) for m, n, deps, t in _function_local_imports()
                   if deps and not t.partition("#")[2].strip()]
    assert not unexplained, f"function-local imports without a `# reason` comment (or move them to module level): " \
                            f"{unexplained}"


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
