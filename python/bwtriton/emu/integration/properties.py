"""What the emulated GPU reports about itself: Triton's device-property dict and the device names, shared by the
driver (driver.py) and the torch.cuda answers of the device remap (device_remap.py)."""
from __future__ import annotations

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
