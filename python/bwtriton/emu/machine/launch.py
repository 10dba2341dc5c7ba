"""The state of one emulated launch: the launch itself (memories, grid, counters), its clusters and their CTAs.

The machine's own fields are declared here; the fields an instruction family keeps in each cluster or CTA (the
cluster barrier's counts, a CTA's mbarriers, the CLC failure flag) are declared by that family (its `STATE`) and
added as slots by state.py. Warps are in warp.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from .memory import GlobalMemory, ParamSpace, SharedMemory, TensorMemory
from .warp import Warp

if TYPE_CHECKING:
    from .async_engine import AsyncEngine
    from .grid import GridSchedule
    from .image import KernelImage


@dataclass(eq=False, slots=True)
class Launch:
    """One kernel launch: global and param memory, the grid (in CTAs and in clusters) and what ran so far."""

    gmem: GlobalMemory
    params: ParamSpace
    grid_ctas: tuple
    grid_clusters: tuple
    #: "latest" or "eager": when asynchronous work completes (async_engine.py)
    schedule: str = "latest"
    #: the lazy grid scheduler that CLC try_cancel steals from (grid.py); None while clusters run in gangs
    grid_schedule: Optional["GridSchedule"] = None
    #: bumps whenever a warp changes shared state another warp may be waiting for (deadlock detection)
    progress: int = 0
    instructions: int = 0


@dataclass(eq=False, slots=True)
class Cluster:
    """The CTAs of one cluster, its asynchronous engine and its barrier.cluster state."""

    launch: Launch
    cluster_id: tuple
    nctas: int  # the warps' %cluster_nctaid / %cluster_nctarank (ctas is filled after they exist)
    ctas: list = field(default_factory=list)
    nthreads: int = 0
    #: completes the cluster's TMA / tcgen05 / cp.async work (scheduler.start_cluster gives it one)
    engine: Optional["AsyncEngine"] = None


class CTA:
    """One CTA: its shared memory, TMEM and warps."""

    __slots__ = ("cluster", "rank", "ctaid", "prog", "smem", "tmem", "nthreads", "warps_spec", "warps")
    #: the class of its warps (state.machine_classes gives the one carrying the families' fields)
    warp_class: type = Warp

    def __init__(self, cluster: Cluster, rank: int, ctaid: tuple, image: "KernelImage", ntid: tuple,
                 smem_bytes: int, registers: bool = True):
        self.cluster = cluster
        self.rank = rank
        self.ctaid = ctaid
        self.prog = image.prog
        self.smem = SharedMemory(smem_bytes, rank)
        self.tmem = TensorMemory(rank)
        self.nthreads = ntid[0] * ntid[1] * ntid[2]
        nwarps = (self.nthreads + 31) // 32
        self.warps_spec = range(nwarps)
        self.warps = [self.warp_class(self, i, image.prog, cluster.launch, ntid, registers) for i in range(nwarps)]
