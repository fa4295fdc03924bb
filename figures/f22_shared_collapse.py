"""F22: the shared-parameter model's search for the LLM's collapse (``python -m simulators.sweep shared_collapse``).

Each panel is one (optimiser, sharing): the share of collapsed runs (J below half its warm start
over the last quarter of the steps) against the step size, one line per scheme, pooled over H,
V and the delay (every cell has 10 paired seeds). Sharing r = 2 and 4 tie the positions' logits
through an r-dimensional code; "H" is the factorised E2 (nothing shared).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from schema.results import Sim, read_sim, source_note

from . import style

NAME = "f22_shared_collapse"
TITLE = "F22. Collapse in the shared-parameter exact model: optimiser, step size, sharing"
SOURCE = Sim("shared_collapse")
SOURCES = [SOURCE]
OPT_TITLE = {"sgd": "SGD", "adam": "Adam"}


def load() -> pd.DataFrame:
    return read_sim(SOURCE)


def shares(df: pd.DataFrame) -> pd.DataFrame:
    """Collapse share per (optimizer, rank, lr, scheme), pooled over H, V, d and seeds, with its count."""
    return df.groupby(["optimizer", "rank", "lr", "scheme"])["collapsed"].agg(["mean", "size"]).reset_index()


def plot(df: pd.DataFrame, ax=None):
    import matplotlib.pyplot as plt

    sh = shares(df)
    opts = [o for o in ("sgd", "adam") if o in set(sh["optimizer"])]
    ranks = sorted(set(sh["rank"]), key=lambda r: (r == "H", r))
    plt.rcParams.update(style.RC)
    if ax is not None:
        axes = np.asarray(ax, dtype=object).reshape(len(opts), len(ranks))
        fig = axes[0, 0].figure
    else:
        fig, axes = plt.subplots(len(opts), len(ranks), figsize=(3.3 * len(ranks), 5.6), squeeze=False, sharey=True)
    for i, opt in enumerate(opts):
        for j, rk in enumerate(ranks):
            a = axes[i, j]
            for s in style.ordered(sh["scheme"].unique()):
                c = sh[(sh["optimizer"] == opt) & (sh["rank"] == rk) & (sh["scheme"] == s)].sort_values("lr")
                lk = style.line_kw(s)
                a.plot(c["lr"], c["mean"], marker=lk["marker"], color=lk["color"], label=style.label(s))
            a.set_xscale("log")
            lrs = sorted(set(sh.loc[sh["optimizer"] == opt, "lr"]))
            a.set_xticks(lrs, [f"{x:g}" for x in lrs])
            a.minorticks_off()
            a.set_ylim(-0.03, 1.03)
            a.set_title(f"{OPT_TITLE[opt]}, " + ("factorised (no sharing)" if rk == "H" else f"shared, r = {rk}"))
            a.set_xlabel(f"{OPT_TITLE[opt]} step size")
            if j == 0:
                a.set_ylabel("share of runs collapsed")
    style.legend(fig, list(axes.ravel()), ncol=4)
    return fig


def pattern_sentence(df: pd.DataFrame) -> str:
    """The plain sentence for the report: was the LLM's pattern reproduced, and where."""
    from claims.shared_model import pattern_table

    tab = pattern_table(df)
    n = len(tab)
    full = tab[tab["pattern"]]
    adam = tab[tab["adam_part"]]
    shared = tab[tab["rank"] != "H"]
    fact = df[df["rank"] == "H"]
    sgd_sh = df[(df["rank"] != "H") & (df["optimizer"] == "sgd")]
    top_sgd = sgd_sh[sgd_sh["lr"] == sgd_sh["lr"].max()].groupby("scheme")["collapsed"].mean()

    trunc = (f"{adam['collapse_tic_trunc'].min():.0%} to {adam['collapse_tic_trunc'].max():.0%} of the seeds"
             if len(adam) else "no cell")

    def cell(r):
        return f"H = {r.H}, V = {r.V}, r = {r.rank}, d = {r.d}, Adam lr {r.adam_lr:g}"

    if len(full):
        where = "; ".join(f"{cell(r)} (collapsed under Adam: IS {r.collapse_is:.0%}, GMC {r.collapse_gmc:.0%}, "
                          f"TIC-trunc {r.collapse_tic_trunc:.0%}, TOPR {r.collapse_topr:.0%}; GMC holds under SGD at "
                          f"lr {r.sgd_gmc_hold_lrs} with a median drift at least Adam's {r.adam_gmc_drift:.2f})"
                          for r in full.itertuples())
        head = (f"The LLM's pattern was reproduced in {len(full)} of the {n} cells searched: {where}.")
    else:
        head = f"The LLM's pattern was not reproduced in any of the {n} cells searched."
    return (head + f" The Adam half alone (IS and GMC collapse in at least half the seeds, TOPR in at most 10%) "
            f"holds in {len(adam)} cells, all with shared parameters ({len(shared)} shared cells) and at Adam's "
            f"largest step sizes ({', '.join(sorted({f'{x:g}' for x in adam['adam_lr']})) or 'none'}); the factorised "
            f"model (nothing shared) collapses in {int(fact['collapsed'].sum())} of {len(fact)} runs. Unlike the LLM, "
            f"TIC-trunc collapses in those cells too ({trunc}), and the shared model collapses under SGD as well: at "
            f"SGD lr {sgd_sh['lr'].max():g} the collapse shares are "
            + ", ".join(f"{style.label(s)} {v:.0%}" for s, v in top_sgd.items())
            + " (TOPR holds under both optimisers). "
            "In this family, sharing parameters is what lets IS and GMC collapse "
            "while TOPR holds, and the step size, not the optimiser, decides whether they do.")


def caption(df: pd.DataFrame) -> str:
    return (pattern_sentence(df) + " Collapse: J below half its warm start over the last quarter of 150 steps. "
            "G = 8, eps = 0.2, warm start J >= 0.25 by exact ascent, leave-one-out advantages. " + source_note(df))


def main(out=None):
    return style.save(plot(load()), NAME, out)


if __name__ == "__main__":
    main()
