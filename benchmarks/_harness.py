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
Ours and the peer are timed alternately under CUDA-graph replay (kernel time, no host overhead; `_timing.py`),
several rounds, and the median is kept, so clock/thermal drift on the GPU affects both sides alike. A setup may
return a list of states (copies of the inputs): the graph then cycles through them so the working set exceeds L2.
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
    bw_target: float | None = None                      # goal for ours / measured copy bandwidth (GB/s rows)
    extra_peers: list = field(default_factory=list)     # (name, fn) more alternatives, timed like the peer


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
    extra_peers: dict = field(default_factory=dict)     # name -> {"ms": .., "check": ..} or {"error": ..}

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


def run_case(case: Case, rounds: int = 3, rep_ms: int = 20) -> Result:
    """Set up, warm up, optionally check, then time ours and the peer alternately for `rounds` rounds (medians
    kept), each under CUDA-graph replay (`_timing.graph_ms`; `rep_ms` is the graph's length). A setup that returns
    a list of states is timed round-robin over them (copies of the inputs that together exceed L2). Any exception
    becomes `Result.error` (traceback in `extra`) instead of propagating."""
    from _timing import graph_ms
    res = Result(case)
    states = None
    try:
        state = case.setup() if case.setup else None
        states = state if isinstance(state, list) else [state]
        bind = (lambda f: [(lambda s=s: f(s)) for s in states]) if case.setup else (lambda f: [f])
        ours = bind(case.fn_ours)
        peer = bind(case.fn_peer) if case.fn_peer else None
        out_ours = ours[0]()  # first call: compiles / autotunes outside the timed region
        out_peer = peer[0]() if peer else None
        if case.check and peer is not None:
            res.check = float(case.check(out_ours, out_peer))
        del out_peer
        res.extra_peers = _time_extra_peers(case, bind, out_ours, rep_ms)
        del out_ours
        t_ours, t_peer, timers = [], [], set()
        for _ in range(rounds):
            ms, timer = graph_ms(ours, target_ms=rep_ms)
            t_ours.append(ms)
            timers.add(timer)
            if peer:
                ms, timer = graph_ms(peer, target_ms=rep_ms)
                t_peer.append(ms)
                timers.add(f"peer {timer}")
        res.ms_ours = statistics.median(t_ours)
        res.ms_peer = statistics.median(t_peer) if t_peer else math.nan
        work = case.work(states[0]) if callable(case.work) else case.work
        scale = _UNIT_SCALE[case.unit]
        res.rate_ours = work / (res.ms_ours * 1e-3) / scale
        res.rate_peer = work / (res.ms_peer * 1e-3) / scale if t_peer else math.nan
        res.extra = {"ours_rounds_ms": t_ours, "peer_rounds_ms": t_peer, "timer": sorted(timers),
                     "copies": len(states)}
        if case.note:
            res.note = case.note(states[0])
    except Exception as exc:  # noqa: BLE001 - report and continue with the next case
        res.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]
        res.extra["traceback"] = traceback.format_exc()
    finally:
        states = state = None  # free this case's inputs before the next one allocates
        gc.collect()
        try:
            import torch
            torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001
            pass
    return res


def _time_extra_peers(case: Case, bind: Callable, out_ours, rep_ms: int) -> dict:
    """Time each of the case's extra peers (one graph-replay round each); a peer that raises (not installed, or
    its kernel does not run on this GPU) is recorded with its error and the others go on."""
    from _timing import graph_ms
    found = {}
    for name, fn in case.extra_peers:
        try:
            calls = bind(fn)
            out = calls[0]()
            entry = {"check": float(case.check(out_ours, out)) if case.check else math.nan}
            del out
            entry["ms"] = graph_ms(calls, target_ms=rep_ms)[0]
        except Exception as exc:  # noqa: BLE001 - an unavailable peer is reported, not fatal
            entry = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:100]}
        found[name] = entry
    return found


def _extra_peer_text(r: Result) -> str:
    """'name 12.3 us (ours 1.85x, check 1e-3)' per extra peer, '; '-joined."""
    parts = []
    for name, e in r.extra_peers.items():
        if "error" in e:
            parts.append(f"{name}: n/a ({e['error']})")
        else:
            chk = "" if e["check"] != e["check"] else f", check {e['check']:.1e}"
            parts.append(f"{name} {e['ms'] * 1e3:.1f} us (ours {e['ms'] / r.ms_ours:.2f}x{chk})")
    return "; ".join(parts)


def _fmt(x: float, digits: int = 1) -> str:
    return "-" if x != x else f"{x:.{digits}f}"


