"""F27: the sample budget on the (B, G) plane: each correction's learned share at d = 64 beside the frozen pairs'
relative MSE at the same splits.

Reads the budget design's runs (``results/llm/budget/`` and the group-size runs it reuses, through
:func:`studies.budget.progress.design_table`) and the frozen-pair table (``results/llm/budget/pairs.csv`` and
``pairs.json``, ``python -m studies.budget.pairs``). Top row, one panel per correction (gmc, tic_trunc, topr, is;
Adam + clip 1e-4, d = 64): the learned share of each cell's finished runs, annotated learned/finished with its exact
binomial 95% interval; a hatched cell has fewer finished runs than the design plans, "not run" none; dashed
diagonals join the splits of one N = B x G. Bottom row: the pairs' relative MSE at the splits of N = 64, 128, 512
(the median over the pairs that passed their validity checks), coloured by its ratio to the best split of the same
N. Every number is computed by :func:`load` (the intervals with :func:`stats.share_ci`); :func:`plot` only draws.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from figures import style
from grids import grid_relpath
from schema.sources import Source

NAME = "f27_budget_plane"
TITLE = "F27. The sample budget on the (B, G) plane: learned share per correction (d = 64) and the frozen pairs' MSE"
RUNS = Source(grid_relpath("budget"), (grid_relpath("budget"),), "python -m studies.run --grid budget --resume")
REUSED = Source(grid_relpath("group_size"), (grid_relpath("group_size"),), "python -m studies.run --grid group_size")
SOURCES = [RUNS, REUSED]
AXIS = (4, 8, 16, 32)


def load(read=None) -> dict:
    """The plane's cells per correction (planned, finished and learned runs, share and its 95% interval), the
    pairs' MSE at the same splits (None, with ``pairs_missing``, when the table is absent) and the run counts.
    ``read``: the run reader (:func:`studies.budget.progress.design_table`'s)."""
    from grids import grid_folder
    from stats import share_ci
    from studies.budget import analysis, progress

    df = progress.design_table(read)
    rows = []
    for est in progress.BUDGET_ESTIMATORS:
        for B, G in progress.plane_splits():
            sel = progress.select(df, est, progress.DELAY, cells={(B, G)})
            done = sel[sel["finished"]]
            k, n = int(done["learned"].sum()), len(done)
            lo, hi = share_ci(k, n)
            rows.append({"estimator": est, "B": B, "G": G, "N": B * G, "planned": len(sel), "finished": n,
                         "learned": k, "share": k / n if n else math.nan, "low": lo, "high": hi})
    pairs = analysis.read_pairs(grid_folder("budget"))
    cells = pd.DataFrame(rows)
    return {"cells": cells, "mse": None if pairs is None else progress.plane_mse(pairs),
            "pair_count": None if pairs is None else int(pairs["pair"].nunique()),
            "pairs_missing": None if pairs is not None else (
                f"the pair table (results/llm/budget/pairs.csv, pairs.json) is missing: `{progress.PAIRS_COMMAND}`"),
            "finished": int(cells["finished"].sum()), "planned": int(cells["planned"].sum())}


def _grid(ax):
    ax.set_xticks(range(4), [str(g) for g in AXIS])
    ax.set_yticks(range(4), [str(b) for b in AXIS])
    ax.set_xlim(-0.5, 3.5)
    ax.set_ylim(-0.5, 3.5)
    ax.set_xlabel("G (completions per prompt)")
    ax.grid(False)
    for s in range(6):  # log2 N - 4: the iso-N diagonal through the cells with B x G = N
        x = np.array([-0.5, 3.5])
        ax.plot(x, s - x, color="0.35", linestyle="--", linewidth=0.6, zorder=3)
        c = s // 2  # labelled at a cell corner on the diagonal, clear of the cells' numbers
        ax.text(c + 0.5, s - c - 0.5, f"N={2 ** (s + 4)}", fontsize=5, color="0.25", ha="center", va="center",
                rotation=-45, zorder=4, bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8})


def _idx(v) -> int:
    return AXIS.index(int(v))


