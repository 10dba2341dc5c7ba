"""The pytest plugin: an upstream-style test file (its own conftest with `--device`, a `device` fixture, module-level
capability skips) runs unchanged with `--emulate sm_100a --device cpu`, and does nothing without `--emulate`."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fixtures.upstream_conftest import DEVICE_CONFTEST

pytestmark = [pytest.mark.emulated]
ROOT = Path(__file__).resolve().parents[2]

CONFTEST = DEVICE_CONFTEST

TEST_FILE = """
import pytest
import torch
import triton
import triton.language as tl

# evaluated at import, like upstream's `skipif(torch.cuda.get_device_capability()[0] != 10)`
BLACKWELL = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 10


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], tl.dot(a, b))


@pytest.mark.skipif(not BLACKWELL, reason="Requires compute capability == 10")
@pytest.mark.parametrize("BN", [64, 128])
def test_dot(BN, device):
    assert triton.runtime.driver.active.get_current_target().arch == 100
    a = torch.randn(128, 32, device=device, dtype=torch.float16)
    b = torch.randn(32, BN, device=device, dtype=torch.float16)
    c = torch.empty(128, BN, device=device, dtype=torch.float32)
    k = dot_kernel[(1,)](a, b, c, BM=128, BN=BN, BK=32)
    assert "tcgen05.mma" in k.asm["ptx"]
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-4)
"""


def _pytest(tmp_path: Path, *args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_upstream_style.py").write_text(textwrap.dedent(TEST_FILE))
    env = {k: v for k, v in os.environ.items() if k != "BWTRITON_EMULATE"}
    env.update(PYTHONPATH=str(ROOT / "python"), **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                           "bwtriton.emu.pytest_plugin", "--rootdir", str(tmp_path), *args, str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def _has_real_cuda() -> bool:
    import torch
    return torch.cuda.is_available()


@pytest.mark.skipif(_has_real_cuda(), reason="checks the CPU machine's behaviour (no CUDA)")
def test_upstream_style_file_runs_unchanged_on_the_emulated_b200(tmp_path):
    out = _pytest(tmp_path, "--emulate", "sm_100a", "--device", "cpu")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "2 passed" in out.stdout
    out = _pytest(tmp_path, "--device", "cpu", env_extra={"BWTRITON_EMULATE": "sm_100a"})
    assert out.returncode == 0 and "2 passed" in out.stdout, out.stdout[-3000:]


@pytest.mark.skipif(_has_real_cuda(), reason="checks the CPU machine's behaviour (no CUDA)")
def test_plugin_is_inert_without_emulate(tmp_path):
    out = _pytest(tmp_path, "--device", "cpu")
    assert out.returncode == 0, out.stdout[-3000:]
    assert "2 skipped" in out.stdout and "bwtriton emulated GPU" not in out.stdout


def test_bad_emulate_target_is_a_usage_error(tmp_path):
    out = _pytest(tmp_path, "--emulate", "sm_80")
    assert out.returncode == 4  # pytest's usage-error exit code, not a traceback
    assert "sm_100a, sm_103a, sm_90a only" in out.stderr and "Traceback" not in out.stderr
