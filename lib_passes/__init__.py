"""bwtriton's passes (installed as `bwtriton.passes`). Every public module here defines one pass;
they are discovered automatically, so adding a pass means adding one module."""
from __future__ import annotations

import importlib
import pkgutil

from bwtriton.errors import UnknownPassError, suggest

from .base import REGISTRY, Pass, PassContext, PassOption, Stage, register_pass

_SUPPORT_MODULES = {"base", "mlir_util"}
_loaded = False


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_") and info.name not in _SUPPORT_MODULES:
            importlib.import_module(f"{__name__}.{info.name}")
    _loaded = True


def all_passes() -> dict[str, type[Pass]]:
    """Every registered pass by name, in pipeline order (stage, then `order`, then name)."""
    _load_all()
    stage_index = {s: i for i, s in enumerate(Stage)}
    return dict(sorted(REGISTRY.items(), key=lambda kv: (stage_index[kv[1].stage], kv[1].order, kv[0])))


def get_pass(name: str) -> type[Pass]:
    """The pass class registered as `name`; unknown names raise with the closest valid names."""
    passes = all_passes()
    if name not in passes:
        raise UnknownPassError(f"unknown pass {name!r}.{suggest(name, passes)} "
                               f"Run `bwtriton passes` to list them.")
    return passes[name]


__all__ = ["Pass", "PassContext", "PassOption", "Stage", "register_pass", "all_passes", "get_pass"]
