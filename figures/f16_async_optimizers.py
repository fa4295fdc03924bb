"""F16: asynchronous training across optimisers and horizons at the largest delay (claim 19).

Long-horizon E2 (:mod:`simulators.token_mdp.factorised`: V = 2, reward 1{every token right},
the right token at probability p0 = 0.8 at every position at theta_0). One column per optimiser
(SGD, Adam, Adam + clip, AdamW + clip); top row the final J, middle row the final J minus TOPR's,
seed by seed (the LLM study's comparison; TIC-mask and stale left out of this row, whose scale
they would set), bottom row the average ||grad J||^2 over the run (log axis); each scheme at each
horizon H: mean over the paired seeds with its 95% t-interval. Every number is computed by :func:`load` (the
intervals with :func:`stats.t_interval`); :func:`plot` only draws.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from claims.optimizers import SOURCE, ordering_table
from schema.results import read_sim, source_note
from stats import t_interval

from . import style

NAME = "f16_async_optimizers"
TITLE = "F16. Asynchronous training across optimisers and horizons at the largest delay (E2, claim 19)"
SOURCES = [SOURCE]
OPT_ORDER = ["sgd", "adam", "adam_clip", "adamw_clip"]
OPT_TITLE = {"sgd": "SGD", "adam": "Adam", "adam_clip": "Adam + clip", "adamw_clip": "AdamW + clip"}
METRICS = [("final_J", "final $J$", False), ("final_J_vs_topr", "final $J$ $-$ TOPR's (paired)", False),
           ("avg_grad_sq", r"avg $\|\nabla J\|^2$", True)]
NOT_PAIRED = ("topr", "tic_mask", "stale")  # left out of the paired row
LEVEL = 0.95  # the intervals' confidence


def load() -> dict:
    """The sweep's rows (``runs``) and their per-cell means and interval half-widths (``cells``,
    :func:`cell_means`)."""
    df = read_sim(SOURCE)
    return {"runs": df, "cells": cell_means(df)}


def cell_means(df: pd.DataFrame) -> pd.DataFrame:
    """Per (optimizer, H, scheme) at the largest delay: mean, 95% t-interval half-width and n of each metric."""
    d = df[df["d"] == df["d"].max()]
    ref = d[d["scheme"] == "topr"].set_index(["optimizer", "H", "seed"])["final_J"]
    d = d.assign(final_J_vs_topr=d["final_J"].to_numpy()
                 - ref.reindex(pd.MultiIndex.from_frame(d[["optimizer", "H", "seed"]])).to_numpy())
    d.loc[d["scheme"].isin(NOT_PAIRED), "final_J_vs_topr"] = np.nan
    rows = []
    for (opt, H, s), g in d.groupby(["optimizer", "H", "scheme"]):
        r = {"optimizer": opt, "H": int(H), "scheme": s, "n": len(g)}
        for m, _, _ in METRICS:
            x = g[m].to_numpy(float)
            r[m], r[m + "_half"], _ = t_interval(x[np.isfinite(x)], LEVEL)
        rows.append(r)
    return pd.DataFrame(rows)


def plot(d: dict, ax=None):
    import matplotlib.pyplot as plt

    df, cm = d["runs"], d["cells"]
    opts = [o for o in OPT_ORDER if o in set(cm["optimizer"])]
    Hs = sorted(cm["H"].unique())
    estimator_names = style.ordered(cm["scheme"].unique())
    plt.rcParams.update(style.RC)
    if ax is not None:
        axes = np.asarray(ax, dtype=object).reshape(len(METRICS), len(opts))
        fig = axes[0, 0].figure
    else:
        fig, axes = plt.subplots(len(METRICS), len(opts), figsize=(3.4 * len(opts), 7.8), squeeze=False,
                                 sharey="row")
    width = 0.8 / max(len(estimator_names), 1)
    for j, opt in enumerate(opts):
        for i, (m, ylabel, logy) in enumerate(METRICS):
            a = axes[i, j]
            for k, s in enumerate(estimator_names):
                c = cm[(cm["optimizer"] == opt) & (cm["scheme"] == s)].sort_values("H")
                c = c[np.isfinite(c[m])]
                if not len(c):
                    continue
                x = np.array([Hs.index(h) for h in c["H"]]) - 0.4 + width * (k + 0.5)
                lk = style.line_kw(s)
                eb = a.errorbar(x, c[m], yerr=c[m + "_half"], fmt=lk["marker"], color=lk["color"],
                                markersize=lk["markersize"], elinewidth=1.0, label=style.label(s))
                style.mark(eb, opt, m, s)
            a.set_xticks(range(len(Hs)), [f"H={h}" for h in Hs])
            if logy:
                a.set_yscale("log")
            if m == "final_J_vs_topr":
                a.axhline(0.0, color="black", linewidth=0.8)
            if i == 0:
                a.set_title(f"{OPT_TITLE.get(opt, opt)}, $d={int(df['d'].max())}$")
            if j == 0:
                a.set_ylabel(ylabel)
    style.legend(fig, list(axes.ravel()), ncol=5)
    return fig


def caption(loaded: dict) -> str:
    df = loaded["runs"]
    tab = ordering_table(df)
    d = int(tab["d"].iloc[0])
    parts = [f"{OPT_TITLE.get(r.optimizer, r.optimizer)} H={r.H}: GMC-TIC-mask avg||grad J||^2 {r.mask_mean:+.2e} "
             f"[{r.mask_low:+.2e}, {r.mask_high:+.2e}], GMC-TOPR final J {r.topr_J_mean:+.3f} "
             f"[{r.topr_J_low:+.3f}, {r.topr_J_high:+.3f}], GMC-TIC-trunc {r.trunc_J_mean:+.3f} "
             f"[{r.trunc_J_low:+.3f}, {r.trunc_J_high:+.3f}]" for r in tab.itertuples()]
    coll = df[df["d"] == d].groupby("scheme")["collapsed"].mean()
    return ("Expected behaviour (claim 17, extended by claim 19): GMC's average ||grad J||^2 at most TIC-mask's; "
            "the LLM "
            "study found GMC's final score below TOPR's and TIC-trunc's at the long horizon and largest delay. "
            f"Measured at d = {d} (paired over {int(tab['n'].min())} seeds, 95% t-intervals): " + "; ".join(parts)
            + ". Share of collapsed runs (final J below half its start) at this delay, over optimisers and horizons: "
            + ", ".join(f"{style.label(s)} {v:.0%}" for s, v in coll.items()) + ". " + source_note(df))


def main(out=None):
    return style.save(plot(load()), NAME, out)


if __name__ == "__main__":
    main()
