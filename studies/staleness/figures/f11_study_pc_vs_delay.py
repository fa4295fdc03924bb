"""F11: the staleness study's final held-out pc against the delay, per horizon and estimator.

One panel per horizon; one line per estimator through delays 0, 16 and 64, where delay 0 is
the seed's one delay-0 run (every trajectory scheme makes the same update there, so it is the
common start of every line). Points: the mean over the whole seeds (:func:`grids.run_table.whole_seeds`)
of the final held-out pc; bars: the 95% percentile bootstrap interval of that mean
(:func:`grids.run_table.bootstrap`, the analysis' settings). Dotted grey: the warm-start pc (the
step-0 evaluation, the same for every run of a horizon). Estimators are dodged sideways.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from figures import style
from grids.folders import STUDY, STUDY_2025
from grids.run_table import MIN_SEEDS, bootstrap, exploratory_estimators, with_exploratory
from schema.results import source_note

from .f10_study_differences import load, tick

NAME = "f11_study_pc_vs_delay"
TITLE = "F11. Staleness study: final held-out pc against the delay"
SOURCES = [STUDY, STUDY_2025]
DODGE = 0.05  # horizontal offset between estimators, in axis positions
HORIZON_ORDER = {"short": 0, "long": 1}


def horizons(runs: pd.DataFrame) -> list[str]:
    return sorted(runs["horizon"].unique(), key=lambda h: (HORIZON_ORDER.get(h, 2), h))


def table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per horizon, estimator and delay (delay 0: the delay-0 run, listed under every estimator
    that has a positive-delay run): n seeds, mean final pc and its bootstrap interval. The
    exploratory estimators set beside the study (:func:`grids.run_table.with_exploratory`) are listed
    after the study's, with ``exploratory`` True."""
    both = with_exploratory(runs)
    done = both[both["complete"]]
    extra = set(exploratory_estimators(runs))
    rows = []
    for h in horizons(done):
        g = done[done["horizon"] == h]
        zero = g[g["delay"] == 0].groupby("seed")["pc_final"].first().to_numpy(float)
        for e in style.ordered(g.loc[g["delay"] > 0, "estimator"], last=extra):
            for d in [0, *sorted(int(x) for x in g.loc[(g["delay"] > 0) & (g["estimator"] == e), "delay"].unique())]:
                x = (zero if d == 0 else
                     g[(g["delay"] == d) & (g["estimator"] == e)].groupby("seed")["pc_final"].first().to_numpy(float))
                if not len(x):
                    continue
                b = bootstrap(x)
                rows.append({"horizon": h, "estimator": e, "delay": d, "n": b["n"], "mean": b["mean"],
                             "low": b["low"], "high": b["high"], "exploratory": e in extra})
    return pd.DataFrame(rows, columns=["horizon", "estimator", "delay", "n", "mean", "low", "high", "exploratory"])


def warm_start_pc(runs: pd.DataFrame, horizon: str) -> float:
    """The mean step-0 held-out pc of the horizon's complete runs."""
    return float(runs.loc[(runs["horizon"] == horizon) & runs["complete"], "pc0"].mean())


def plot(runs: pd.DataFrame, ax=None):
    tab = table(runs)
    extra = set(exploratory_estimators(runs))
    hs = horizons(runs)
    fig, axes = style.panels(len(hs), ax, width=4.4, height=3.4)
    for a, h in zip(axes, hs):
        t = tab[tab["horizon"] == h]
        delays = sorted(t["delay"].unique())
        pos = {d: i for i, d in enumerate(delays)}
        ests = list(dict.fromkeys(t["estimator"]))
        for k, e in enumerate(ests):
            off = (k - (len(ests) - 1) / 2) * DODGE
            s = t[t["estimator"] == e].sort_values("delay")
            x = np.array([pos[d] for d in s["delay"]], float) + off
            lk = style.line_kw(e)
            if bool(s["exploratory"].iloc[0]):
                lk = {**lk, "linestyle": "--", "markerfacecolor": "none"}
            ln, = a.plot(x, s["mean"], label=tick(e, extra), **lk)
            style.mark(ln, h, e)
            seg_x = np.repeat(x, 3)
            seg_y = np.column_stack([s["low"], s["high"], np.full(len(s), np.nan)]).ravel()
            seg_x[2::3] = np.nan
            iv, = a.plot(seg_x, seg_y, color=lk["color"], linewidth=0.9, alpha=0.8, zorder=lk["zorder"])
            iv.set_gid(f"interval:{h}:{e}")
        a.axhline(warm_start_pc(runs, h), color="0.5", linestyle=":", linewidth=1.0, label="warm start")
        a.set_xticks(range(len(delays)), [f"{d:g}" for d in delays])
        a.set_xlabel(r"rollout delay $d$ (policy versions)")
        a.set_ylabel("final held-out pc")
        a.set_title(f"{h} horizon")
    n = len(runs.attrs.get("seeds", sorted(runs["seed"].unique())))
    fig.suptitle(f"Final held-out pc, mean and 95% bootstrap interval over {n} whole seed{'s' * (n != 1)}", fontsize=10)
    style.legend(fig, axes, ncol=6)
    return fig


def caption(runs: pd.DataFrame) -> str:
    tab = table(runs)
    seeds = runs.attrs.get("seeds", sorted(runs["seed"].unique()))
    extra = set(tab.loc[tab["exploratory"], "estimator"])
    parts = []
    for h in horizons(runs):
        t = tab[(tab["horizon"] == h)]
        dmax = int(t["delay"].max()) if len(t) else 0
        top = t[t["delay"] == dmax].sort_values("mean", ascending=False)
        d0 = t[t["delay"] == 0]["mean"]
        best = "; ".join(f"{tick(r.estimator, extra)} {r.mean:.3f}" for r in top.head(3).itertuples())
        parts.append(f"{h} horizon: warm start {warm_start_pc(runs, h):.3f}, delay 0 "
                     f"{float(d0.iloc[0]) if len(d0) else float('nan'):.3f}, highest at d = {dmax}: {best}")
    interim = f" Interim: fewer than the pre-registered {MIN_SEEDS} whole seeds." if len(seeds) < MIN_SEEDS else ""
    more = ""
    if extra:
        e = runs.attrs["exploratory"]
        es = e.attrs.get("seeds", [])
        more = (f" Dashed, (expl.): the 2025-2026 corrections, exploratory (not pre-registered), over their "
                f"{len(es)} whole seed(s) ({', '.join(map(str, es)) or 'none'}); {source_note(e)}")
    return (f"Mean final held-out pc over {len(seeds)} whole seed(s) ({', '.join(map(str, seeds))}) with 95% "
            "percentile-bootstrap intervals. " + ". ".join(parts) + "." + interim + " " + source_note(runs) + more)


def main(out=None):
    return style.save(plot(load()), NAME, out)


if __name__ == "__main__":
    main()
