"""Human-readable forms of a `plan-tmem` report: a text table and the 128-lane x 512-column TMEM map per CTA
(SVG without dependencies; PNG through matplotlib when installed).

The map draws lanes top to bottom and columns left to right. A full-lane allocation is one rectangle; a
half-lane (M=64, Layout F) allocation occupies 16 lanes of each 32-lane sub-partition (lane offset 0 or 16),
so it is drawn as four stripes. Two such allocations at lane offsets 0 and 16 share columns while both live
(lane packing): each keeps its own stripes. Allocations whose cells (lanes x columns) overlap have disjoint live
ranges (the allocator reused the cells); they are drawn as stacked bands within their rectangle, labelled by
name.
"""
from __future__ import annotations

import html
import os

from bwtriton.errors import InputError
from ..targets import TMEM_COLUMNS as COLUMNS, TMEM_LANES as LANES
from .region import ALL_LANES, TmemRegion, d_tile_lanes, describe_lanes
from ..userfiles import check_output_file

_PALETTE = {"acc": ["#4e79a7", "#59a14f", "#9c755f", "#76b7b2", "#edc948"],
            "scales": ["#e15759", "#ff9da7"], "operand": ["#f28e2b", "#b07aa1"], "other": ["#bab0ac"]}


def _allocs(report: dict) -> list[dict]:
    if "allocations" not in report:
        raise ValueError("not a plan-tmem report: it has no 'allocations' (use compiled.reports['plan-tmem'])")
    return list(report["allocations"])


