"""One Python environment per supported Triton release, built once and reused: the version matrix of the test
runner and cross-version snapshots run bwtriton in them.

An environment holds only Triton (that release) and bwtriton (editable, from the source tree that asked for it);
everything else -- torch, numpy, z3, pytest, lit -- comes from the environment that builds it, through a `.pth`
file that appends that environment's site-packages after the new one's own. So an extra Triton costs one
download (~700 MB unpacked, seconds from the registry), not a second torch. uv creates and fills it when it is
installed (``pip install uv``), the standard library's venv and pip otherwise.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Callable

from ..errors import BwTritonError
from .versions import SUPPORTED

#: Where the environments live (one folder per release); override with this variable.
ENV_HOME = "BWTRITON_ENV_HOME"
_RECORD = "bwtriton-env.json"
_PARENT_PTH = "zz_bwtriton_parent_env.pth"  # sorts last: the new environment's own packages come first


class EnvironmentError_(BwTritonError):
    """An environment for a Triton release could not be built."""


def env_home() -> Path:
    """The folder holding one environment per Triton release."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "bwtriton" / "envs"
    return Path(os.environ.get(ENV_HOME, default))


def env_python(version: str) -> Path:
    """The interpreter of the environment for Triton `version` (it may not exist yet)."""
    return env_home() / f"triton-{version}" / "bin" / "python"


def _parent_site_packages() -> list[str]:
    """The site-packages of the running environment (where torch and the test tools are)."""
    paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    return sorted(p for p in paths if os.path.isdir(p))


def _wanted_record(version: str, root: Path) -> dict:
    return {"triton": version, "source": str(root.resolve()), "parent": _parent_site_packages(),
            "python": sys.version.split()[0]}


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise EnvironmentError_(f"{what} failed (exit {proc.returncode}): {' | '.join(tail)} -- the command was "
                                f"{' '.join(cmd)}; check the network to the package registry and disk space")


def _installer() -> list[str] | None:
    """uv's command, when uv is installed (as a program or as the `uv` package of this Python)."""
    exe = shutil.which("uv")
    if exe:
        return [exe]
    try:
        from uv import find_uv_bin  # optional: the `uv` package ships its binary
        return [find_uv_bin()]
    except ImportError:
        return None


def _create(folder: Path, version: str, root: Path) -> None:
    uv = _installer()
    python = folder / "bin" / "python"
    if uv:
        _run([*uv, "venv", "--quiet", "--python", sys.executable, str(folder)], "uv venv")
        pip = [*uv, "pip", "install", "--quiet", "--python", str(python)]
    else:
        _run([sys.executable, "-m", "venv", str(folder)], "python -m venv")
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    site = Path(subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                        "['purelib'])"], text=True).strip())
    _run([*pip, f"triton=={version}"], f"installing triton=={version}")
    _run([*pip, "--no-deps", "-e", str(root)], "installing bwtriton (editable, no dependencies)")
    (site / _PARENT_PTH).write_text("".join(p + "\n" for p in _parent_site_packages()))


def ensure_env(version: str, root: Path, progress: Callable[[str], None] = print) -> Path:
    """The interpreter of an environment with Triton `version` and bwtriton from `root`, built if missing or
    stale (another source tree, another parent environment). Returns its python."""
    if version not in SUPPORTED:
        raise EnvironmentError_(f"Triton {version} is not a supported release; choose from {', '.join(SUPPORTED)}")
    folder = env_home() / f"triton-{version}"
    record_path, wanted = folder / _RECORD, _wanted_record(version, root)
    try:
        if json.loads(record_path.read_text()) == wanted and env_python(version).exists():
            return env_python(version)
    except (OSError, ValueError):
        pass
    progress(f"building the Triton {version} environment in {folder} (once; reused afterwards)")
    if folder.exists():
        shutil.rmtree(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        _create(folder, version, root)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)  # never leave a half-built environment that looks usable
        raise
    tmp = record_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(wanted))
    os.replace(tmp, record_path)
    return env_python(version)
