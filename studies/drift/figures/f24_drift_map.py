"""F24: the drift map: at what off-policy drift each correction fails, under SGD and Adam + clip.

Reads ``results/llm/drift/map.json`` (written by the drift study's analysis, which decides every number
drawn here). Top row, one panel per optimiser: each run of the grid at d = 64 is a point at its early
KL per token (the median over updates d..d+19) and its final held-out pc, in its correction's colour;
a filled marker is a stable run, a hollow one a collapsed run. Along the top of each panel, each
correction's boundary (the drift at which its stable share falls below 80%) with its seed-bootstrap
interval; an arrow marks a boundary beyond the largest drift measured (no level failed). Bottom
panel: the same boundaries on the trajectory chi^2 axis beside the exact shared-parameter model's
(``results/sim/shared_collapse``), where the map file holds them.
"""
from __future__ import annotations

import math

import numpy as np

from figures import style
from grids import grid_relpath
from schema.results import MissingResults, read_json
from schema.sources import Source

NAME = "f24_drift_map"
TITLE = "F24. The drift map: each correction's failure boundary on the measured drift, SGD and Adam + clip"
OPTIMIZERS = {"sgd": "SGD (fixed step)", "adamclip": "Adam + clip 1"}
MAP = Source(f"{grid_relpath('drift')}/map.json", (f"{grid_relpath('drift')}/map.json",),
             "python -m studies.drift (after python -m studies.run --grid drift)")
POINTS_2026 = Source(f"{grid_relpath('corrections_2026')}/verdicts.json",
                     (f"{grid_relpath('corrections_2026')}/verdicts.json",),
                     "python -m studies.corrections_2026 (after python -m studies.run --grid corrections_2026)")
SOURCES = [MAP, POINTS_2026]


def path():
    from grids import grid_folder

    return grid_folder("drift") / "map.json"


def load() -> dict:
    p = path()
    if not p.is_file():
        raise MissingResults(f"missing results llm/drift/map.json: {p} does not exist; make it with `{MAP.command}`")
    m = read_json(p)
    extra = POINTS_2026.find()
    if extra is not None:  # the 2026 corrections' runs on the same axis (docs/PREREGISTRATION-2026.md)
        m["points_2026"] = read_json(extra).get("points", [])
    return m


def _finite(x) -> bool:
    try:
        return x is not None and math.isfinite(float(x)) and float(x) > 0
    except (TypeError, ValueError):
        return False


def _boundary_marks(a, bounds: list[dict], optimizer: str, y: float, dy: float) -> None:
    rows = [b for b in bounds if b["optimizer"] == optimizer and _finite(b.get("boundary"))]
    order = style.ordered([b["estimator"] for b in rows])
    for i, b in enumerate(sorted(rows, key=lambda b: order.index(b["estimator"]))):
        kw = style.line_kw(b["estimator"])
        yy = y - i * dy
        lo, hi = b.get("low"), b.get("high")
        x = float(b["boundary"])
        if _finite(lo) and _finite(hi):
            a.hlines(yy, float(lo), float(hi), colors=kw["color"], linewidth=1.2)
        line = a.plot([x], [yy], marker=">" if b.get("censored") == "right" else "|", color=kw["color"],
                      markersize=8, linestyle="none")
        style.mark(line, "boundary", optimizer, b["estimator"])


def _run_points(a, points: list[dict], opt: str, tag: str, suffix: str, marker_kw: dict) -> None:
    """Each run of ``points`` under optimiser ``opt`` at (early KL, final pc), one series per (correction, fate),
    in its correction's colour, filled if stable and hollow if collapsed, tagged ``series:<tag>:...``."""
    pts = [p for p in points if p["optimizer"] == opt and _finite(p.get("drift"))]
    for est in style.ordered([p["estimator"] for p in pts]):
        kw = style.line_kw(est)
        for stable in (True, False):
            sel = [p for p in pts if p["estimator"] == est and bool(p["stable"]) is stable]
            if not sel:
                continue
            line = a.plot([p["drift"] for p in sel], [p["pc_final"] for p in sel], marker=kw["marker"],
                          linestyle="none", color=kw["color"], markerfacecolor=kw["color"] if stable else "white",
                          label=f"{style.label(est)}{suffix}" if stable else "_", **marker_kw)
            style.mark(line, tag, opt, est, "stable" if stable else "collapsed")


