"""F8: LLM track importance-ratio diagnostics against delay: effective sample size, fraction of
groups capped, fraction of trajectories clipped, raw |log-ratio|.

Each run contributes its mean over training updates of the ``stale/`` metric (computed on the
RAW trajectory ratios, whatever the estimator); points are the mean over seeds with +-1
standard error over seeds.
"""
from __future__ import annotations

import pandas as pd

from schema.results import (
    DIAGNOSTICS,
    LLM,
    mean_se,
    read_llm_runs,
    run_summary,
    source_note,
)

from . import style
from .f6_llm_accuracy import series

NAME = "f8_llm_diagnostics"
TITLE = "F8. LLM track: importance-ratio diagnostics against the delay"
SOURCES = [LLM]


def load() -> pd.DataFrame:
    return read_llm_runs()


def table(df: pd.DataFrame) -> pd.DataFrame:
    sm = run_summary(df)
    rows = []
    for (e, m, d), g in sm.groupby(["estimator", "mode", "delay"], sort=True):
        row = {"estimator": e, "mode": m, "delay": d}
        for col in DIAGNOSTICS:
            row[col], row[col + "_se"], row[col + "_n"] = mean_se(g[col])
        rows.append(row)
    return pd.DataFrame(rows)


def plot(df: pd.DataFrame, ax=None):
    fig, axes = style.panels(len(DIAGNOSTICS), ax, width=2.9, height=2.7)
    tab = table(df)
    delays = sorted(tab["delay"].unique())
    pos = {d: i for i, d in enumerate(delays)}
    for a, (col, lab) in zip(axes, DIAGNOSTICS.items()):
        for est, mode in series(tab):
            t = tab[(tab["estimator"] == est) & (tab["mode"] == mode) & tab[col].notna()].sort_values("delay")
            if not len(t):
                continue
            lk = style.line_kw(est, mode)
            eb = a.errorbar([pos[d] for d in t["delay"]], t[col], yerr=t[col + "_se"], label=style.label(est, mode),
                            **lk)
            style.mark(eb, col, est, mode)
        a.set_xticks(range(len(delays)), [f"{d:g}" for d in delays])
        a.set_xlabel(r"delay $d$")
        a.set_title(lab)
    style.legend(fig, axes, ncol=5)
    return fig


def caption(df: pd.DataFrame) -> str:
    tab = table(df)
    dmin, dmax = tab["delay"].min(), tab["delay"].max()
    g = tab[(tab["estimator"] == "gmc") & (tab["mode"] == "controlled")].set_index("delay")
    parts = []
    if dmin == dmax:
        parts = []
    elif len(g) and dmin in g.index and dmax in g.index:
        for col, name in (("stale/ess", "ESS/G"), ("stale/mass_cap_frac", "fraction of groups capped"),
                          ("stale/clip_frac", "fraction of trajectories over 1+eps"),
                          ("stale/log_ratio_abs_mean", "mean |log w|")):
            a, b = g.loc[dmin, col], g.loc[dmax, col]
            parts.append(f"{name} {a:.3g} at d = {dmin:g} -> {b:.3g} at d = {dmax:g}")
    meas = (("GMC runs: " + "; ".join(parts)) if parts else "only one delay" if dmin == dmax
            else "no GMC runs at both the smallest and largest delay")
    return ("Theory (THEORY §1, A5): with a delay the behaviour policy drifts from the learner, so the raw ratios w "
            "spread out: ESS falls and the capping/clipping fractions and |log w| rise with d. Measured on the raw "
            f"trajectory ratios, {meas}. Each run is averaged over its updates; points are seed means with +-1 "
            "standard error over seeds. " + source_note(df))


def main(out=None):
    return style.save(plot(load()), NAME, out)


if __name__ == "__main__":
    main()