def plot(d: dict, ax=None):
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Rectangle

    ests = list(dict.fromkeys(d["cells"]["estimator"]))
    style.plt.rcParams.update(style.RC)
    if ax is None:
        fig, axes = style.plt.subplots(2, len(ests), figsize=(3.0 * len(ests), 6.2), squeeze=False,
                                       layout="constrained")
    else:
        axes = np.asarray(ax).reshape(2, -1)
        fig = axes[0, 0].figure
    top_img = low_img = None
    mse = d["mse"]
    ratios = mse["ratio"].to_numpy(float) if mse is not None and len(mse) else np.array([1.0])
    norm = LogNorm(vmin=1.0, vmax=max(2.0, float(np.nanmax(ratios))))
    for j, est in enumerate(ests):
        top, low = axes[0, j], axes[1, j]
        c = d["cells"][d["cells"]["estimator"] == est]
        share = np.full((4, 4), np.nan)
        for r in c.itertuples():
            share[_idx(r.B), _idx(r.G)] = r.share
        top_img = top.imshow(share, origin="lower", cmap="viridis", vmin=0, vmax=1, zorder=1)
        for r in c.itertuples():
            x, y = _idx(r.G), _idx(r.B)
            if r.finished:
                top.text(x, y + 0.12, f"{r.learned}/{r.finished}", ha="center", va="center", fontsize=7,
                         color="white" if r.share < 0.6 else "black", zorder=5)
                top.text(x, y - 0.22, f"[{r.low:.2f}, {r.high:.2f}]", ha="center", va="center", fontsize=4.8,
                         color="white" if r.share < 0.6 else "black", zorder=5)
            else:
                top.text(x, y, "not run", ha="center", va="center", fontsize=6, color="0.3", zorder=5)
            if r.finished < r.planned:
                top.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, hatch="///", edgecolor="0.55",
                                        linewidth=0, zorder=2, gid=f"partial:{est}:{r.B}x{r.G}"))
        _grid(top)
        top.set_title(style.label(est), color=style.style(est).color)
        ratio = np.full((4, 4), np.nan)
        if mse is not None:
            m = mse[mse["estimator"] == est]
            for r in m.itertuples():
                ratio[_idx(r.B), _idx(r.G)] = r.ratio
                low.text(_idx(r.G), _idx(r.B), f"{r.rel_mse:.3g}\nx{r.ratio:.2f}", ha="center", va="center",
                         fontsize=6, zorder=5, color="white" if norm(r.ratio) > 0.6 else "black")
        else:
            low.text(1.5, 1.5, "pair table missing:\npython -m\nstudies.budget.pairs", ha="center", va="center",
                     fontsize=7, zorder=5)
        low_img = low.imshow(ratio, origin="lower", cmap="cividis_r", norm=norm, zorder=1)
        _grid(low)
        low.set_title(f"{style.label(est)}: pairs' rel. MSE", fontsize=8)
    axes[0, 0].set_ylabel("B (prompts per update)")
    axes[1, 0].set_ylabel("B (prompts per update)")
    fig.colorbar(top_img, ax=list(axes[0]), shrink=0.8, label="learned share (finished runs)")
    bar = fig.colorbar(low_img, ax=list(axes[1]), shrink=0.8, label="rel. MSE / best split of its N")
    ticks = [t for t in (1, 1.5, 2, 3, 5, 10, 20, 50) if t <= norm.vmax]
    bar.set_ticks(ticks, labels=[f"{t:g}" for t in ticks])
    bar.ax.minorticks_off()
    fig.suptitle(f"{d['finished']} of {d['planned']} runs finished (d = 64, Adam + clip 1e-4)", fontsize=8.5)
    return fig


def caption(d: dict) -> str:
    c = d["cells"]
    partial = int((c["finished"] < c["planned"]).sum())
    state = ("provisional: the grid is read as far as it has run" if d["finished"] < d["planned"]
             else "every planned run finished")
    pairs = (f"Bottom: the frozen pairs' relative MSE E||g - grad J||^2 / ||grad J||^2 at the splits of N = "
             f"{', '.join(str(n) for n in sorted(set(d['mse']['N'])))} (median over the {d['pair_count']} pairs that "
             "passed their validity checks; below it, the ratio to the best split of the same N on the plane)."
             if d["mse"] is not None else f"Bottom: not drawn, {d['pairs_missing']}.")
    return (f"{d['finished']} of the {d['planned']} planned d = 64 runs of the four corrections finished ({state}). "
            "Top: learned share (no collapse and a final held-out pc above the warm start's by more than the studies' "
            "margin) per cell, annotated learned/finished runs with the exact binomial 95% interval; "
            f"{partial} of the {len(c)} cells are hatched (fewer finished runs than planned). Dashed: iso N = B x G. "
            + pairs)
