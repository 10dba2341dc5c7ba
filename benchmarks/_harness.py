"""A small benchmark harness: register cases (ours vs a peer on the same inputs), run them, print one table,
write CSV and (if matplotlib is installed) a PNG bar chart.

Adding rows from another module::

    from _harness import register_case

    def setup():                       # runs right before timing; its result is passed to both functions
        x = torch.randn(...); w = ...
        return {"x": x, "w": w}

    register_case("nvfp4 decode M=1", fn_ours=lambda s: my_kernel(s["x"], s["w"]),
                  fn_peer=lambda s: torch.matmul(s["x"], s["w_bf16"]), work=bytes_moved, unit="GB/s",
                  peer_name="cuBLAS bf16", group="nvfp4", setup=setup, target_ratio=2.5)

Without `setup`, `fn_ours`/`fn_peer` are called with no argument. `work` is FLOPs for unit "TFLOP/s" and bytes
for "GB/s" (or "TB/s"); it may be a callable taking the setup state. Cases run in registration order; a case
that raises is reported as an error row and the run continues (one bad kernel must not cost the whole run).
Ours and the peer are timed alternately, several rounds, and the median is kept, so clock/thermal drift on the
GPU affects both sides alike.
"""
from __future__ import annotations

import csv
import gc
import math
import statistics
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

_UNIT_SCALE = {"TFLOP/s": 1e12, "GFLOP/s": 1e9, "GB/s": 1e9, "TB/s": 1e12}


@dataclass
class Case:
    name: str
    fn_ours: Callable
    fn_peer: Callable | None
    work: "float | Callable[[Any], float]"
    unit: str = "TFLOP/s"
    peer_name: str = "peer"
    group: str = ""
    setup: Callable[[], Any] | None = None
    check: Callable[[Any, Any], float] | None = None  # (out_ours, out_peer) -> error metric shown in the table
    note: Callable[[Any], str] | None = None           # state -> text (e.g. the autotuned config)
    target_ratio: float | None = None                   # ours/peer goal, shown as pass/miss


@dataclass
class Result:
    case: Case
    ms_ours: float = math.nan
    ms_peer: float = math.nan
    rate_ours: float = math.nan
    rate_peer: float = math.nan
    error: str = ""
    check: float = math.nan
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """ours / peer in the case's unit (> 1: ours is faster); NaN without a peer."""
        return self.rate_ours / self.rate_peer if self.rate_peer else math.nan


CASES: list[Case] = []


def register_case(name: str, fn_ours: Callable, fn_peer: Callable | None, work, **kwargs) -> Case:
    """Add a benchmark row; see the module docstring. Returns the Case."""
    if kwargs.get("unit", "TFLOP/s") not in _UNIT_SCALE:
        raise ValueError(f"unit must be one of {', '.join(_UNIT_SCALE)}")
    case = Case(name, fn_ours, fn_peer, work, **kwargs)
    CASES.append(case)
    return case


