"""bwtriton: Blackwell (sm_100a) lowering passes, verifier and emulator on top of Triton 3.6."""
from __future__ import annotations

__version__ = "0.1.0"

from .errors import BwTritonError, CompileError, InputError, UnknownPassError, UnknownTargetError  # noqa: E402
from .targets import TARGETS, Target, get_target  # noqa: E402


def compile(*args, **kwargs):  # noqa: A001 - mirrors triton.compile
    """Compile a `@triton.jit`/Gluon kernel or a .ttir/.ttgir file; see `bwtriton.driver.compile`."""
    from .driver import compile as _compile
    return _compile(*args, **kwargs)


def enable(*args, **kwargs):
    """Route ordinary `@triton.jit` launches through bwtriton's pipeline; see `bwtriton.pipeline.enable`."""
    from .pipeline import enable as _enable
    return _enable(*args, **kwargs)


def disable() -> None:
    """Stop routing `@triton.jit` launches through bwtriton's pipeline."""
    from .pipeline import disable as _disable
    _disable()


__all__ = ["__version__", "compile", "enable", "disable", "get_target", "Target", "TARGETS", "BwTritonError",
           "CompileError", "InputError", "UnknownPassError", "UnknownTargetError"]


def _attach_source_tree_passes() -> None:
    """Make `bwtriton.passes` importable when running from the source tree (PYTHONPATH=python, no install): the
    installed package maps it to lib_passes/, the source tree has it beside python/."""
    import importlib.util
    import sys
    from pathlib import Path

    if importlib.util.find_spec(__name__ + ".passes") is not None:
        return
    root = Path(__file__).resolve().parents[2] / "lib_passes"
    if not (root / "__init__.py").exists():
        return
    spec = importlib.util.spec_from_file_location(__name__ + ".passes", root / "__init__.py",
                                                  submodule_search_locations=[str(root)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    setattr(sys.modules[__name__], "passes", module)


_attach_source_tree_passes()


if __import__("os").environ.get("BWTRITON_EMULATE", "") not in ("", "0"):
    from . import emu as _emu  # noqa: E402,F401 - activates the emulated B200 (bwtriton.emu.driver)
