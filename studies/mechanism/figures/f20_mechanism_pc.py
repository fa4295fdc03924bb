"""F20: the mechanism study's final held-out pc per optimiser arm and estimator (long horizon, d = 64).

One group of points per arm (``sgd``: SGD with a fixed step; ``adamclip``: Adam with the gradient
norm clipped at 1; ``adamwclip``: AdamW + weight decay 0.01 + clip 1, verl's actor; ``adam``: the
staleness study's unclipped Adam, with the GMC variants), one point per estimator: the mean final
pc over the seeds complete in every cell of the grid (the whole seeds; before the first whole seed,
every complete run, marked interim), with the 95% percentile-bootstrap interval of the mean
(:func:`grids.run_table.bootstrap`). The numbers under each point: stable seeds / seeds. Dotted grey:
the warm start; dashed: each arm's delay-0 mean. Every number is computed by :func:`load` (the table of
means and intervals, :func:`table`); :func:`plot` only draws.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from figures import style
from grids.folders import MECHANISM, STUDY
from grids.mechanism_table import DELAY
from grids.mechanism_table import load as load_runs
from grids.run_table import bootstrap

NAME = "f20_mechanism_pc"
TITLE = "F20. Mechanism study: final held-out pc per optimiser and estimator (long horizon, d = 64)"
SOURCES = [MECHANISM, STUDY]
ARMS = ("sgd", "adamclip", "adamwclip", "adam", "adamk2")
ARM_LABELS = {"sgd": "SGD (fixed step)", "adamclip": "Adam + clip 1", "adamwclip": "AdamW + decay + clip 1",
              "adam": "Adam (study)", "adamk2": "Adam, GMC+cap kappa 2"}


def load(study=None, root=None) -> dict:
    """The runs (:func:`grids.mechanism_table.load`, ``study`` and ``root`` passed on) and their table of
    means and bootstrap intervals (:func:`table`), the warm-start pc and the whole seeds."""
    runs = load_runs(study, root)
    return {"runs": runs, "table": table(runs), "pc0": float(runs.loc[runs["complete"], "pc0"].mean()),
            "seeds": list(runs.attrs.get("seeds", []))}


def table(runs: pd.DataFrame) -> pd.DataFrame:
    done = runs[runs["complete"]]
    rows = []
    for arm in [a for a in ARMS if a in set(done["arm"])]:
        g = done[done["arm"] == arm]
        for e in style.ordered(g.loc[g["delay"] == DELAY, "estimator"]):
            x = g[(g["delay"] == DELAY) & (g["estimator"] == e)]
            b = bootstrap(x["pc_final"].to_numpy(float))
            rows.append({"arm": arm, "estimator": e, "n": b["n"], "stable": int(x["stable"].sum()), "mean": b["mean"],
                         "low": b["low"], "high": b["high"]})
        z = g[g["delay"] == 0]["pc_final"]
        if len(z):
            rows.append({"arm": arm, "estimator": "delay 0", "n": len(z), "stable": len(z), "mean": float(z.mean()),
                         "low": np.nan, "high": np.nan})
    return pd.DataFrame(rows, columns=["arm", "estimator", "n", "stable", "mean", "low", "high"])


def plot(d: dict, ax=None):
    tab = d["table"]
    fig, (a,) = style.panels(1, ax, width=9.5, height=3.8)
    arms = [x for x in ARMS if x in set(tab["arm"])]
    for i, arm in enumerate(arms):
        t = tab[(tab["arm"] == arm) & (tab["estimator"] != "delay 0")]
        k = len(t)
        for j, r in enumerate(t.itertuples()):
            x = i + (j - (k - 1) / 2) * 0.12
            kw = style.line_kw(r.estimator)
            a.errorbar([x], [r.mean], yerr=[[r.mean - r.low], [r.high - r.mean]], fmt=kw["marker"], color=kw["color"],
                       markersize=5, capsize=2, label=style.label(r.estimator))
            a.annotate(f"{r.stable}/{r.n}", (x, np.nanmin([r.low, r.mean]) - 0.02), ha="center", va="top", fontsize=6)
        z = tab[(tab["arm"] == arm) & (tab["estimator"] == "delay 0")]
        if len(z):
            a.hlines(float(z["mean"].iloc[0]), i - 0.4, i + 0.4, colors="0.4", linestyles="--", linewidth=0.9)
    a.axhline(d["pc0"], color="0.5", linestyle=":", linewidth=1.0)
    a.set_xticks(range(len(arms)), [ARM_LABELS.get(x, x) for x in arms], fontsize=8)
    a.set_ylabel("final held-out pc")
    a.set_ylim(-0.08, 0.85)
    n = len(d["seeds"])
    a.set_title(f"mean and 95% bootstrap interval over {n} whole seed{'s' * (n != 1)}"
                + ("" if n else " (interim: every complete run)"), fontsize=9)
    handles, labels = a.get_legend_handles_labels()
    keep = dict(zip(labels, handles))
    a.legend(keep.values(), keep.keys(), fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    return fig


def caption(d: dict) -> str:
    tab = d["table"]
    parts = []
    for arm in [x for x in ARMS if x in set(tab["arm"])]:
        t = tab[(tab["arm"] == arm) & (tab["estimator"] != "delay 0")].sort_values("mean", ascending=False)
        parts.append(f"{ARM_LABELS.get(arm, arm)}: " + ", ".join(
            f"{style.label(r.estimator)} {r.mean:.3f} ({r.stable}/{r.n} stable)" for r in t.itertuples()))
    seeds = d["seeds"]
    head = (f"Final held-out pc at long d = {DELAY} over {len(seeds)} whole seed(s) ({', '.join(map(str, seeds))})"
            if seeds else f"Final held-out pc at long d = {DELAY}, interim: no whole seed yet, every complete run")
    return head + ". " + "; ".join(parts) + "."


def main(out=None):
    return style.save(plot(load()), NAME, out)


if __name__ == "__main__":
    main()
