"""The supported-Triton contract: one range stated in pyproject.toml and bwtriton.compat, a named error outside it,
a stage hook every release can call, and no Triton-version branch outside bwtriton.compat."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from bwtriton.compat import versions
from bwtriton.compat.stage_hook import StagesHook
from bwtriton.compat.versions import SUPPORTED, SUPPORTED_RANGE, UnsupportedTritonError, parse_version

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_states_the_supported_range():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    triton = [d for d in deps if d.startswith("triton")]
    assert triton == [f"triton{SUPPORTED_RANGE}"]
    low, high = re.fullmatch(r">=([\d.]+),<([\d.]+)", SUPPORTED_RANGE).groups()
    assert all(parse_version(low) <= parse_version(v) < parse_version(high) for v in SUPPORTED)


@pytest.mark.parametrize("text,expected", [("3.9.0", (3, 9, 0)), ("3.7.1+git1a2b", (3, 7, 1)),
                                           ("3.8.0rc1", (3, 8, 0)), ("3.10", (3, 10, 0))])
def test_parse_version(text, expected):
    assert parse_version(text) == expected


def test_parse_version_rejects_text_without_a_version():
    with pytest.raises(ValueError, match="not a Triton version"):
        parse_version("nightly")


def test_an_unsupported_triton_is_a_named_error_and_the_opt_in_lets_it_through(monkeypatch):
    monkeypatch.setattr(versions, "installed", lambda: (3, 10, 0))
    monkeypatch.delenv(versions.ENV_ALLOW_UNSUPPORTED, raising=False)
    with pytest.raises(UnsupportedTritonError) as info:
        versions.check_supported()
    message = str(info.value)
    assert "Triton 3.10.0 is not supported" in message and "3.6.0, 3.7.1, 3.8.0, 3.9.0" in message
    assert versions.ENV_ALLOW_UNSUPPORTED in message
    monkeypatch.setenv(versions.ENV_ALLOW_UNSUPPORTED, "1")
    assert versions.check_supported() == (3, 10, 0)


def test_the_installed_triton_is_supported():
    assert versions.is_supported(versions.installed())


def test_compile_on_an_unsupported_triton_fails_by_name_in_the_cli(tmp_path):
    """The CLI's one-line error, not a traceback, and nothing written."""
    code = ("import bwtriton.compat.versions as v; v.installed = lambda: (3, 5, 0); "
            "from bwtriton.cli import main; import sys; "
            "sys.exit(main(['compile', 'python/bwtriton/examples/matmul.py:matmul_kernel', '-o', sys.argv[1]]))")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("bwtriton compile: error: Triton 3.5.0 is not supported")
    assert "Traceback" not in proc.stderr and not out.exists()


def test_stage_hook_answers_a_cache_key_without_arguments_and_edits_stages_with_them():
    edited = []
    hook = StagesHook(lambda *args: edited.append(args), "abc123")
    key, digest = hook()
    assert key == "bwtriton-abc123" and digest == "abc123"
    hook("backend", {}, "options", "language", 100)
    assert edited == [("backend", {}, "options", "language", 100)]


def test_hook_keys_differ_by_pass_selection_and_target():
    from bwtriton.pipeline import make_stages_hook, resolve_passes
    from bwtriton.targets import get_target
    sm100 = get_target("sm_100a")
    keys = {make_stages_hook(resolve_passes(spec, sm100), tgt)()[0]
            for spec in ("default", "none") for tgt in (sm100, get_target("sm_90a"), None)}
    assert len(keys) == 6


#: Spellings that read Triton's version; only bwtriton.compat may use them.
_VERSION_READS = ("__version__", "metadata.version", "at_least", "installed(")


def _version_reads(path: Path, base: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        text = ""
        if isinstance(node, ast.Attribute) and node.attr == "__version__":
            text = ast.unparse(node)
            if not text.startswith("triton"):
                continue
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith(("metadata.version", "at_least",
                                                                            "installed")):
            text = ast.unparse(node)
            if "metadata.version" in text and "triton" not in text:
                continue
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.endswith("compat.versions"):
            names = {a.name for a in node.names} & {"at_least", "installed", "parse_version"}
            text = f"import of {sorted(names)}" if names else ""
        if text:
            found.append(f"{path.relative_to(base)}:{node.lineno}: {text}")
    return found


def test_no_triton_version_branch_outside_the_compat_layer():
    package = ROOT / "python" / "bwtriton"
    files = [p for p in package.rglob("*.py") if p.relative_to(package).parts[0] not in ("compat", "passes")]
    files += list((ROOT / "lib_passes").rglob("*.py"))  # python/bwtriton/passes is a link to it
    offenders = [hit for path in files for hit in _version_reads(path)]
    assert not offenders, "read Triton's version only in bwtriton.compat (add a function there that names the " \
                          "difference): " + "; ".join(offenders)


def test_the_boundary_check_sees_a_version_branch(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import triton\nfrom bwtriton.compat.versions import at_least\n"
                   "if triton.__version__ >= '3.7':\n    pass\nif at_least(3, 8):\n    pass\n")
    hits = [h.split(": ", 1)[1] for h in sorted(_version_reads(bad, tmp_path), key=lambda h: int(h.split(":")[1]))]
    assert hits == ["import of ['at_least']", "triton.__version__", "at_least(3, 8)"]


def test_every_file_of_the_compat_selection_exists():
    from conftest import COMPAT_SELECTION  # tests/conftest.py: the matrix's selection
    missing = [f for f in COMPAT_SELECTION if not (ROOT / "tests" / f).is_file()]
    assert not missing, f"COMPAT_SELECTION names files that do not exist: {missing}"
