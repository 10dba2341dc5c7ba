"""bwtriton: Blackwell (sm_100a) lowering passes, verifier and emulator on top of Triton 3.6 - 3.9."""
from __future__ import annotations

from .version import __version__  # noqa: E402
from .errors import BwTritonError, CompileError, InputError, UnknownPassError, UnknownTargetError  # noqa: E402
from .targets import TARGETS, Target, get_target  # noqa: E402
from .emulation import requested_emulation  # noqa: E402
from .compat.versions import warn_if_unsupported  # noqa: E402

warn_if_unsupported()


def compile(*args, **kwargs):  # noqa: A001 - mirrors triton.compile
    """Compile a `@triton.jit`/Gluon kernel or a .ttir/.ttgir file; see `bwtriton.driver.compile`."""
    from .driver import compile as _compile  # cycle: bwtriton.driver is a submodule of this package
    return _compile(*args, **kwargs)


def enable(*args, **kwargs):
    """Route ordinary `@triton.jit` launches through bwtriton's pipeline; see `bwtriton.pipeline.enable`."""
    from .pipeline import enable as _enable  # cycle: bwtriton.pipeline is a submodule of this package
    return _enable(*args, **kwargs)


def disable() -> None:
    """Stop routing `@triton.jit` launches through bwtriton's pipeline."""
    from .pipeline import disable as _disable  # cycle: bwtriton.pipeline is a submodule of this package
    _disable()


def is_enabled() -> bool:
    """Whether `bwtriton.enable()` is active (launches of `@triton.jit` kernels compile through bwtriton)."""
    from .pipeline import is_enabled as _is_enabled  # lazy, like compile/enable: `import bwtriton` stays light
    return _is_enabled()


def active_selection():
    """The `PassSelection` active launches compile through (``.names``: the passes), or None when not enabled."""
    from .pipeline import active_selection as _active_selection  # lazy, as above
    return _active_selection()


__all__ = ["__version__", "compile", "enable", "disable", "is_enabled", "active_selection", "get_target", "Target",
           "TARGETS", "BwTritonError", "CompileError", "InputError", "UnknownPassError", "UnknownTargetError"]


if requested_emulation() is not None:
    from . import emu as _emu  # noqa: E402,F401 - activates the emulated B200 (bwtriton.emu.integration.driver)
