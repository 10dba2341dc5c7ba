"""`bwtriton doctor`: what this installation is -- bwtriton, Triton (and whether it is supported), torch, the
CUDA tools Triton bundles -- and which bwtriton features this Triton can run."""
from __future__ import annotations

import platform
import subprocess
from importlib import metadata

from .compat import features
from .compat.versions import SUPPORTED, is_supported, installed_text
from .report import wrap
from .version import __version__


def _package(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _tool_version(path: str) -> str:
    """The 'Build cuda_12.8...' line of a CUDA tool's --version."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except OSError as exc:
        return f"cannot run ({exc.strerror})"
    lines = [ln for ln in out.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "no version printed"


def cuda_tools() -> dict[str, str]:
    """The ptxas Triton uses for sm_100a and sm_90a, and its version."""
    from .regress.census import ptxas_path  # heavy: imports Triton's NVIDIA backend
    out = {}
    for name, capability in (("ptxas (sm_100a)", 100), ("ptxas (sm_90a)", 90)):
        try:
            path = ptxas_path(capability)
            out[name] = f"{_tool_version(path)}  [{path}]"
        except (FileNotFoundError, RuntimeError, ImportError) as exc:
            out[name] = f"not found ({exc})"
    return out


def report() -> dict:
    """Everything `bwtriton doctor` prints, as data."""
    triton = installed_text()
    info = {"bwtriton": __version__, "python": platform.python_version(),
            "triton": triton, "triton_supported": triton is not None and is_supported(triton),
            "supported_tritons": list(SUPPORTED), "torch": _package("torch"), "z3-solver": _package("z3-solver")}
    if info["triton_supported"]:
        info["cuda_tools"] = cuda_tools()
        info["features"] = {f.name: {"available": ok, "note": note} for f, ok, note in features.table()}
    return info


def render(info: dict) -> str:
    """`report()` as the text `bwtriton doctor` prints."""
    triton = info["triton"] or "not installed"
    verdict = "supported" if info["triton_supported"] else f"NOT supported (bwtriton is tested on " \
                                                           f"{', '.join(info['supported_tritons'])})"
    lines = [f"bwtriton   {info['bwtriton']}", f"python     {info['python']}", f"triton     {triton}  ({verdict})",
             f"torch      {info['torch']}", f"z3-solver  {info['z3-solver']}"]
    for name, text in info.get("cuda_tools", {}).items():
        lines.append(wrap(text, indent=" " * 16, first=f"{name:15s} "))
    if "features" in info:
        lines.append(f"features on Triton {triton}:")
        for name, row in info["features"].items():
            mark = "yes" if row["available"] else "no "
            lines.append(wrap(name + (f": {row['note']}" if row["note"] else ""), indent=" " * 6,
                              first=f"  {mark} "))
    return "\n".join(lines)
