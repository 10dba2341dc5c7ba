"""What the emulated GPU reports about itself: Triton's device-property dict and the device names, shared by the
driver (driver.py) and the torch.cuda answers of the device remap (device_remap.py)."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from ...targets import B200_SM_COUNT, MAX_SHARED_BYTES, TMEM_COLUMNS, TMEM_LANES

#: Device figures of a B200 (sm_100a); sm_103a (B300) shares them. TMEM is per SM: 128 lanes x 512 columns.
B200_PROPERTIES = {
    "max_shared_mem": MAX_SHARED_BYTES["sm_100"],  # bytes of shared memory one block may opt into
    "max_shared_mem_per_sm": 233472,   # 228 KiB per SM
    "max_num_regs": 65536,
    "multiprocessor_count": B200_SM_COUNT,
    "warpSize": 32,
    "sm_clock_rate": 1965000,          # kHz
    "mem_clock_rate": 3996000,         # kHz
    "mem_bus_width": 8192,             # bits (HBM3e)
    "tmem_columns": TMEM_COLUMNS,
    "tmem_lanes": TMEM_LANES,
}
DEVICE_NAMES = {"sm_100a": "NVIDIA B200 (bwtriton emulated)", "sm_103a": "NVIDIA B300 (bwtriton emulated)"}

#: HBM of a B200 (192 GB HBM3e), what `torch.cuda.get_device_properties(...).total_memory` reports
B200_MEMORY_BYTES = 192 * 2 ** 30


def torch_device_properties(target: Any) -> SimpleNamespace:
    """What `torch.cuda.get_device_properties` answers for the emulated device of `target` (sm_100a or sm_103a)."""
    p = B200_PROPERTIES
    major, minor = divmod(target.capability, 10)
    return SimpleNamespace(
        name=DEVICE_NAMES[target.name], major=major, minor=minor,
        multi_processor_count=p["multiprocessor_count"], total_memory=B200_MEMORY_BYTES,
        shared_memory_per_block=48 * 1024, shared_memory_per_block_optin=p["max_shared_mem"],
        shared_memory_per_multiprocessor=p["max_shared_mem_per_sm"], warp_size=p["warpSize"],
        regs_per_multiprocessor=p["max_num_regs"], max_threads_per_multi_processor=2048,
        L2_cache_size=126 * 2 ** 20, clock_rate=p["sm_clock_rate"], is_integrated=False,
        gcnArchName="", uuid="bwtriton-emulated-b200")
