"""Autotune configurations for the GEMM kernels, per target family, pruned to what fits in shared memory.

A config is a `GemmConfig` (tile shape, pipeline depth, warps and the persistent-kernel switches). The sets are
small on purpose: autotuning runs every candidate on first use of a shape, so each set holds only configurations
that were competitive for that architecture (Hopper: 128x256 tiles over two consumer warpgroups, as cuBLAS uses;
Blackwell: 128x256 tcgen05 tiles with the accumulator in TMEM, warp-specialised).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from typing import Iterable

from bwtriton.targets import MAX_SHARED_BYTES as TARGET_SHARED_BYTES

#: Opt-in dynamic shared memory per block (bytes), by compute-capability major version. Hopper and Blackwell
#: datacenter parts allow 227 KiB; consumer Blackwell (sm_120) 99 KiB; Ampere A100 163 KiB.
MAX_SHARED_BYTES = {int(arch[3:]) // 10: n for arch, n in TARGET_SHARED_BYTES.items()}  # by capability major

#: Shared memory Triton needs beyond the operand ring and the epilogue tile: mbarriers, alignment padding.
_SHARED_SLACK_BYTES = 2048


@dataclass(frozen=True)
class GemmConfig:
    """One candidate launch configuration of the persistent TMA GEMM."""

    block_m: int
    block_n: int
    block_k: int
    num_stages: int
    num_warps: int
    group_m: int = 8               # tiles along M visited before moving along N (L2 reuse of B)
    epilogue_split: int = 2        # store the output tile in this many column slices (less smem, overlapped)
    warp_specialize: bool = False  # producer/consumer warp partitions (tl.range(..., warp_specialize=True))
    flatten: bool = False          # fuse the tile loop and the K loop so the pipeline spans tile boundaries

    def kernel_kwargs(self) -> dict:
        """The constexpr keyword arguments plus launch options for the kernel."""
        return dict(BLOCK_M=self.block_m, BLOCK_N=self.block_n, BLOCK_K=self.block_k, GROUP_M=self.group_m,
                    EPILOGUE_SPLIT=self.epilogue_split, WARP_SPECIALIZE=self.warp_specialize,
                    FLATTEN=self.flatten, num_stages=self.num_stages, num_warps=self.num_warps)

    def short(self) -> str:
        """Compact label, e.g. '128x256x64 s3 w8 ws'."""
        flags = "".join((" ws" if self.warp_specialize else "", " flat" if self.flatten else "",
                         f" epi/{self.epilogue_split}" if self.epilogue_split > 1 else "",
                         f" g{self.group_m}" if self.group_m != 8 else ""))
        return f"{self.block_m}x{self.block_n}x{self.block_k} s{self.num_stages} w{self.num_warps}{flags}"

    def as_dict(self) -> dict:
        """The fields as a plain dict."""
        return asdict(self)


def shared_bytes(cfg: GemmConfig, in_bytes: float, out_bytes: int) -> int:
    """Shared memory the config needs: the multi-buffered A/B ring plus one epilogue slice staged for TMA."""
    ring = cfg.num_stages * (cfg.block_m + cfg.block_n) * cfg.block_k * in_bytes
    epilogue = cfg.block_m * (cfg.block_n // cfg.epilogue_split) * out_bytes
    return int(ring + epilogue + _SHARED_SLACK_BYTES)


def fits(cfg: GemmConfig, in_bytes: float, out_bytes: int, capability: int) -> bool:
    """Whether `cfg` fits the opt-in shared memory of a GPU of `capability` (unknown families: Ampere's)."""
    limit = MAX_SHARED_BYTES.get(capability // 10, MAX_SHARED_BYTES[8])
    return shared_bytes(cfg, in_bytes, out_bytes) <= limit


def _hopper(in_bytes: float) -> list[GemmConfig]:
    # No warp_specialize here: Triton 3.6 leaves this kernel unspecialised on sm_90 anyway (checked in the
    # TTGIR); the async-wgmma software pipeline does the overlap.
    # K depth per stage: 128 bytes of K per row (64 bf16 / 128 fp8) matches the 128B TMA/wgmma swizzle.
    bk = int(128 // in_bytes)
    return [
        GemmConfig(128, 256, bk, 3, 8),
        GemmConfig(128, 256, bk, 4, 8),
        GemmConfig(128, 256, bk, 3, 8, flatten=True),
        GemmConfig(128, 256, bk, 4, 8, flatten=True),
        GemmConfig(128, 128, bk, 4, 8),
    ]


def _hopper_fp8_extra() -> list[GemmConfig]:
    """fp8-only Hopper candidates (without them fp8 4096^3 ran at 0.72x of _scaled_mm while 8192^3 was at parity).

    At 4096^3 a 128x256 tile lives for only 32 K steps of 128, so what each tile pays once (filling the ring,
    then the epilogue store the MMAs do not overlap) is twice the share it is at 8192^3, and 512 tiles are 3.9
    waves on 132 SMs. Hence: the transposed 256x128 tile, flattened so the ring spans tile boundaries (B tiles
    re-read from L2 half as often along M; the shape cuBLAS's fp8 kernels use), and 128x128 with 5 stages,
    flattened (7.8 waves instead of 3.9: a smaller last-wave loss, and a deeper ring per tile). The kernel's
    epilogue takes EPILOGUE_SPLIT 1 or 2 only, so finer store slices are not an option here."""
    return [
        GemmConfig(256, 128, 128, 3, 8, flatten=True),
        GemmConfig(128, 128, 128, 5, 8, flatten=True),
    ]


def _hopper_sweep(in_bytes: float) -> list[GemmConfig]:
    """Extra candidates tried only with BWTRITON_GEMM_SWEEP=1 (exploration on a GPU; too slow for every use)."""
    bk = int(128 // in_bytes)
    return [
        GemmConfig(128, 256, bk, 3, 8, epilogue_split=1),
        GemmConfig(256, 128, bk, 3, 8),
        GemmConfig(256, 128, bk, 4, 8),
        GemmConfig(128, 256, bk, 3, 8, group_m=16),
        GemmConfig(128, 128, bk, 3, 4),
    ]


def _blackwell(in_bytes: float) -> list[GemmConfig]:
    bk = int(128 // in_bytes)
    return [
        # Triton 3.6 warp-specialises this kernel only with the loops flattened (unflattened, NVWSInsertAref
        # fails), so the WS configs always set flatten.
        GemmConfig(128, 256, bk, 3, 4, warp_specialize=True, flatten=True),
        GemmConfig(128, 256, bk, 4, 4, warp_specialize=True, flatten=True),
        GemmConfig(128, 128, bk, 4, 4, warp_specialize=True, flatten=True),
        GemmConfig(128, 256, bk, 3, 8),
    ]


def _fallback(in_bytes: float) -> list[GemmConfig]:
    bk = int(64 // in_bytes)
    return [GemmConfig(128, 128, bk, 3, 4), GemmConfig(128, 64, bk, 4, 4), GemmConfig(64, 64, bk, 3, 4)]


def gemm_configs(capability: int, in_bytes: float, out_bytes: int) -> list[GemmConfig]:
    """Candidate configs for a GPU of `capability` (e.g. 90, 100), operand and output element sizes in bytes.

    Configs that do not fit the architecture's shared memory are dropped; at least one config is always
    returned (the smallest, with stages reduced until it fits).
    """
    family = capability // 10
    cands = _hopper(in_bytes) if family == 9 else _blackwell(in_bytes) if family == 10 else _fallback(in_bytes)
    if family == 9 and in_bytes == 1:
        cands += _hopper_fp8_extra()
    if family == 9 and os.environ.get("BWTRITON_GEMM_SWEEP") == "1":
        cands += _hopper_sweep(in_bytes)
    kept = [c for c in cands if fits(c, in_bytes, out_bytes, capability)]
    if kept:
        return kept
    smallest = min(cands, key=lambda c: shared_bytes(c, in_bytes, out_bytes))
    while smallest.num_stages > 2 and not fits(smallest, in_bytes, out_bytes, capability):
        smallest = replace(smallest, num_stages=smallest.num_stages - 1)
    return [smallest]


def prune_for_shape(configs: Iterable[GemmConfig], m: int, n: int, k: int) -> list[GemmConfig]:
    """Drop configs whose tiles are far larger than the problem (they would only pad); keep at least one."""
    configs = list(configs)
    kept = [c for c in configs if not (c.block_m > 2 * max(m, 64) or c.block_n > 2 * max(n, 64))]
    if kept:
        return kept
    return [min(configs, key=lambda c: c.block_m * c.block_n)]
