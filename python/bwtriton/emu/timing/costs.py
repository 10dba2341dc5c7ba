"""The one table of B200 costs the timing model (model.py) uses. Each figure carries where it comes from: a
published NVIDIA figure, a figure derived from published ones (the derivation is in `source`), a third-party
measurement (cited by title / URL), or the word `assumption` (a guess within what the published numbers allow;
docs/timing_model.md's sensitivity table shows how much each moves a prediction).

Units: cycles are SM clock cycles at `sm_clock_hz`; bandwidths per SM are bytes per cycle, shared ones bytes per
second. Hardware facts that are not costs (the SM count) live in bwtriton.targets."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

from ...targets import B200_SM_COUNT

DATASHEET = "NVIDIA DGX B200 / HGX B200 datasheet (B200 SXM, 1000 W): dense BF16 2.25, FP8 4.5, FP4 9 PFLOP/s"
JARMUSCH = ("A. Jarmusch, S. Chandrasekaran, 'Microbenchmarking NVIDIA's Blackwell Architecture: An in-depth "
            "Architectural Analysis', arXiv:2512.02189")


@dataclass(frozen=True)
class Cost:
    """One figure of the table: its value, unit, and where it comes from ('assumption' when it is a guess)."""

    value: float
    unit: str
    source: str

    @property
    def is_assumption(self) -> bool:
        return self.source.startswith("assumption")


@dataclass(frozen=True)
class B200Costs:
    """The B200 cost table. `scaled(name, factor)` gives a copy with one figure scaled (sensitivity studies)."""

    sm_clock_hz: Cost = Cost(1.855e9, "Hz", "derived: datasheet dense BF16 2.25 PFLOP/s / (148 SMs x 8192 "
                             "FLOP/cycle/SM, the mma_f16 rate below); " + DATASHEET)
    # tcgen05.mma dense throughput of one SM's tensor core, FLOP per cycle (a cta_group::2 MMA of M = 256 keeps
    # both SMs of the pair busy for the cycles of its 128-row half; an M = 64 MMA is timed as M = 128, its
    # instruction descriptor not being visible to the recorder: an upper bound on its cost)
    mma_f16_flop_per_cycle: Cost = Cost(8192, "FLOP/cycle/SM", "derived: " + DATASHEET + " / 148 SMs / clock; "
                                        "kind::f16 (fp16/bf16)")
    mma_tf32_flop_per_cycle: Cost = Cost(4096, "FLOP/cycle/SM", "derived: datasheet dense TF32 1.1 PFLOP/s "
                                         "(half the f16 rate)")
    mma_f8f6f4_flop_per_cycle: Cost = Cost(16384, "FLOP/cycle/SM", "derived: datasheet dense FP8 4.5 PFLOP/s "
                                           "(twice the f16 rate); kind::f8f6f4 and mxf8f6f4")
    mma_f4_flop_per_cycle: Cost = Cost(32768, "FLOP/cycle/SM", "derived: datasheet dense FP4 9 PFLOP/s (four "
                                       "times the f16 rate); kind::mxf4nvf4, kind::mxf4")
    mma_issue_cycles: Cost = Cost(8, "cycles", "assumption: tcgen05.mma issue from one thread, before the "
                                  "tensor core takes it")
    mma_latency_cycles: Cost = Cost(128, "cycles", "assumption: pipeline depth from the last MMA's end of "
                                    "compute to its tcgen05.commit arrival")
    # TMEM data movement
    tcgen05_ld_bytes_per_cycle: Cost = Cost(512, "B/cycle/SM", "assumption: per SM, all four sub-partitions "
                                            "together (" + JARMUSCH + " measures TMEM bandwidth; its summaries give "
                                            "no per-cycle figure to take)")
    tcgen05_st_bytes_per_cycle: Cost = Cost(256, "B/cycle/SM", "assumption: half the read rate (summaries of "
                                            + JARMUSCH + " give TMEM writes half the read bandwidth)")
    tcgen05_cp_bytes_per_cycle: Cost = Cost(128, "B/cycle/SM", "assumption: shared memory read port width")
    tcgen05_ld_latency_cycles: Cost = Cost(64, "cycles", "assumption: tcgen05.ld issue to tcgen05.wait::ld")
    # TMA and the memory system
    tma_latency_cycles: Cost = Cost(700, "cycles", "assumption: TMA load issue to mbarrier complete_tx; summaries "
                                    "of " + JARMUSCH + " put B200's cache-miss access latency near 420 cycles, "
                                    "and TMA adds descriptor and swizzle stages")
    tma_bytes_per_cycle_per_sm: Cost = Cost(128, "B/cycle/SM", "assumption: one 128-byte L2 line per cycle into "
                                            "each SM's shared memory")
    l2_bytes_per_s: Cost = Cost(22e12, "B/s", "assumption: L2 -> SM bandwidth summed over the grid, shared by "
                                "the active SMs (about 2.75x HBM, the H100 ratio)")
    hbm_bytes_per_s: Cost = Cost(8e12, "B/s", DATASHEET + ": 8 TB/s HBM3e (pytorch/ao PR #4002 notes the "
                                 "driver's 7680-bit bus: 7.67 TB/s)")
    global_store_bytes_per_cycle: Cost = Cost(64, "B/cycle/SM", "assumption: st.global / red through the LSU")
    # synchronisation
    mbarrier_latency_cycles: Cost = Cost(24, "cycles", "assumption: last arrival to a waiting thread passing "
                                         "mbarrier.try_wait")
    bar_sync_latency_cycles: Cost = Cost(20, "cycles", "assumption: bar.sync release after the last warp "
                                         "arrives")
    cluster_barrier_latency_cycles: Cost = Cost(380, "cycles", "assumption: barrier.cluster arrive-to-release "
                                                "across 2 SMs (DSMEM round trip, ~200 ns)")
    clc_latency_cycles: Cost = Cost(600, "cycles", "assumption: clusterlaunchcontrol.try_cancel to its "
                                    "mbarrier completion")
    # the rest
    alu_cycles: Cost = Cost(1, "cycles/instruction", "assumption: one warp-instruction per cycle per warp "
                            "(each warp on its own scheduler; no latency or scoreboard stalls modelled)")
    launch_overhead_s: Cost = Cost(4e-6, "s", "assumption: kernel launch + first-wave CTA rasterisation, "
                                   "as CUDA-event timings include it")
    cta_launch_cycles: Cost = Cost(2000, "cycles", "assumption: a new CTA on an SM that finished one (a static "
                                   "grid's later waves): block scheduling, TMEM alloc, barrier init")
    sm_count: Cost = Cost(B200_SM_COUNT, "SMs", "NVIDIA B200: 148 SMs (bwtriton.targets.B200_SM_COUNT, "
                          "as the CUDA driver reports)")

    def scaled(self, name: str, factor: float) -> "B200Costs":
        """This table with figure `name` multiplied by `factor` (the sensitivity table)."""
        c = getattr(self, name)
        return replace(self, **{name: Cost(c.value * factor, c.unit, c.source)})

    def entries(self) -> dict[str, Cost]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def v(self, name: str) -> float:
        return getattr(self, name).value


B200 = B200Costs()

#: tcgen05.mma kind -> (the table entry of its FLOP rate, K per instruction; tcgen05 reference)
MMA_KINDS = {"f16": ("mma_f16_flop_per_cycle", 16), "tf32": ("mma_tf32_flop_per_cycle", 8),
             "f8f6f4": ("mma_f8f6f4_flop_per_cycle", 32), "mxf8f6f4": ("mma_f8f6f4_flop_per_cycle", 32),
             "mxf4nvf4": ("mma_f4_flop_per_cycle", 64), "mxf4": ("mma_f4_flop_per_cycle", 64),
             "i8": ("mma_f8f6f4_flop_per_cycle", 32)}


def costs_table_markdown(costs: B200Costs = B200) -> str:
    """The cost table as markdown (docs/timing_model.md, `bwtriton emulate --timing --costs`)."""
    rows = ["| figure | value | unit | source |", "|---|---|---|---|"]
    for name, c in costs.entries().items():
        rows.append(f"| `{name}` | {c.value:g} | {c.unit} | {c.source} |")
    return "\n".join(rows)
