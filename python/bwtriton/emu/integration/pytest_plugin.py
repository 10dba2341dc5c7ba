"""pytest plugin: run GPU-style Triton tests on an emulated GPU (the B200 by default, or the H200).

Registered through the `pytest11` entry point (installed package) and loadable as
``-p bwtriton.emu.pytest_plugin`` (source tree). It does nothing unless ``--emulate sm_100a`` (or sm_103a, sm_90a) is
given or BWTRITON_EMULATE names a target; then, from `pytest_configure` on -- before test modules are imported, so
module-level ``skipif(torch.cuda.get_device_capability()[0] != 10)`` sees a B200 (or 9: an H200) -- Triton's active
driver is `bwtriton.emu.driver.EmulatedDriver` and `torch.cuda` queries answer as that GPU. Tests keep creating tensors on
their `device` (pass ``--device cpu`` to upstream's conftest); launches run in the emulator.
"""
from __future__ import annotations

import pytest

from . import driver as _driver
from .properties import triton_device_properties

_ACTIVE_KEY = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("bwtriton-emu", "bwtriton emulated Blackwell GPU")
    group.addoption("--emulate", action="store", default=None, metavar="TARGET",
                    help="run Triton launches on bwtriton's CPU emulator of TARGET (sm_100a, sm_103a or sm_90a); "
                         f"default: ${_driver.ENV_VAR}")


def _requested_target(config: pytest.Config) -> str | None:
    opt = config.getoption("--emulate", default=None)
    if opt is not None:
        return _driver.target_from_env(opt, source="--emulate")
    return _driver.target_from_env()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "emulated: runs on bwtriton's emulated B200 (bwtriton.emu.driver)")
    try:
        target = _requested_target(config)
    except Exception as exc:  # a bad --emulate value: a usage error, not a traceback
        raise pytest.UsageError(str(exc)) from None
    if target is None:
        return
    current = _driver.active_driver()
    if current is not None and current.target.name == target:  # BWTRITON_EMULATE already activated it on import
        return
    _driver.activate(target)
    config.stash[_ACTIVE_KEY] = target


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_ACTIVE_KEY, None) is not None:
        _driver.deactivate()
        del config.stash[_ACTIVE_KEY]


def pytest_report_header(config: pytest.Config) -> str | None:
    target = config.stash.get(_ACTIVE_KEY, None)
    if target is None:
        return None
    p = triton_device_properties(_driver.active_driver().target)
    return (f"bwtriton emulated GPU: {target} (Triton driver cuda:{_driver.active_driver().target.capability}, "
            f"{p['multiprocessor_count']} SMs, {p['max_shared_mem']} B shared/block); launches take CPU tensors")


@pytest.fixture
def device(request: pytest.FixtureRequest) -> str:
    """Fallback `device` fixture (a conftest's own one wins): ``--device`` when some conftest defines it, else
    "cpu" while emulating and "cuda" otherwise."""
    try:
        return request.config.getoption("--device")
    except ValueError:
        return "cpu" if request.config.stash.get(_ACTIVE_KEY, None) else "cuda"


@pytest.fixture
def emulated_b200():
    """The emulated B200 for one test, whether or not the session runs with --emulate."""
    if _driver.active_driver() is not None:
        yield _driver.active_driver()
        return
    with _driver.emulated_gpu("sm_100a") as drv:
        yield drv
