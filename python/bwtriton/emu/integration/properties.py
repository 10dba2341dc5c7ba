"""What the emulated GPU reports about itself, in the shapes its callers ask for: Triton's device-property dict and
torch's device-properties object, shared by the driver (driver.py) and the torch.cuda answers of the device remap
(device_remap.py). Every figure comes from the target's `Device` in bwtriton.targets."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from ...errors import InputError
from ...targets import EMULATED_TARGETS, TARGETS, Device


def _device(target: Any) -> Device:
    if target.device is None:
        raise InputError(f"{target.name} has no emulated device; the emulator models {', '.join(EMULATED_TARGETS)}")
    return target.device


def triton_device_properties(target: Any) -> dict:
    """What Triton's `driver.active.utils.get_device_properties` answers for the emulated device of `target`."""
    d = _device(target)
    return {
        "max_shared_mem": d.shared_bytes_per_block_optin,  # bytes of shared memory one block may opt into
        "max_shared_mem_per_sm": d.shared_bytes_per_sm,
        "max_num_regs": d.registers_per_sm,
        "multiprocessor_count": d.sm_count,
        "warpSize": d.warp_size,
        "sm_clock_rate": d.sm_clock_khz,
        "mem_clock_rate": d.mem_clock_khz,
        "mem_bus_width": d.mem_bus_width_bits,
        "tmem_columns": target.tmem_columns,
        "tmem_lanes": target.tmem_lanes,
    }


#: Triton's property dict of the emulated B200 (sm_100a); sm_103a (B300) reports the same figures.
B200_PROPERTIES = triton_device_properties(TARGETS["sm_100a"])
DEVICE_NAMES = {name: f"{t.device.name} (bwtriton emulated)" for name, t in TARGETS.items() if t.device is not None}


def torch_device_properties(target: Any) -> SimpleNamespace:
    """What `torch.cuda.get_device_properties` answers for the emulated device of `target`."""
    d = _device(target)
    major, minor = divmod(target.capability, 10)
    return SimpleNamespace(
        name=DEVICE_NAMES[target.name], major=major, minor=minor,
        multi_processor_count=d.sm_count, total_memory=d.memory_bytes,
        shared_memory_per_block=d.shared_bytes_per_block, shared_memory_per_block_optin=d.shared_bytes_per_block_optin,
        shared_memory_per_multiprocessor=d.shared_bytes_per_sm, warp_size=d.warp_size,
        regs_per_multiprocessor=d.registers_per_sm, max_threads_per_multi_processor=d.max_threads_per_sm,
        L2_cache_size=d.l2_bytes, clock_rate=d.sm_clock_khz, is_integrated=False,
        gcnArchName="", uuid=f"bwtriton-emulated-{target.name}")