def render_table(report: dict) -> str:
    """The report as a fixed-width text table, with totals and any fallback applied."""
    rows = [("name", "kind", "shape", "dtype", "buf", "cols", "lanes", "columns", "lane off", "live", "location")]
    for a in _allocs(report):
        c0, c1 = a["column_range"]
        rows.append((a["name"], a["kind"], "x".join(map(str, a["shape"])), a["dtype"], str(a["buffers"]),
                     str(a["columns"]), str(a["lanes"]), f"[{c0}, {c1})", str(a["lane_offset"]),
                     f"[{a['live_start']}, {a['live_end']})", a.get("location") or ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    t = report.get("totals", {})
    if t:
        ctas = t.get("ctas_per_sm")
        lines.append("")
        lines.append(f"TMEM per CTA: {t['used_columns']} of {t['budget_columns']} columns used, tcgen05.alloc "
                     f"{t['alloc_columns']} columns ({'fits' if t['fits'] else 'OVER BUDGET'}); "
                     f"{t['sum_columns']} columns without reuse; CTAs/SM allowed by TMEM: "
                     f"{'unlimited' if ctas is None else ctas}")
    for f in report.get("fallbacks", []):
        lines.append(f"fallback applied: {f['rewrite']} - {f.get('detail', '')}")
    up = report.get("upstream")
    if report.get("fallbacks") and up:
        lines.append(f"(before the fallback Triton's plan needed {up['used_columns']} columns)")
    for a, b in report.get("lane_packed", []):
        lines.append(f"lane-packed: %{a} and %{b} share columns at disjoint lanes (M=64 tiles at lane +0 / +16), "
                     "live together without touching")
    for c in report.get("conflicts", []):
        lines.append(f"warning: placement conflict: {c}")
    for w in report.get("warnings", []):
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def _lane_bands(a: dict) -> list[tuple[int, int]]:
    """(first lane, lane count) rectangles an allocation covers."""
    if a["lanes"] >= LANES:
        return [(0, LANES)]
    off = a["lane_offset"]
    return [(32 * q + off, 16) for q in range(4)]


def _region(a: dict) -> TmemRegion:
    """An allocation's lanes x columns, from its report entry."""
    lanes = d_tile_lanes(64, 1, False, a["lane_offset"]) if a["lanes"] < LANES else ALL_LANES
    return TmemRegion(lanes, *a["column_range"])


def _rectangles(allocs: list[dict]) -> list[list[tuple[int, int, float, float]]]:
    """Per allocation, its (col0, col1, lane0, lanes) rectangles. Allocations whose cells overlap (same lanes and
    columns at different times, reused by the allocator) split their lane bands into stacked sub-bands, so each
    stays visible; lane-packed ones (same columns, disjoint lanes) keep their own stripes whole."""
    out = []
    regions = [_region(a) for a in allocs]
    for i, a in enumerate(allocs):
        c0, c1 = a["column_range"]
        same = [j for j in range(len(allocs)) if regions[j].overlaps(regions[i])]
        k, n = same.index(i), len(same)
        out.append([(c0, c1, lane0 + k * nlanes / n, nlanes / n) for lane0, nlanes in _lane_bands(a)])
    return out


def _colours(allocs: list[dict]) -> list[str]:
    used: dict[str, int] = {}
    out = []
    for a in allocs:
        pal = _PALETTE.get(a["kind"], _PALETTE["other"])
        i = used.get(a["kind"], 0)
        used[a["kind"]] = i + 1
        out.append(pal[i % len(pal)])
    return out


def render_svg(report: dict, *, title: str | None = None, col_px: float = 2.0, lane_px: float = 3.0) -> str:
    """SVG picture of the TMEM map of one CTA for a plan-tmem report."""
    allocs = _allocs(report)
    totals = report.get("totals", {})
    width_cols = max([COLUMNS] + [a["column_range"][1] for a in allocs])
    # The left margin holds the lane-range labels (right-aligned, ending before the frame) and the "lanes" title.
    left, top, legend_h = 60, 40, 18 * (len(allocs) + 2)
    w = left + width_cols * col_px + 20
    h = top + LANES * lane_px + 40 + legend_h
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h:.0f}" '
           f'viewBox="0 0 {w:.0f} {h:.0f}" font-family="monospace" font-size="11">']
    ttl = title or (f"TMEM per CTA: {totals.get('used_columns', '?')} / {totals.get('budget_columns', COLUMNS)} "
                    f"columns used")
    out.append(f'<text x="{left}" y="18" font-size="13">{html.escape(ttl)}</text>')
    # Frame: 4 sub-partitions of 32 lanes; the 512-column budget.
    out.append(f'<rect x="{left}" y="{top}" width="{COLUMNS * col_px}" height="{LANES * lane_px}" '
               f'fill="#f7f7f7" stroke="#333"/>')
    for q in range(1, 4):
        y = top + 32 * q * lane_px
        out.append(f'<line x1="{left}" y1="{y}" x2="{left + width_cols * col_px}" y2="{y}" stroke="#999" '
                   f'stroke-dasharray="3,3"/>')
    for q in range(4):
        out.append(f'<text x="{left - 4}" y="{top + (32 * q + 18) * lane_px:.0f}" text-anchor="end">'
                   f'{32 * q}-{32 * q + 31}</text>')
    mid = top + LANES * lane_px / 2
    out.append(f'<text x="12" y="{mid:.0f}" text-anchor="middle" transform="rotate(-90 12 {mid:.0f})">lanes</text>')
    for c in range(0, width_cols + 1, 64):
        x = left + c * col_px
        out.append(f'<line x1="{x}" y1="{top + LANES * lane_px}" x2="{x}" y2="{top + LANES * lane_px + 4}" '
                   f'stroke="#333"/><text x="{x - 6}" y="{top + LANES * lane_px + 16}">{c}</text>')
    out.append(f'<text x="{left + width_cols * col_px / 2:.0f}" y="{top + LANES * lane_px + 28}" '
               f'text-anchor="middle">columns (32-bit each)</text>')
    if width_cols > COLUMNS:
        x = left + COLUMNS * col_px
        out.append(f'<rect x="{x}" y="{top}" width="{(width_cols - COLUMNS) * col_px}" height="{LANES * lane_px}" '
                   f'fill="#fdd" stroke="#c00"/><text x="{x + 4}" y="{top - 4}" fill="#c00">over budget</text>')
    # Allocations sharing columns (disjoint live ranges) are drawn as stacked sub-bands.
    colours = _colours(allocs)
    for i, (a, rects) in enumerate(zip(allocs, _rectangles(allocs))):
        for c0, c1, lane0, nlanes in rects:
            out.append(f'<rect x="{left + c0 * col_px}" y="{top + lane0 * lane_px:.1f}" width="{(c1 - c0) * col_px}" '
                       f'height="{nlanes * lane_px:.1f}" fill="{colours[i]}" fill-opacity="0.85" stroke="#222">'
                       f'<title>{html.escape(_label(a))}</title></rect>')
        c0, _, lane0, nlanes = rects[0]
        out.append(f'<text x="{left + c0 * col_px + 3}" y="{top + (lane0 + nlanes / 2) * lane_px + 4:.0f}" '
                   f'fill="#fff">{html.escape(a["name"])}</text>')
    y = top + LANES * lane_px + 48
    for i, a in enumerate(allocs):
        out.append(f'<rect x="{left}" y="{y - 10}" width="12" height="12" fill="{colours[i]}"/>'
                   f'<text x="{left + 18}" y="{y}">{html.escape(_label(a))}</text>')
        y += 18
    out.append("</svg>")
    return "\n".join(out)


