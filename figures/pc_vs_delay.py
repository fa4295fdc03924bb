"""Final held-out pc against the rollout delay, per horizon and estimator: the numbers (:func:`summary`, with
the table of means and intervals :func:`table`), the drawing (:func:`plot`) and the caption's sentences
(:func:`caption`) shared by the staleness study's F11 and the GPU study's F14.

One panel per horizon; one line per estimator through its delays, where delay 0 is the seed's one delay-0
run (every trajectory scheme makes the same update there, so it is the common start of every line). Points:
the mean over the seeds of the final held-out pc; bars: the interval of that mean (the caller's interval
function, e.g. :func:`grids.run_table.bootstrap`). Dotted grey: the warm-start pc (the step-0 evaluation,
the same for every run of a horizon). Estimators are dodged sideways. Every number is computed by
:func:`summary`; :func:`plot` only draws and :func:`caption` only reads.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from schema.results import source_note

from . import style

DODGE = 0.05  # horizontal offset between estimators, in axis positions
HORIZON_ORDER = {"short": 0, "long": 1}
COLUMNS = ["horizon", "estimator", "delay", "n", "mean", "low", "high", "exploratory"]


def horizons(runs: pd.DataFrame) -> list[str]:
    """The horizons of ``runs``: short before long, then by name."""
    return sorted(runs["horizon"].unique(), key=lambda h: (HORIZON_ORDER.get(h, 2), h))


def tick(name: str, extra) -> str:
    """An estimator's label; ``(expl.)`` after an exploratory one (one of ``extra``, not in the pre-registered
    families)."""
    return style.label(name) + (" (expl.)" if name in extra else "")


def table(runs: pd.DataFrame, interval: Callable[[np.ndarray], dict], extra=()) -> pd.DataFrame:
    """Per horizon, estimator and delay of the complete runs of ``runs`` (delay 0: the delay-0 run, listed under
    every estimator that has a positive-delay run): n seeds, mean final pc and its interval, ``interval``
    applied to the seeds' final pcs (a dict with ``n``, ``mean``, ``low`` and ``high``, as
    :func:`grids.run_table.bootstrap` returns). The estimators of ``extra`` are listed after the others, with
    ``exploratory`` True."""
    done = runs[runs["complete"]]
    extra = set(extra)
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
                b = interval(x)
                rows.append({"horizon": h, "estimator": e, "delay": d, "n": b["n"], "mean": b["mean"],
                             "low": b["low"], "high": b["high"], "exploratory": e in extra})
    return pd.DataFrame(rows, columns=COLUMNS)


def warm_start_pc(runs: pd.DataFrame, horizon: str) -> float:
    """The mean step-0 held-out pc of the horizon's complete runs."""
    return float(runs.loc[(runs["horizon"] == horizon) & runs["complete"], "pc0"].mean())


def summary(runs: pd.DataFrame, tab: pd.DataFrame) -> dict:
    """What :func:`plot` draws and :func:`caption` reads, computed once: ``runs`` (one row per run,
    ``attrs["seeds"]`` its whole seeds), ``table`` (``tab``, their :func:`table`), ``horizons`` (those of
    ``runs``), ``warm`` (horizon -> :func:`warm_start_pc`) and ``seeds``."""
    hs = horizons(runs)
    return {"runs": runs, "table": tab, "horizons": hs, "warm": {h: warm_start_pc(runs, h) for h in hs},
            "seeds": list(runs.attrs.get("seeds", sorted(runs["seed"].unique())))}


def over_seeds(n: int) -> str:
    """The title's account of the intervals: ``mean and 95% bootstrap interval over n whole seeds``."""
    return f"mean and 95% bootstrap interval over {n} whole seed{'s' * (n != 1)}"


def plot(d: dict, title: str, ax=None):
    """Draw :func:`summary`'s ``d``: one panel per horizon (``ax``: one axis per horizon, or None for a new
    figure), ``title`` above them."""
    tab = d["table"]
    extra = set(tab.loc[tab["exploratory"].astype(bool), "estimator"])
    hs = d["horizons"]
    fig, axes = style.panels(len(hs), ax, width=4.4, height=3.4)
    for a, h in zip(axes, hs):
        t = tab[tab["horizon"] == h]
        delays = sorted(t["delay"].unique())
        pos = {dl: i for i, dl in enumerate(delays)}
        ests = list(dict.fromkeys(t["estimator"]))
        for k, e in enumerate(ests):
            off = (k - (len(ests) - 1) / 2) * DODGE
            s = t[t["estimator"] == e].sort_values("delay")
            x = np.array([pos[dl] for dl in s["delay"]], float) + off
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
        a.axhline(d["warm"][h], color="0.5", linestyle=":", linewidth=1.0, label="warm start")
        a.set_xticks(range(len(delays)), [f"{dl:g}" for dl in delays])
        a.set_xlabel(r"rollout delay $d$ (policy versions)")
        a.set_ylabel("final held-out pc")
        a.set_title(f"{h} horizon")
    fig.suptitle(title, fontsize=10)
    style.legend(fig, axes, ncol=6)
    return fig


def caption(d: dict, min_seeds: int) -> str:
    """The caption of :func:`summary`'s ``d``, whose intervals it names 95% percentile-bootstrap ones (those of
    :func:`grids.run_table.bootstrap`, which F11 and F14 pass): per horizon the warm start, delay 0 and the three
    highest at the largest delay; interim below ``min_seeds`` whole seeds; the runs' source."""
    tab, seeds = d["table"], d["seeds"]
    extra = set(tab.loc[tab["exploratory"].astype(bool), "estimator"])
    parts = []
    for h in d["horizons"]:
        t = tab[(tab["horizon"] == h)]
        dmax = int(t["delay"].max()) if len(t) else 0
        top = t[t["delay"] == dmax].sort_values("mean", ascending=False)
        d0 = t[t["delay"] == 0]["mean"]
        best = "; ".join(f"{tick(r.estimator, extra)} {r.mean:.3f}" for r in top.head(3).itertuples())
        parts.append(f"{h} horizon: warm start {d['warm'][h]:.3f}, delay 0 "
                     f"{float(d0.iloc[0]) if len(d0) else float('nan'):.3f}, highest at d = {dmax}: {best}")
    interim = f" Interim: fewer than the pre-registered {min_seeds} whole seeds." if len(seeds) < min_seeds else ""
    return (f"Mean final held-out pc over {len(seeds)} whole seed(s) ({', '.join(map(str, seeds))}) with 95% "
            "percentile-bootstrap intervals. " + ". ".join(parts) + "." + interim + " " + source_note(d["runs"]))
