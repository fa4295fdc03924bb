"""F26: where each correction fails, against the group size G, at iso samples (B x G = 128, d = 64).

Reads ``results/llm/group_size/verdicts.json`` (``python -m studies.group_size``, which computes every number
drawn here). Left: each correction's boundary on the pre-collapse early-KL axis over the Adam + clip family
(3e-5, 5.5e-5, 1e-4) at G = 4, 8, 16, 32 (``boundaries``: descriptive, no test); a filled marker is an
interpolated boundary, ``^`` a boundary beyond the largest drift measured (no level failed), ``v`` one below the
smallest (every level failed). Right: the stable share at Adam + clip 1e-4 (G3's cell) against G, with exact
binomial 95% intervals. The title names the seeds each point stands on: the grid is read as it is. Every number
is read or computed by :func:`load` (the intervals with :func:`stats.share_ci`); :func:`plot` only draws.
"""
from __future__ import annotations

import math

import numpy as np

from figures import style
from grids import grid_relpath
from schema.results import MissingResults, read_json
from schema.sources import Source

NAME = "f26_boundary_vs_g"
TITLE = "F26. Where each correction fails against the group size G (iso samples B x G = 128, d = 64)"
VERDICTS = Source(f"{grid_relpath('group_size')}/verdicts.json", (f"{grid_relpath('group_size')}/verdicts.json",),
                  "python -m studies.group_size (after python -m studies.run --grid group_size)")
SOURCES = [VERDICTS]
G3_LEVEL = "adamclip0.0001"


def load() -> dict:
    """The verdicts file, each cell with its stable share's interval (:func:`with_share_intervals`)."""
    from grids import grid_folder

    p = grid_folder("group_size") / "verdicts.json"
    if not p.is_file():
        raise MissingResults(f"missing results llm/group_size/verdicts.json: {p} does not exist; make it with "
                             f"`{VERDICTS.command}`")
    return with_share_intervals(read_json(p))


def with_share_intervals(v: dict) -> dict:
    """A copy of the verdicts ``v`` whose every cell also holds ``share_low`` and ``share_high``: the exact
    binomial 95% interval of its stable share, ``round(stable_share * n)`` of ``n`` runs (:func:`stats.share_ci`)."""
    from stats import share_ci

    cells = []
    for c in v.get("cells", []):
        lo, hi = share_ci(round(c["stable_share"] * c["n"]), c["n"])
        cells.append({**c, "share_low": lo, "share_high": hi})
    return {**v, "cells": cells}


def _finite(x) -> bool:
    try:
        return x is not None and math.isfinite(float(x)) and float(x) > 0
    except (TypeError, ValueError):
        return False


def plot(v: dict, ax=None):
    if ax is None:
        style.plt.rcParams.update(style.RC)
        fig, axes = style.plt.subplots(1, 2, figsize=(9.0, 3.4))
        axes = list(axes)
    else:
        fig, axes = style.panels(2, ax)
    left, right = axes
    bounds = [b for b in v.get("boundaries", []) if _finite(b.get("boundary"))]
    names = style.ordered({b["estimator"] for b in bounds})
    for i, est in enumerate(names):
        kw = style.line_kw(est)
        rows = sorted((b for b in bounds if b["estimator"] == est), key=lambda b: b["G"])
        G = np.array([b["G"] for b in rows], float) * (1 + 0.03 * (i - len(names) / 2))
        y = np.array([float(b["boundary"]) for b in rows])
        line, = left.plot(G, y, color=kw["color"], linewidth=1.1, label=style.label(est))
        style.mark(line, "boundary", est)
        for g, yy, b in zip(G, y, rows):
            m = {"right": "^", "left": "v"}.get(b.get("censored"), kw["marker"])
            left.plot([g], [yy], marker=m, color=kw["color"], linestyle="none", markersize=5,
                      markerfacecolor="white" if b.get("censored") else kw["color"])
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xlabel("group size G (B = 128 / G prompts)")
    left.set_ylabel("boundary: early KL per token, pre-collapse")
    cells = [c for c in v.get("cells", []) if c["level"] == G3_LEVEL and c["B"] * c["G"] == 128]
    for i, est in enumerate(style.ordered({c["estimator"] for c in cells})):
        kw = style.line_kw(est)
        rows = sorted((c for c in cells if c["estimator"] == est), key=lambda c: c["G"])
        G = np.array([c["G"] for c in rows], float) * (1 + 0.03 * (i - 2))
        share = np.array([c["stable_share"] for c in rows])
        ci = np.array([(c["share_low"], c["share_high"]) for c in rows])
        line = right.errorbar(G, share, yerr=[share - ci[:, 0], ci[:, 1] - share], color=kw["color"],
                              marker=kw["marker"], markersize=4, linewidth=1.1, capsize=2, label=style.label(est))
        style.mark(line.lines[0], "stable-share", est)
    right.set_xscale("log", base=2)
    right.set_ylim(-0.05, 1.05)
    right.set_xlabel("group size G")
    right.set_ylabel("stable share, Adam + clip 1e-4")
    fig.suptitle(f"seeds per point: {_seeds(v)}", fontsize=8.5)
    style.legend(fig, [left, right], ncol=5)
    return fig


def _seeds(v: dict) -> str:
    from collections import Counter

    sizes = Counter(len(b["seeds"]) for b in v.get("boundaries", []))
    return ", ".join(f"{n} at {k} boundar{'ies' if k != 1 else 'y'}" for n, k in sorted(sizes.items(), reverse=True)
                     ) or "none yet"


def caption(v: dict) -> str:
    from claims.llm_pairs import not_yet_run

    pending = [h for h in ("G3", "G4") if not_yet_run(v.get(h, {}))]
    state = (f"provisional: {', '.join(pending)} not yet decided, the grid is read as far as it has run"
             if pending else "the grid complete")
    return (f"{v.get('runs', 0)} complete runs ({state}). Boundary = the early KL at which the stable share over the "
            "Adam + clip family falls below 80%, interpolated in log KL between tested levels (descriptive; G4 "
            "tests G = 4 against 32 with a seed bootstrap). Right: exact binomial 95% intervals.")
