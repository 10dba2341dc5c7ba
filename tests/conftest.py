"""Shared pytest setup: GPU tests skip cleanly without CUDA; emulator tests are marked `emu`."""
from __future__ import annotations

import pytest


def _has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


HAS_CUDA = _has_cuda()


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def emulated_b200_module():
    """The emulated B200 (sm_100a) for every test of a module: `pytest.mark.usefixtures("emulated_b200_module")`
    in its pytestmark (the plugin's `emulated_b200` is the per-test one)."""
    from bwtriton.emu.driver import emulated_gpu
    with emulated_gpu("sm_100a") as drv:
        yield drv
