"""Every tutorial runs on a CPU-only machine and prints what it promises (they are the first thing a newcomer
runs, so they must not rot), in 100 columns."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TUTORIALS = Path(__file__).resolve().parents[2] / "tutorials"

EXPECT = {
    "01_tmem_matmul.py": ["tcgen05.alloc.cta_group::1", "tcgen05.mma.cta_group::1.kind::f16", "tcgen05.wait::ld",
                          "tcgen05.dealloc", "UTCHMMA"],
    "02_nvfp4_formats.py": ["E2M1", "S_enc", "relative RMS error"],
    "03_fused_nvfp4_linear.py": ["kind::mxf4nvf4.block_scale.scale_vec::4X", "lowered to bf16 tt.dot",
                                 "wgmma.mma_async"],
    "04_two_cta.py": ["Failed to find a valid layout", "twoCTAs = true", "tcgen05.alloc.cta_group::2"],
    "05_regression_testing.py": ["| shared_bytes | 65552 | 98320 | +32768 |", "exit code 1", "PASS: tutorial-05"],
    "06_clc_persistent.py": ["UGETNEXTWORKID.SELFCAST", "clusterlaunchcontrol present: False", "0 CLC finding(s)"],
}


def test_every_tutorial_is_covered():
    assert sorted(p.name for p in TUTORIALS.glob("[0-9][0-9]_*.py")) == sorted(EXPECT)


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_tutorial_runs(name):
    proc = subprocess.run([sys.executable, str(TUTORIALS / name)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for needle in EXPECT[name]:
        assert needle in proc.stdout, f"{name}: {needle!r} missing from its output"
    wide = [line for line in proc.stdout.splitlines() if len(line) > 100]
    assert not wide, f"{name} prints {len(wide)} line(s) wider than 100 columns, e.g. {wide[0]!r}"
