"""F21: the mechanism diagnostics over training, per optimiser arm (long horizon, d = 64).

Columns: the arms of the mechanism grid. Rows: four per-update diagnostics (:data:`schema.metrics.MECHANISM`
and ``stale/``): the cosine between the update's gradient and the IS gradient on the same batch
(``mech/cos_is``), GMC's mean group scale lambda on the raw ratios (``stale/gmc_lambda_mean``),
the heaviest trajectory's share of the gradient norm (``mech/heavy_share``) and the parameter step
norm (``mech/step_norm``). Lines: the median over runs, per update (a rolling median over 10
updates), of GMC and TOPR, GMC split into runs that collapsed (dashed) and runs that did not
(solid); the collapse rule is :func:`grids.run_table.collapse_timing`.
"""
from __future__ import annotations

import pandas as pd

from figures import style
from grids.folders import MECHANISM, STUDY
from grids.mechanism_table import DELAY, GRID, load
from grids.run_table import read_traces

from .f20_mechanism_pc import ARM_LABELS, ARMS

NAME = "f21_mechanism_diagnostics"
TITLE = "F21. Mechanism study: update direction, lambda, heaviest trajectory and step norm over training"
SOURCES = [MECHANISM, STUDY]
ROWS = {"mech/cos_is": "cos(update, IS update)", "stale/gmc_lambda_mean": "GMC mean lambda",
        "mech/heavy_share": "heaviest trajectory share", "mech/step_norm": "step norm"}
ESTIMATORS = ("gmc", "topr")
SMOOTH = 10


def traces(runs: pd.DataFrame) -> pd.DataFrame:
    """The per-update rows of the mechanism grid's complete runs at d = 64 of :data:`ESTIMATORS`,
    with the run's arm and whether it collapsed."""
    sel = runs[(runs["source"] == "mechanism") & runs["complete"] & (runs["delay"] == DELAY)
               & runs["estimator"].isin(ESTIMATORS)]
    tr = read_traces(runs.attrs["source"], tuple(ROWS), GRID)
    tr = tr[tr["run"].isin(sel["run"])]
    info = sel.set_index("run")[["arm", "collapsed"]]
    return tr.join(info, on="run")


def curves(tr: pd.DataFrame) -> pd.DataFrame:
    """Median over runs per (arm, estimator, outcome, step), smoothed by a rolling median."""
    tr = tr.assign(outcome=tr["collapsed"].map({True: "collapsed", False: "survived"}))
    med = tr.groupby(["arm", "estimator", "outcome", "step"])[list(ROWS)].median().reset_index()
    parts = []
    for _, g in med.groupby(["arm", "estimator", "outcome"]):
        g = g.sort_values("step").copy()
        g[list(ROWS)] = g[list(ROWS)].rolling(SMOOTH, min_periods=1).median()
        parts.append(g)
    return pd.concat(parts, ignore_index=True) if parts else med


def plot(runs: pd.DataFrame, ax=None):
    import matplotlib.pyplot as plt

    cur = curves(traces(runs))
    arms = [a for a in ARMS if a in set(cur["arm"])]
    fig, axes = plt.subplots(len(ROWS), max(1, len(arms)), figsize=(2.6 * max(1, len(arms)), 1.9 * len(ROWS)),
                             squeeze=False, sharex=True)
    for j, arm in enumerate(arms):
        for i, (col, lab) in enumerate(ROWS.items()):
            a = axes[i][j]
            for (e, out), g in cur[cur["arm"] == arm].groupby(["estimator", "outcome"]):
                kw = style.line_kw(e)
                n = runs[(runs["arm"] == arm) & (runs["estimator"] == e) & (runs["delay"] == DELAY)
                         & (runs["collapsed"] == (out == "collapsed")) & runs["complete"]]
                a.plot(g["step"], g[col], color=kw["color"], linestyle="--" if out == "collapsed" else "-",
                       linewidth=1.2, label=f"{style.label(e)} {out} ({len(n)})")
            if i == 0:
                a.set_title(ARM_LABELS.get(arm, arm), fontsize=8)
            if j == 0:
                a.set_ylabel(lab, fontsize=8)
            if i == len(ROWS) - 1:
                a.set_xlabel("update", fontsize=8)
            a.tick_params(labelsize=7)
            a.legend(fontsize=5)
    fig.tight_layout()
    return fig


def caption(runs: pd.DataFrame) -> str:
    cur = curves(traces(runs))
    parts = []
    for (arm, e, out), g in cur.groupby(["arm", "estimator", "outcome"]):
        parts.append(f"{ARM_LABELS.get(arm, arm)} {style.label(e)} {out}: median cos with IS "
                     f"{g['mech/cos_is'].median():.2f}, lambda {g['stale/gmc_lambda_mean'].median():.2f}, heaviest "
                     f"share {g['mech/heavy_share'].median():.2f}, step norm {g['mech/step_norm'].median():.3g}")
    seeds = runs.attrs.get("seeds", [])
    return (f"Medians over updates of the per-update medians over runs ({len(seeds)} whole seed(s); "
            + ("interim, every complete run" if not seeds else ", ".join(map(str, seeds))) + "). "
            + "; ".join(parts) + ".")


def main(out=None):
    return style.save(plot(load()), NAME, out)


if __name__ == "__main__":
    main()