def table_rows(results: list[Result], copy_gbs: float | None = None) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the results table. With `copy_gbs` (the card's measured copy bandwidth), rows in GB/s
    also show ours as a fraction of it, against the case's `bw_target`."""
    head = ["case", "unit", "ours", "peer", "ratio", "target", "us ours", "us peer", "of copy BW", "peer name",
            "check", "other peers (same run)", "timer", "note"]
    rows = []
    for r in results:
        c = r.case
        if r.error:
            rows.append([c.name, c.unit, "ERROR", "", "", "", "", "", "", c.peer_name, "", "", "", r.error])
            continue
        target = "-"
        if c.target_ratio is not None and r.ratio == r.ratio:
            target = f">={c.target_ratio:g} {'ok' if r.ratio >= c.target_ratio else 'MISS'}"
        frac = "-"
        if copy_gbs and c.unit in ("GB/s", "TB/s"):
            f = r.rate_ours * _UNIT_SCALE[c.unit] / 1e9 / copy_gbs
            frac = f"{100 * f:.0f}%"
            if c.bw_target is not None:
                frac += f" (>={100 * c.bw_target:.0f}% {'ok' if f >= c.bw_target else 'MISS'})"
        rows.append([c.name, c.unit, _fmt(r.rate_ours), _fmt(r.rate_peer), _fmt(r.ratio, 3), target,
                     _fmt(r.ms_ours * 1e3, 1), _fmt(r.ms_peer * 1e3, 1), frac, c.peer_name,
                     "-" if r.check != r.check else f"{r.check:.2e}", _extra_peer_text(r) or "-",
                     ",".join(r.extra.get("timer", [])), r.note])
    return head, rows


def format_table(results: list[Result], copy_gbs: float | None = None) -> str:
    """The results as a fixed-width text table, one row per case (error rows show the error)."""
    head, rows = table_rows(results, copy_gbs)
    widths = [max(len(h), *(len(str(row[i])) for row in rows)) if rows else len(h) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(str(v).ljust(w) for v, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(r) for r in rows])


def format_markdown(results: list[Result], copy_gbs: float | None = None) -> str:
    """The results as a markdown table, one section per case group."""
    head, rows = table_rows(results, copy_gbs)
    out, group = [], None
    for r, row in zip(results, rows):
        if r.case.group != group:
            group = r.case.group
            out += ["", f"### {group or 'other'}", "", "| " + " | ".join(head) + " |",
                    "|" + "---|" * len(head)]
        out.append("| " + " | ".join(str(v).replace("|", "/") for v in row) + " |")
    return "\n".join(out).lstrip() + "\n"


def results_json(results: list[Result]) -> list[dict]:
    """The results as plain dicts (times in ms, rates in the case's unit), for `json.dump`."""
    def num(x):
        return None if x != x else x
    return [{"group": r.case.group, "case": r.case.name, "unit": r.case.unit, "ours": num(r.rate_ours),
             "peer": num(r.rate_peer), "ratio": num(r.ratio), "target_ratio": r.case.target_ratio,
             "bw_target": r.case.bw_target, "ms_ours": num(r.ms_ours), "ms_peer": num(r.ms_peer),
             "peer_name": r.case.peer_name, "check": num(r.check), "note": r.note, "error": r.error,
             "rounds_ms": {"ours": r.extra.get("ours_rounds_ms"), "peer": r.extra.get("peer_rounds_ms")},
             "timer": r.extra.get("timer"), "copies": r.extra.get("copies"),
             "extra_peers": r.extra_peers} for r in results]


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
            rep_ms: int = 20, title: str | None = None, copy_gbs: float | None = None,
            preamble: str = "", extra: "dict | Callable[[], dict] | None" = None) -> list[Result]:
    """Run registered cases (those whose group or name contains one of `only`), print the table, write
    `<name>.csv`, `<name>.txt` (the table), `<name>.md` (`preamble` + the table per group), `<name>.json`
    (the results plus `extra`, called after the rows ran if it is a function), `<name>.png` and
    `<name>_errors.txt` (tracebacks) under `out_dir`."""
    import json
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cases = [c for c in CASES if not only or any(o in c.group or o in c.name for o in only)]

    def write(results: list[Result], extra_now: dict | None) -> None:
        write_csv(results, out / f"{name}.csv")
        (out / f"{name}.md").write_text((f"# {title or name}\n\n{preamble}\n" if title or preamble else "")
                                        + format_markdown(results, copy_gbs)
                                        + ("" if len(results) == len(cases) else
                                           f"\n(partial: {len(results)} of {len(cases)} rows)\n"))
        (out / f"{name}.json").write_text(json.dumps({"title": title, **(extra_now or {}), "copy_gbs": copy_gbs,
                                                      "results": results_json(results)}, indent=1))

    results = []
    t0 = time.time()
    for i, case in enumerate(cases):
        r = run_case(case, rounds=rounds, rep_ms=rep_ms)
        results.append(r)
        status = r.error or f"ours {_fmt(r.rate_ours)} vs peer {_fmt(r.rate_peer)} {case.unit}"
        print(f"[{time.time() - t0:6.1f}s] ({i + 1}/{len(cases)}) {case.name}: {status}", flush=True)
        write(results, None)  # after every case, so a run cut short keeps what it measured
    table = format_table(results, copy_gbs)
    print("\n" + table, flush=True)
    (out / f"{name}.txt").write_text(table + "\n")
    write(results, extra() if callable(extra) else extra)
    errors = [f"== {r.case.name}\n{r.extra.get('traceback', '')}" for r in results if r.error]
    if errors:
        (out / f"{name}_errors.txt").write_text("\n".join(errors))
    plotted = write_plot(results, out / f"{name}.png", title or name)
    print(f"wrote {out / name}.{{csv,txt,md,json}}" + (" and .png" if plotted else " (matplotlib missing: no plot)"))
    return results
