"""Per-warp state: program counter (or per-lane PCs while divergent), active mask, registers as numpy arrays over
the 32 lanes, and the bookkeeping strictness checks need (observed asynchronous work, open cp.async / bulk
groups, barrier waits). The machine's own fields are declared here (`__slots__`); the fields an instruction family
keeps in each warp are declared by that family (its `STATE`) and added as slots by state.py."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ...targets import B200_SM_COUNT, TARGETS
from ..errors import UnsupportedInstructionError
from .program import Program

WARP_LANES = 32
_ALL = np.arange(WARP_LANES)


class Warp:
    """One warp of one CTA. `mask` is None when all 32 lanes are live and active (the fast path)."""

    is_gang = False  # gang.GangWarp: the same warp of many CTAs executing together
    lanes = WARP_LANES  # lanes an instruction's closure works on (a GangWarp has more)

    __slots__ = (
        "cta", "wid", "launch", "code", "R", "pc", "lane_pc", "live", "mask", "done", "all_lanes", "blocked_on",
        "executed", "_sregs",
    )

    def __init__(self, cta, wid: int, prog: Program, launch, ntid: tuple[int, int, int], registers: bool = True):
        self.cta = cta
        self.wid = wid
        self.launch = launch
        self.code = prog.code
        # a gang's warps keep their registers in the gang (gang.py) until it dissolves
        self.R = register_file(prog.slot_dtypes) if registers else None
        self.pc = 0
        self.lane_pc: Optional[np.ndarray] = None
        tid_linear = wid * 32 + _ALL
        nthreads = ntid[0] * ntid[1] * ntid[2]
        self.live = tid_linear < nthreads
        self.mask: Optional[np.ndarray] = None if self.live.all() else self.live.copy()
        self.done = not self.live.any()
        self.all_lanes = _ALL
        self.blocked_on = ""
        self.executed = 0
        tx = tid_linear % ntid[0]
        ty = (tid_linear // ntid[0]) % ntid[1]
        tz = tid_linear // (ntid[0] * ntid[1])
        u32 = np.uint32
        self._sregs = {
            "%tid.x": tx.astype(u32), "%tid.y": ty.astype(u32), "%tid.z": tz.astype(u32),
            "%laneid": _ALL.astype(u32), "%warpid": u32(wid), "%nwarpid": u32(len(cta.warps_spec)),
            "%lanemask_eq": (np.uint64(1) << _ALL.astype(np.uint64)).astype(u32),
            "%lanemask_lt": ((np.uint64(1) << _ALL.astype(np.uint64)) - np.uint64(1)).astype(u32),
            "%lanemask_le": ((np.uint64(2) << _ALL.astype(np.uint64)) - np.uint64(1)).astype(u32),
            "%lanemask_gt": (~((np.uint64(2) << _ALL.astype(np.uint64)) - np.uint64(1))).astype(u32),
            "%lanemask_ge": (~((np.uint64(1) << _ALL.astype(np.uint64)) - np.uint64(1))).astype(u32),
            "%smid": u32(cta.rank), "%nsmid": u32(_sm_count(prog.env.target)), "%gridid": np.uint64(0),
            "%clock": u32(0), "%clock64": np.uint64(0), "%globaltimer": np.uint64(0),
            "%dynamic_smem_size": u32(cta.smem.size), "%total_smem_size": u32(cta.smem.size),
            "%is_explicit_cluster": u32(1 if cta.cluster.nctas > 1 else 0),
        }
        for axis, i in (("x", 0), ("y", 1), ("z", 2)):
            self._sregs[f"%ntid.{axis}"] = u32(ntid[i])
            self._sregs[f"%ctaid.{axis}"] = u32(cta.ctaid[i])
            self._sregs[f"%nctaid.{axis}"] = u32(launch.grid_ctas[i])
            self._sregs[f"%clusterid.{axis}"] = u32(cta.cluster.cluster_id[i])
            self._sregs[f"%nclusterid.{axis}"] = u32(launch.grid_clusters[i])
            self._sregs[f"%cluster_ctaid.{axis}"] = u32(cta.rank if i == 0 else 0)
            self._sregs[f"%cluster_nctaid.{axis}"] = u32(cta.cluster.nctas if i == 0 else 1)
        self._sregs["%cluster_ctarank"] = u32(cta.rank)
        self._sregs["%cluster_nctarank"] = u32(cta.cluster.nctas)

    def allocate_registers(self) -> None:
        """Zeroed registers for a warp created without them (registers=False)."""
        if self.R is None:
            self.R = register_file(self.cta.prog.slot_dtypes)

    @property
    def fn(self):
        """The PTX function the warp runs."""
        return self.cta.prog.fn

    def sreg(self, name: str):
        try:
            return self._sregs[name]
        except KeyError:
            raise UnsupportedInstructionError(f"special register {name} is not emulated") from None

    def where(self) -> str:
        return f"CTA {self.cta.ctaid} (cluster rank {self.cta.rank}), warp {self.wid}"


def _sm_count(target: "str | None") -> int:
    """SMs of the emulated device of the module's `.target` (a B200's when it names none the emulator models)."""
    t = TARGETS.get((target or "").split(",")[0].strip())
    return t.sm_count if t is not None and t.device is not None else B200_SM_COUNT


def register_file(dtypes: list, lanes: int = 32) -> list:
    """Zeroed registers of `lanes` lanes, one array per slot: rows of one block per dtype (a few allocations per
    warp instead of one per register; kernels declare thousands)."""
    regs: list = [None] * len(dtypes)
    by_dtype: dict = {}
    for i, dt in enumerate(dtypes):
        by_dtype.setdefault(dt, []).append(i)
    for dt, slots in by_dtype.items():
        block = np.zeros((len(slots), lanes), dtype=dt)
        for row, i in zip(block, slots):
            regs[i] = row
    return regs
