"""The B200 timing model's prediction: from a recorded launch (recorder.py) to a kernel time, FLOP/s, bytes/s and
a per-warp timeline with stall reasons, and from a representative cluster to a whole grid (`scale_to_grid`).

Whole-grid model (docs/timing_model.md): the emulated clusters are a representative wave. Every SM of a full wave
runs the same trace, so each SM's TMA gets its share of the L2 bandwidth (l2_bytes_per_s / active SMs, applied when
the trace is timed); waves = ceil(clusters / clusters per wave) run back to back (a static grid pays
cta_launch_cycles per later wave), and the result is floored by the HBM roofline (each operand and the output
crossing HBM once)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from .costs import B200, B200Costs
from .recorder import BUSY, TimingRecorder

LABEL = "predicted by bwtriton's B200 timing model (not measured)"


@dataclass
class Prediction:
    """What the model predicts for one launch (or, after `scale_to_grid`, one whole problem)."""

    seconds: float
    cycles: float
    flops: float
    l2_bytes: float
    hbm_bytes: float
    clusters: int
    waves: int
    bound: str                      # "trace" (the timed cluster) or "HBM roofline"
    warps: list = field(default_factory=list)   # WarpClock of the timed clusters
    counts: dict = field(default_factory=dict)  # instruction class -> warp-instructions retired
    costs: B200Costs = B200
    note: str = ""

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.seconds if self.seconds > 0 else 0.0

    @property
    def bytes_per_s(self) -> float:
        return self.l2_bytes / self.seconds if self.seconds > 0 else 0.0

    def stall_table(self) -> list[tuple[str, dict]]:
        """Per warp: cycles in each state (issuing, waiting on TMA / MMA / a barrier / the cluster barrier)."""
        rows = []
        for wc in self.warps:
            states: dict = {}
            for a, b, s in wc.segments:
                states[s] = states.get(s, 0.0) + (b - a)
            rows.append((wc.name, states))
        return rows

    def summary(self) -> str:
        """The prediction as text, labelled as a model."""
        lines = [f"timing: {LABEL}",
                 f"  kernel time   {self.seconds * 1e6:.2f} us  ({self.cycles:.0f} cycles at "
                 f"{self.costs.v('sm_clock_hz') / 1e9:.3f} GHz; {self.clusters} clusters in {self.waves} "
                 f"wave(s); bound: {self.bound})",
                 f"  achieved      {self.flops_per_s / 1e12:.1f} TFLOP/s, L2->SM {self.bytes_per_s / 1e12:.2f} TB/s, "
                 f"HBM {self.hbm_bytes / max(self.seconds, 1e-30) / 1e12:.2f} TB/s"]
        if self.note:
            lines.append(f"  note          {self.note}")
        states = sorted({s for _, st in self.stall_table() for s in st})
        if self.warps:
            lines.append("  per-warp cycles (first timed cluster; " + LABEL + "):")
            width = max([len(s) for s in states] + [8]) + 2
            lines.append("    " + f"{'warp':<36}" + "".join(f"{s:>{width}}" for s in states))
            for name, st in self.stall_table()[:16]:
                lines.append("    " + f"{name:<36}" + "".join(f"{st.get(s, 0.0):>{width}.0f}" for s in states))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def plot(self, path: str, max_warps: int = 16) -> str:
        """Save the per-warp timeline (a Gantt chart, one row per warp, coloured by state) to `path`; needs the
        optional `plot` extra (matplotlib)."""
        try:
            import matplotlib  # optional dependency: the `plot` extra
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt  # optional dependency: the `plot` extra
        except ImportError:
            from ...errors import InputError  # cycle-free, only needed on this error path
            raise InputError("Prediction.plot needs matplotlib: pip install 'bwtriton[plot]' "
                             "(or pip install matplotlib)") from None
        colours = {BUSY: "#4c72b0", "waiting on TMA": "#dd8452", "waiting on MMA": "#55a868",
                   "waiting on a barrier": "#c44e52", "waiting on the cluster barrier": "#8172b3",
                   "waiting on tcgen05.ld": "#937860"}
        warps = self.warps[:max_warps]
        fig, ax = plt.subplots(figsize=(11, 0.45 * len(warps) + 1.5))
        for row, wc in enumerate(warps):
            for a, b, s in wc.segments:
                ax.barh(row, b - a, left=a, color=colours.get(s, "#999999"), height=0.8)
        ax.set_yticks(range(len(warps)), [wc.name for wc in warps], fontsize=7)
        ax.set_xlabel("cycles")
        ax.set_title(LABEL, fontsize=9)
        ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()],
                  labels=list(colours), fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path


def predict(rec: TimingRecorder, hbm_bytes: float, cluster_size: int) -> Prediction:
    """The prediction for the launch `rec` timed: clusters in waves of what fits on the SMs at once."""
    c = rec.c
    per_cluster = [max((rec.warps[w].t for cta in cl.ctas for w in cta.warps), default=0.0)
                   for cl in rec.clusters]
    per_wave = max(1, int(c.v("sm_count")) // max(cluster_size, 1))
    waves = max(1, math.ceil(len(per_cluster) / per_wave))
    cycles = sum(max(per_cluster[i:i + per_wave]) for i in range(0, len(per_cluster), per_wave))
    cycles += (waves - 1) * c.v("cta_launch_cycles")
    flops = sum(o.flops for o in rec.ops)
    l2 = sum(o.nbytes for o in rec.ops if not o.kind.startswith("tcgen05"))
    t = cycles / c.v("sm_clock_hz") + c.v("launch_overhead_s")
    bound = "trace"
    t_hbm = hbm_bytes / c.v("hbm_bytes_per_s") + c.v("launch_overhead_s")
    if t_hbm > t:
        t, bound = t_hbm, "HBM roofline"
    counts: dict = {}
    for wc in rec.warps.values():
        for k, n in wc.counts.items():
            counts[k] = counts.get(k, 0) + n
    first = rec.clusters[0] if rec.clusters else None
    warps = [rec.warps[w] for cta in first.ctas for w in cta.warps] if first else []
    return Prediction(t, cycles, flops, l2, hbm_bytes, len(per_cluster), waves, bound, warps, counts, c)


def cluster_cycles(rec: TimingRecorder) -> float:
    """The latest warp clock of the first timed cluster."""
    cl = rec.clusters[0]
    return max(rec.warps[w].t for cta in cl.ctas for w in cta.warps)


def scale_to_grid(short: Prediction, long: Prediction, steps_short: int, steps_long: int, steps_full: int,
                  clusters: int, cluster_size: int, hbm_bytes: float, costs: B200Costs = B200,
                  persistent: bool = False) -> Prediction:
    """A whole problem from two timed runs of one representative cluster at `steps_short` and `steps_long` K
    steps: the per-K-step cost (the difference) extrapolates to `steps_full`; `clusters` tiles run in waves of
    sm_count / cluster_size. `persistent`: one launch of CTAs that loop over tiles (CLC), so later waves pay no
    cta_launch_cycles but the prologue/epilogue part of the trace is still paid per tile (no epilogue overlap in
    the kernels modelled)."""
    per_step = (long.cycles - short.cycles) / (steps_long - steps_short)
    fixed = short.cycles - per_step * steps_short
    tile_cycles = fixed + per_step * steps_full
    per_wave = max(1, int(costs.v("sm_count")) // cluster_size)
    waves = math.ceil(clusters / per_wave)
    if persistent:  # one try_cancel round trip per tile, not overlapped (the kernels modelled are not warp-specialised)
        cycles = waves * (tile_cycles + costs.v("clc_latency_cycles"))
    else:
        cycles = waves * tile_cycles + (waves - 1) * costs.v("cta_launch_cycles")
    t = cycles / costs.v("sm_clock_hz") + costs.v("launch_overhead_s")
    flops_tile = (long.flops - short.flops) / (steps_long - steps_short)
    bytes_tile = (long.l2_bytes - short.l2_bytes) / (steps_long - steps_short)
    flops = flops_tile * steps_full * clusters
    l2 = bytes_tile * steps_full * clusters
    bound = "trace (extrapolated)"
    t_hbm = hbm_bytes / costs.v("hbm_bytes_per_s") + costs.v("launch_overhead_s")
    if t_hbm > t:
        t, bound = t_hbm, "HBM roofline"
    return Prediction(t, cycles, flops, l2, hbm_bytes, clusters, waves, bound, long.warps, long.counts, costs,
                      note=f"one cluster timed at {steps_short} and {steps_long} K steps; {per_step:.0f} "
                           f"cycles per K step extrapolated to {steps_full}")