def _label(a: dict) -> str:
    c0, c1 = a["column_range"]
    lanes = "all lanes" if a["lanes"] >= LANES else \
        f"lane half +{a['lane_offset']} ({describe_lanes(_region(a).lanes)})"
    buf = f", {a['buffers']} buffers" if a["buffers"] > 1 else ""
    return (f"{a['name']}: {a['kind']} {'x'.join(map(str, a['shape']))}x{a['dtype']}{buf}, columns [{c0}, {c1}), "
            f"{lanes}, live over IR ops [{a['live_start']}, {a['live_end']})")


def write_tmem_map(report: dict, path: "str | os.PathLike", *, title: str | None = None) -> str:
    """Write the TMEM map of `report` to `path` (.svg, or .png when matplotlib is installed); returns the path."""
    path = os.fspath(path)
    check_output_file(path, "TMEM map", (".svg", ".png"))  # its folder must exist: none is created
    ext = os.path.splitext(path)[1].lower()
    if ext == ".svg":
        with open(path, "w") as f:
            f.write(render_svg(report, title=title))
        return path
    _write_png(report, path, title)
    return path


def _write_png(report: dict, path: str, title: str | None) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError as exc:  # pragma: no cover - matplotlib is optional
        raise InputError("writing a .png TMEM map needs matplotlib; install it or write .svg") from exc
    allocs = _allocs(report)
    width_cols = max([COLUMNS] + [a["column_range"][1] for a in allocs])
    fig, ax = plt.subplots(figsize=(10, 3.6))
    ax.add_patch(Rectangle((0, 0), COLUMNS, LANES, facecolor="#f7f7f7", edgecolor="#333"))
    if width_cols > COLUMNS:
        ax.add_patch(Rectangle((COLUMNS, 0), width_cols - COLUMNS, LANES, facecolor="#fdd", edgecolor="#c00"))
    for a, colour, rects in zip(allocs, _colours(allocs), _rectangles(allocs)):
        for n, (c0, c1, lane0, nlanes) in enumerate(rects):
            ax.add_patch(Rectangle((c0, lane0), c1 - c0, nlanes, facecolor=colour, edgecolor="#222", alpha=0.8,
                                   label=_label(a) if n == 0 else None))
        c0, _, lane0, nlanes = rects[0]
        ax.text(c0 + 2, lane0 + nlanes / 2 + 2, a["name"], color="white", fontsize=8)
    for q in range(1, 4):
        ax.axhline(32 * q, color="#999", linestyle="--", linewidth=0.6)
    ax.set_xlim(0, width_cols)
    ax.set_ylim(LANES, 0)
    ax.set_xlabel("columns (32-bit each)")
    ax.set_ylabel("lanes")
    ax.set_yticks([16, 48, 80, 112], [f"lanes {32 * q}-{32 * q + 31}" for q in range(4)], fontsize=7)
    totals = report.get("totals", {})
    ax.set_title(title or f"TMEM per CTA: {totals.get('used_columns', '?')} / {totals.get('budget_columns', COLUMNS)} "
                          f"columns")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=7, ncol=1, frameon=False)
    fig.savefig(path, bbox_inches="tight", dpi=120)
    plt.close(fig)