def _bench_ms(fn: Callable[[], Any], rep_ms: int) -> float:
    import triton.testing
    return float(triton.testing.do_bench(fn, warmup=max(5, rep_ms // 4), rep=rep_ms))


def run_case(case: Case, rounds: int = 3, rep_ms: int = 60) -> Result:
    """Set up, warm up, optionally check, then time ours and the peer alternately for `rounds` rounds (medians
    kept). Any exception becomes `Result.error` (traceback in `extra`) instead of propagating."""
    res = Result(case)
    state = None
    try:
        state = case.setup() if case.setup else None
        call = (lambda f: (lambda: f(state))) if case.setup else (lambda f: f)
        ours = call(case.fn_ours)
        peer = call(case.fn_peer) if case.fn_peer else None
        out_ours = ours()  # first call: compiles / autotunes outside the timed region
        out_peer = peer() if peer else None
        if case.check and peer is not None:
            res.check = float(case.check(out_ours, out_peer))
        del out_ours, out_peer
        t_ours, t_peer = [], []
        for _ in range(rounds):
            t_ours.append(_bench_ms(ours, rep_ms))
            if peer:
                t_peer.append(_bench_ms(peer, rep_ms))
        res.ms_ours = statistics.median(t_ours)
        res.ms_peer = statistics.median(t_peer) if t_peer else math.nan
        work = case.work(state) if callable(case.work) else case.work
        scale = _UNIT_SCALE[case.unit]
        res.rate_ours = work / (res.ms_ours * 1e-3) / scale
        res.rate_peer = work / (res.ms_peer * 1e-3) / scale if t_peer else math.nan
        res.extra = {"ours_rounds_ms": t_ours, "peer_rounds_ms": t_peer}
        if case.note:
            res.note = case.note(state)
    except Exception as exc:  # noqa: BLE001 - report and continue with the next case
        res.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]
        res.extra["traceback"] = traceback.format_exc()
    finally:
        state = None  # free this case's inputs before the next one allocates (also drops the closures' cell)
        gc.collect()
        try:
            import torch
            torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001
            pass
    return res


def _fmt(x: float, digits: int = 1) -> str:
    return "-" if x != x else f"{x:.{digits}f}"


def format_table(results: list[Result]) -> str:
    """The results as a fixed-width text table, one row per case (error rows show the error)."""
    head = ["case", "unit", "ours", "peer", "ratio", "target", "ms ours", "ms peer", "peer name", "check", "note"]
    rows = []
    for r in results:
        c = r.case
        if r.error:
            rows.append([c.name, c.unit, "ERROR", "", "", "", "", "", c.peer_name, "", r.error])
            continue
        target = "-"
        if c.target_ratio is not None and r.ratio == r.ratio:
            target = f">={c.target_ratio:g} {'ok' if r.ratio >= c.target_ratio else 'MISS'}"
        rows.append([c.name, c.unit, _fmt(r.rate_ours), _fmt(r.rate_peer), _fmt(r.ratio, 3), target,
                     _fmt(r.ms_ours, 3), _fmt(r.ms_peer, 3), c.peer_name,
                     "-" if r.check != r.check else f"{r.check:.2e}", r.note])
    widths = [max(len(h), *(len(str(row[i])) for row in rows)) if rows else len(h) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(str(v).ljust(w) for v, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(r) for r in rows])


def write_csv(results: list[Result], path: Path) -> None:
    """The results as CSV at `path`, one row per case (rates in the case's unit, times in ms)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["group", "case", "unit", "ours", "peer", "ratio", "target_ratio", "ms_ours", "ms_peer",
                    "peer_name", "check", "note", "error"])
        for r in results:
            c = r.case
            w.writerow([c.group, c.name, c.unit, r.rate_ours, r.rate_peer, r.ratio, c.target_ratio, r.ms_ours,
                        r.ms_peer, c.peer_name, r.check, r.note, r.error])


def write_plot(results: list[Result], path: Path, title: str) -> bool:
    """Grouped bars (ours vs peer) per case, one panel per unit. Returns False when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ok = [r for r in results if not r.error]
    units = list(dict.fromkeys(r.case.unit for r in ok))
    if not units:
        return False
    fig, axes = plt.subplots(len(units), 1, figsize=(max(6, 1.1 * len(ok) + 2), 3.8 * len(units)), squeeze=False)
    for ax, unit in zip(axes[:, 0], units):
        rows = [r for r in ok if r.case.unit == unit]
        xs = range(len(rows))
        ax.bar([x - 0.2 for x in xs], [r.rate_ours for r in rows], 0.4, label="bwtriton")
        ax.bar([x + 0.2 for x in xs], [r.rate_peer for r in rows], 0.4, label="peer")
        for x, r in zip(xs, rows):
            if r.ratio == r.ratio:
                ax.text(x, max(r.rate_ours, r.rate_peer if r.rate_peer == r.rate_peer else 0), f"{r.ratio:.2f}x",
                        ha="center", va="bottom", fontsize=8)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([f"{r.case.name}\n(vs {r.case.peer_name})" for r in rows], rotation=30, ha="right",
                           fontsize=7)
        ax.set_ylabel(unit)
        ax.legend(fontsize=8)
    axes[0, 0].set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def run_all(out_dir: "str | Path", *, name: str = "bench", only: list[str] | None = None, rounds: int = 3,
            rep_ms: int = 60, title: str | None = None) -> list[Result]:
    """Run registered cases (those whose group or name contains one of `only`), print the table, write
    `<name>.csv`, `<name>.txt` (the table), `<name>.png` and `<name>_errors.txt` (tracebacks) under `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cases = [c for c in CASES if not only or any(o in c.group or o in c.name for o in only)]
    results = []
    t0 = time.time()
    for case in cases:
        r = run_case(case, rounds=rounds, rep_ms=rep_ms)
        results.append(r)
        status = r.error or f"ours {_fmt(r.rate_ours)} vs peer {_fmt(r.rate_peer)} {case.unit}"
        print(f"[{time.time() - t0:6.1f}s] {case.name}: {status}", flush=True)
        write_csv(results, out / f"{name}.csv")  # after every case, so a run cut short keeps what it measured
    table = format_table(results)
    print("\n" + table, flush=True)
    write_csv(results, out / f"{name}.csv")
    (out / f"{name}.txt").write_text(table + "\n")
    errors = [f"== {r.case.name}\n{r.extra.get('traceback', '')}" for r in results if r.error]
    if errors:
        (out / f"{name}_errors.txt").write_text("\n".join(errors))
    if write_plot(results, out / f"{name}.png", title or name):
        print(f"wrote {out / (name + '.csv')} and {out / (name + '.png')}")
    else:
        print(f"wrote {out / (name + '.csv')} (matplotlib missing: no plot)")
    return results