def plot(m: dict, ax=None):
    points = m.get("points", [])
    bounds = m.get("boundaries", [])
    exact = (m.get("exact_model") or {}).get("boundaries", [])
    chi2 = m.get("boundaries_chi2", [])
    n_top = len(OPTIMIZERS)
    if ax is None:
        style.plt.rcParams.update(style.RC)
        fig = style.plt.figure(figsize=(10.0, 6.6))
        grid = fig.add_gridspec(2, n_top, height_ratios=[1.5, 1.0])
        axes = [fig.add_subplot(grid[0, i]) for i in range(n_top)] + [fig.add_subplot(grid[1, :])]
    else:
        fig, axes = style.panels(n_top + 1, ax)
    for a, (opt, label) in zip(axes, OPTIMIZERS.items()):
        _run_points(a, points, opt, "run", "", {"markersize": 4.5, "alpha": 0.85})
        _run_points(a, m.get("points_2026", []), opt, "run-2026", " (2026)", {"markersize": 6, "markeredgewidth": 1.4})
        a.set_xscale("log")
        a.set_xlabel("early KL per token (median over updates d..d+19)")
        a.set_title(label)
        a.set_ylim(-0.05, 1.25)
        _boundary_marks(a, bounds, opt, 1.2, 0.035)
    axes[0].set_ylabel("final held-out pc")
    b = axes[n_top]
    rows = [(r, "LLM") for r in chi2] + [(r, "exact model") for r in exact]
    names = style.ordered({r["estimator"] for r, _ in rows})
    offsets = {("LLM", "sgd"): -0.24, ("LLM", "adamclip"): -0.08, ("exact model", "sgd"): 0.08,
               ("exact model", "adam"): 0.24, ("exact model", "adamclip"): 0.24}
    for r, src in rows:
        if r["estimator"] not in names or not _finite(r.get("boundary")):
            continue
        y = names.index(r["estimator"]) + offsets.get((src, r["optimizer"]), 0.0)
        kw = style.line_kw(r["estimator"])
        if _finite(r.get("low")) and _finite(r.get("high")):
            b.hlines(y, float(r["low"]), float(r["high"]), colors=kw["color"], linewidth=1.0)
        marker = ">" if r.get("censored") == "right" else ("o" if src == "LLM" else "s")
        line = b.plot([float(r["boundary"])], [y], marker=marker, color=kw["color"], linestyle="none", markersize=5,
                      markerfacecolor=kw["color"] if r["optimizer"] != "sgd" else "white")
        style.mark(line, "chi2-boundary", src, r["optimizer"], r["estimator"])
    b.set_yticks(np.arange(len(names)), [style.label(n) for n in names])
    b.set_xscale("log")
    b.set_xlabel(r"boundary on the trajectory $\chi^2$ axis (o: LLM, s: exact shared model; hollow: SGD, filled: "
                 r"Adam; >: none failed)")
    seeds = m.get("seeds", [])
    state = "provisional" if m.get("provisional") else "decided"
    fig.suptitle(f"{len(seeds)} whole seed{'s' * (len(seeds) != 1)}; runs per cell: {_cell_sizes(m)} ({state})",
                 fontsize=9)
    style.legend(fig, axes[:n_top], ncol=7)
    return fig


def _cell_sizes(m: dict) -> str:
    """How many runs the map's cells (correction, optimiser, level) hold: "10 in 28 cells, 5 in 21"."""
    from collections import Counter

    sizes = Counter(int(x["n"]) for b in m.get("boundaries", []) for x in b.get("levels", []))
    return ", ".join(f"{n} in {k} cell{'s' * (k != 1)}" for n, k in sorted(sizes.items(), reverse=True)) or "none"


def caption(m: dict) -> str:
    seeds = m.get("seeds", [])
    state = "provisional, on the seeds finished so far" if m.get("provisional") else "decided"
    gaps = sorted(((b["bracket"][1] / b["bracket"][0], b) for b in m.get("boundaries", []) if b.get("bracket")),
                  key=lambda x: -x[0])
    gap = ("" if not gaps else
           " An interpolated boundary lies between two tested levels with no level run between; the widest gaps: "
           + ", ".join(f"{b['estimator']} under {b['optimizer']} between KL {b['bracket'][0]:.3g} and "
                       f"{b['bracket'][1]:.3g} ({r:.1f}x)" for r, b in gaps[:3]) + ".")
    return (f"Each run at d = 64 of the seeds {', '.join(map(str, seeds)) or 'none'} ({state}); the cells "
            f"(correction, optimiser, level) hold different numbers of runs: {_cell_sizes(m)}. Boundary = drift at "
            f"which the stable share falls below {m.get('share', 0.8):.0%}, with its seed-bootstrap interval." + gap
            + _caption_2026(m))


def _caption_2026(m: dict) -> str:
    pts = m.get("points_2026") or []
    if not pts:
        return ""
    return (f" Larger markers, labelled (2026): {len(pts)} runs of the 2026 corrections (docs/PREREGISTRATION-2026.md; "
            "their verdicts are in the report's section on them), on the same axis, not part of the map's boundaries.")
