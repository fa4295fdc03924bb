"""F10: the staleness study's paired differences, GMC minus each baseline, per horizon and delay.

One panel per (horizon, delay), one row per metric: the final held-out pc (top) and the area
under the pc curve (bottom). Each baseline is a point at the mean paired difference over the
whole seeds (:func:`grids.run_table.whole_seeds`, as the pre-registered analysis) with its 95%
percentile-bootstrap interval (:func:`grids.run_table.differences_table`). Solid grey: zero; dashed:
the non-inferiority margin -MARGIN. A cross marks a baseline unstable in that cell (fewer than
STABLE_FRACTION of its seeds stable, :func:`grids.run_table.stable_in_cell`). Every number is computed by
:func:`load` (the table of differences and intervals, :func:`grids.run_table.differences`, and each cell's
stability); :func:`plot` and :func:`caption` only read it.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from figures import style
from figures.pc_vs_delay import tick
from grids.folders import STUDY, STUDY_2025
from grids.run_table import (
    MARGIN,
    MIN_SEEDS,
    PRIMARY,
    differences,
    exploratory_estimators,
    read_paired,
    read_runs,
    stable_in_cell,
    whole_seeds,
)
from schema.results import source_note
from schema.stability import STABLE_FRACTION

NAME = "f10_study_differences"
TITLE = "F10. Staleness study: GMC minus each baseline (paired by seed, 95% bootstrap intervals)"
SOURCES = [STUDY, STUDY_2025]
METRICS = {"pc_final": "final held-out pc", "auc": "AUC of held-out pc"}  # keys: DIFFERENCE_METRICS


def load_runs() -> pd.DataFrame:
    """The study's runs (one row per run, :func:`grids.run_table.read_runs`), whole seeds only;
    ``attrs["seeds"]`` lists them. The 2025-2026 corrections' runs (``STUDY_2025``, exploratory,
    paired by seed: :func:`grids.run_table.read_paired`), where they exist, are set beside them in
    ``attrs["exploratory"]``: the tables and figures list them, the hypotheses never see them."""
    root = STUDY.require()
    runs = read_runs(root, PRIMARY)
    seeds = whole_seeds(runs)
    out = runs[runs["seed"].isin(seeds)].reset_index(drop=True)
    out.attrs.update(source=str(root), seeds=seeds)
    extra = STUDY_2025.find()
    if extra is not None:
        from studies.common.settings import BESIDE_PRIMARY

        out.attrs["exploratory"] = read_paired(extra, out, BESIDE_PRIMARY)
    return out


def load() -> dict:
    """The runs (:func:`load_runs`) and what :func:`plot` and :func:`caption` read of them (:func:`summary`)."""
    return summary(load_runs())


def summary(runs: pd.DataFrame) -> dict:
    """``runs`` (:func:`load_runs`' frame), their ``table`` (:func:`table`: the paired differences and their
    bootstrap intervals), ``seeds`` (the whole seeds), ``extra`` (the exploratory estimators set beside them)
    and ``gmc_stable`` ((horizon, delay) -> whether GMC is stable in the cell,
    :func:`grids.run_table.stable_in_cell`)."""
    tab = table(runs)
    return {"runs": runs, "table": tab, "seeds": list(runs.attrs.get("seeds", sorted(runs["seed"].unique()))),
            "extra": list(exploratory_estimators(runs)),
            "gmc_stable": {(h, d): stable_in_cell(runs, h, d, "gmc") for h, d in cells(tab)}}


def table(runs: pd.DataFrame) -> pd.DataFrame:
    """:func:`grids.run_table.differences` (computed once per runs frame)."""
    return differences(runs)


def cells(tab: pd.DataFrame) -> list[tuple[str, int]]:
    """(horizon, delay) panels: short before long, then by delay."""
    return sorted({(h, int(d)) for h, d in zip(tab["horizon"], tab["delay"])},
                  key=lambda c: ({"short": 0, "long": 1}.get(c[0], 2), c[0], c[1]))


def plot(loaded: dict, ax=None):
    tab = loaded["table"]
    panels = cells(tab)
    plt.rcParams.update(style.RC)
    if ax is not None:
        axes = np.asarray(ax, dtype=object).reshape(len(METRICS), len(panels))
        fig = axes[0, 0].figure
    else:
        fig, axes = plt.subplots(len(METRICS), max(len(panels), 1), figsize=(2.9 * max(len(panels), 1), 6.2),
                                 sharey=True, squeeze=False)
    extra = set(loaded["extra"])
    baselines = style.ordered(tab["baseline"], last=extra) if len(tab) else []
    ypos = {b: i for i, b in enumerate(reversed(baselines))}
    for r, (metric, mlabel) in enumerate(METRICS.items()):
        for c, (h, d) in enumerate(panels):
            a = axes[r, c]
            t = tab[(tab["metric"] == metric) & (tab["horizon"] == h) & (tab["delay"] == d)]
            a.axvline(0.0, color="0.35", linewidth=0.9)
            if metric == "pc_final":
                a.axvline(-MARGIN, color="0.35", linewidth=0.9, linestyle="--",
                          label=f"non-inferiority margin $-{MARGIN:g}$")
            for row in t.itertuples():
                y, lk = ypos[row.baseline], style.line_kw(row.baseline)
                iv, = a.plot([row.low, row.high], [y, y], color=lk["color"], linewidth=1.6, zorder=2)
                iv.set_gid(f"interval:{metric}:{h}:{d}:{row.baseline}")
                stable = bool(row.baseline_stable)
                pt, = a.plot([row.mean], [y], linestyle="none", color=lk["color"],
                             marker=lk["marker"] if stable else "x", markersize=6 if stable else 7,
                             markeredgewidth=1.6 if not stable else 0.8, zorder=3,
                             markerfacecolor="none" if row.baseline in extra else lk["color"],
                             label=None if stable
                             else f"baseline unstable in the cell (< {STABLE_FRACTION:.0%} of seeds stable)")
                style.mark(pt, metric, h, str(d), row.baseline)
            a.set_yticks(range(len(baselines)), [tick(b, extra) for b in reversed(baselines)])
            gmc_note = "" if loaded["gmc_stable"][(h, d)] else " (GMC unstable)"
            a.set_title(f"{h} horizon, $d = {d}${gmc_note}" if r == 0 else "")
            a.set_xlabel(f"GMC $-$ baseline, {mlabel}")
    n = len(loaded["seeds"])
    fig.suptitle(f"GMC minus each baseline, mean and 95% bootstrap interval over {n} whole seed{'s' * (n != 1)}",
                 fontsize=10)
    style.legend(fig, list(axes.ravel()), ncol=2)
    return fig


def caption(loaded: dict) -> str:
    runs, tab, seeds = loaded["runs"], loaded["table"], loaded["seeds"]
    extra = set(loaded["extra"])
    parts = []
    pc = tab[tab["metric"] == "pc_final"]
    for h, d in cells(pc):
        t = pc[(pc["horizon"] == h) & (pc["delay"] == d)]
        above = [tick(b, extra) for b, lo in zip(t["baseline"], t["low"]) if lo > 0]
        below = [tick(b, extra) for b, hi in zip(t["baseline"], t["high"]) if hi < 0]
        gmc = "" if loaded["gmc_stable"][(h, d)] else " (GMC itself unstable in the cell)"
        parts.append(f"{h} horizon, d = {d}{gmc}: interval above 0 against {', '.join(above) or 'none'}; "
                     "below 0 against "
                     f"{', '.join(below) or 'none'}; {len(t) - len(above) - len(below)} of {len(t)} include 0")
    interim = (f" Interim: fewer than the pre-registered {MIN_SEEDS} whole seeds, so these intervals decide nothing."
               if len(seeds) < MIN_SEEDS else "")
    more = ""
    if extra:
        e = runs.attrs["exploratory"]
        es = e.attrs.get("seeds", [])
        more = (" Hollow markers, (expl.): the 2025-2026 corrections "
                f"({', '.join(style.label(b) for b in sorted(extra))}), "
                f"exploratory (not part of the pre-registered families), paired with the study's GMC over their "
                f"{len(es)} whole seed(s) ({', '.join(map(str, es)) or 'none'}); {source_note(e)}")
    return (f"Paired by seed over {len(seeds)} whole seed(s) ({', '.join(map(str, seeds))}); a positive difference "
            "favours GMC. Final held-out pc: " + "; ".join(parts)
            + ". Crosses mark baselines unstable in their cell." + interim + " "
            + source_note(runs) + more)


def main(out=None):
    return style.save(plot(load()), NAME, out)


if __name__ == "__main__":
    main()
