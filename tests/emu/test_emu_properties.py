"""The emulated device's answers (Triton's property dict, torch's device properties) are the figures of its
target's Device in bwtriton.targets: a B200's datasheet values, and B300 under its own name."""
from __future__ import annotations

import pytest

from bwtriton.errors import InputError
from bwtriton.emu.integration.properties import B200_PROPERTIES, torch_device_properties, triton_device_properties
from bwtriton.targets import TARGETS


def test_the_b200_reports_its_datasheet_figures():
    p = torch_device_properties(TARGETS["sm_100a"])
    assert (p.name, p.major, p.minor) == ("NVIDIA B200 (bwtriton emulated)", 10, 0)
    assert p.multi_processor_count == 148
    assert p.shared_memory_per_block_optin == 227 * 1024 and p.shared_memory_per_multiprocessor == 228 * 1024
    assert p.total_memory == 192 * 2 ** 30 and p.L2_cache_size == 126 * 2 ** 20
    assert B200_PROPERTIES["max_shared_mem"] == 227 * 1024 and B200_PROPERTIES["tmem_columns"] == 512


def test_the_b300_reports_the_b200_figures_under_its_name():
    b200, b300 = torch_device_properties(TARGETS["sm_100a"]), torch_device_properties(TARGETS["sm_103a"])
    assert b300.name == "NVIDIA B300 (bwtriton emulated)" and (b300.major, b300.minor) == (10, 3)
    assert {k: v for k, v in vars(b300).items() if k not in ("name", "minor", "uuid")} == \
           {k: v for k, v in vars(b200).items() if k not in ("name", "minor", "uuid")}
    assert b300.uuid != b200.uuid
    assert triton_device_properties(TARGETS["sm_103a"]) == B200_PROPERTIES


def test_the_emulated_h200_reports_hopper_figures():
    h200 = torch_device_properties(TARGETS["sm_90a"])
    assert h200.name == "NVIDIA H200 (bwtriton emulated)" and (h200.major, h200.minor) == (9, 0)
    assert h200.multi_processor_count == 132 and h200.shared_memory_per_block_optin == 227 * 1024
    props = triton_device_properties(TARGETS["sm_90a"])
    assert props["tmem_columns"] == 0 and props["multiprocessor_count"] == 132


def test_a_target_without_an_emulated_device_is_a_clear_error():
    with pytest.raises(InputError, match="sm_80 has no emulated device"):
        torch_device_properties(TARGETS["sm_80"])
