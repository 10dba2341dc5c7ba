"""Shared pytest setup for every test folder: tests/ on sys.path (so `from fixtures import ...` and `import emu_cases`
work from tests/<area>/), GPU tests skip cleanly without CUDA, and tests marked `emulated` (run on the emulated
B200) are tagged in JUnit reports for tools/run_tests.py."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


def _has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


HAS_CUDA = _has_cuda()


#: The compat selection: what tools/run_tests.py's version matrix runs on every other supported Triton release
#: (besides lit, which runs whole there). Chosen to cover each layer once -- the CLI contract, the driver and stage
#: hook, every pass, the verifier on the kernel corpus and upstream-style kernels, the emulator's numerics, the
#: emulated kernel library and the formats' CPU paths -- within a few minutes on 2 cores. run_tests.py --compat
#: runs these files (so a file outside the selection that does not import on a release cannot stop the run);
#: `-m compat` selects the same tests.
COMPAT_SELECTION = (
    "test_architecture.py", "compat/test_compat_versions.py", "compat/test_compat_doctor.py",
    "cli/test_cli.py",
    "driver/test_driver.py",
    "passes/test_pipeline.py", "passes/test_pair_ctas.py", "passes/test_passes_pair_ctas_versions.py",
    "passes/test_insert_proxy_fence.py",
    "corpus/test_blackwell_bugs.py", "corpus/test_ptx_facts.py",
    "verify/test_verify_recurrence.py", "verify/test_verify_fail_loudly.py", "verify/test_tmem_cross_warp.py",
    "emu/test_emu_tmem_lanes.py", "emu/test_emu_triton_versions.py",
    "kernels/test_emulated_kernels_matmul.py",
    "tmem/test_tmem_lanes.py",
    "formats/test_formats_nvfp4.py", "tools/test_run_tests.py",
)


def pytest_collection_modifyitems(config, items):
    compat = pytest.mark.compat
    for item in items:
        if Path(str(item.fspath)).resolve().relative_to(TESTS).as_posix() in COMPAT_SELECTION:
            item.add_marker(compat)
    for item in items:
        if "emulated" in item.keywords:  # a JUnit <property>: run_tests.py reports the emulated share by marker
            item.user_properties.append(("marker", "emulated"))
    if _has_cuda():  # asked now: under `--emulate sm_90a` (plugin configured) the emulated GPU answers
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


@pytest.fixture(scope="module")
def emulated_h200_module():
    """The emulated H200 (sm_90a) for every test of a module: GPU test bodies run there on CPU tensors (their
    `device="cuda"` allocations are remapped)."""
    from bwtriton.emu.driver import emulated_gpu
    with emulated_gpu("sm_90a") as drv:
        yield drv
