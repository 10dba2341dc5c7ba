"""Cached facts about the CUDA device a kernel launches on (shared by every torch-facing wrapper)."""
from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=64)
def _device_info(key: tuple) -> tuple[int, int]:
    index, properties = key
    props = properties(index)
    return props.major * 10 + props.minor, props.multi_processor_count


def device_key(device: torch.device) -> tuple:
    """What names a CUDA `device` in caches: its index and the function that answers its properties. The emulated
    GPU installs its own answer while active, so an emulated B200, an emulated H200 and a real GPU used in one
    process never share an entry. A CPU device (the emulated GPU's tensors, or tests that record launches) is index
    0 without asking torch.cuda for its current device."""
    index = device.index if device.index is not None else (torch.cuda.current_device() if device.type == "cuda" else 0)
    return index, torch.cuda.get_device_properties


def device_info(device: torch.device) -> tuple[int, int]:
    """(compute capability as major*10+minor, SM count) of a CUDA `device`, cached: querying the driver on
    every call costs launch latency, which shows on small GEMMs."""
    return _device_info(device_key(device))


def device_capability(device: torch.device) -> int:
    """Compute capability of a CUDA `device` as major*10+minor (e.g. 90, 100)."""
    return device_info(device)[0]


def sm_count(device: torch.device) -> int:
    """Number of SMs of a CUDA `device`."""
    return device_info(device)[1]
