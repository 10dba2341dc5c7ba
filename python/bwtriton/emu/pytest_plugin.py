"""The pytest11 entry point `bwtriton.emu.pytest_plugin` (pyproject.toml; ``-p bwtriton.emu.pytest_plugin`` from a
source tree): the plugin itself is `bwtriton.emu.integration.pytest_plugin`. The entry point keeps this name so
installed copies and `-p` (which must name the entry point, or the plugin registers twice) stay the same."""
from __future__ import annotations

from .integration.pytest_plugin import (device, emulated_b200, pytest_addoption, pytest_configure,  # noqa: F401
                                        pytest_report_header, pytest_unconfigure)
