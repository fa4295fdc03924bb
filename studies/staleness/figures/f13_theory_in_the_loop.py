"""F13: theory in the loop. The realised mass bias of each trajectory scheme against THEORY §3's
bound on it, update by update, in the staleness study.

``stale/mass_bias`` is the batch's realised mass bias (mean over groups of (1/G) sum_i |w_i - c_i|)
and ``stale/mass_bias_bound`` THEORY §3's bound evaluated at the batch's plug-in chi^2 (and
mu_4) (:mod:`llm_runs.theory`); only the schemes that log both appear (GMC, TIC-mask, TIC-trunc,
stale; IS has m = 0 exactly). One panel per (delay, horizon), the largest delay on top. Solid:
the median over seeds of the realised bias, its band the seeds' range; dashed: the median over
seeds of the bound, each curve then smoothed by a centred rolling median over SMOOTH updates
(the table is not smoothed). Every complete run counts. Log y-axis from FLOOR up (a zero, or
GMC's float round-off of one, about 1e-8 when no group is capped, lies below it). The fraction
of updates where the bound holds is :func:`grids.bound_table.bound_table`. The drawn bound is the logged
one, Theorem 2's form of the one table :data:`bounds.MASS_BOUNDS`; the caption also gives the hold
rates of the table's tight (Scarf) form, recomputed from the logged chi^2 and mu_4.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from figures import style
from grids.bound_table import BOUND_COLUMNS, RAW_BOUND_COLUMNS, bound_table
from grids.folders import STUDY
from grids.run_table import PRIMARY, read_traces
from schema.results import source_note

NAME = "f13_theory_in_the_loop"
TITLE = "F13. Theory in the loop: realised mass bias against THEORY §3's bound over training"
SOURCES = [STUDY]
REAL, BOUND = BOUND_COLUMNS
HORIZON_ORDER = {"short": 0, "long": 1}
SMOOTH = 9  # updates in the rolling median of the drawn curves
FLOOR = 1e-6  # the lower end of the y-axis


def load() -> pd.DataFrame:
    """The update rows of every complete study run with both :data:`grids.bound_table.BOUND_COLUMNS`."""
    root = STUDY.require()
    tr = read_traces(root, BOUND_COLUMNS + RAW_BOUND_COLUMNS[1:], PRIMARY)
    tr = tr[tr["delay"] > 0]
    estimator_names = [e for e, g in tr.groupby("estimator") if g[REAL].notna().any() and g[BOUND].notna().any()]
    out = tr[tr["estimator"].isin(estimator_names)].reset_index(drop=True)
    out.attrs["source"] = str(root)
    return out


def curves(tr: pd.DataFrame) -> pd.DataFrame:
    """Per horizon, delay, scheme and step: median and range over seeds of the realised bias, and
    the median over seeds of the bound."""
    g = tr.groupby(["horizon", "delay", "estimator", "step"], sort=True)
    out = pd.DataFrame({"real": g[REAL].median(), "real_lo": g[REAL].min(), "real_hi": g[REAL].max(),
                        "bound": g[BOUND].median(), "n": g[REAL].count()}).reset_index()
    return out


def smooth(s: pd.Series) -> np.ndarray:
    """The centred rolling median over :data:`SMOOTH` updates (shorter at the ends)."""
    return s.rolling(SMOOTH, center=True, min_periods=1).median().to_numpy(float)


def panels_of(tr: pd.DataFrame) -> tuple[list[int], list[str]]:
    delays = sorted((int(d) for d in tr["delay"].unique()), reverse=True)
    hs = sorted(tr["horizon"].unique(), key=lambda h: (HORIZON_ORDER.get(h, 2), h))
    return delays, hs


def plot(tr: pd.DataFrame, ax=None):
    cv = curves(tr)
    delays, hs = panels_of(tr)
    plt.rcParams.update(style.RC)
    if ax is not None:
        axes = np.asarray(ax, dtype=object).reshape(len(delays), len(hs))
        fig = axes[0, 0].figure
    else:
        fig, axes = plt.subplots(len(delays), len(hs), figsize=(4.3 * len(hs), 2.9 * len(delays)), squeeze=False,
                                 sharex=True)
    for i, d in enumerate(delays):
        for j, h in enumerate(hs):
            a = axes[i, j]
            c = cv[(cv["horizon"] == h) & (cv["delay"] == d)]
            for e in style.ordered(c["estimator"]):
                s = c[c["estimator"] == e].sort_values("step")
                lk = style.line_kw(e)
                a.fill_between(s["step"], smooth(s["real_lo"]), smooth(s["real_hi"]), color=lk["color"], alpha=0.15,
                               linewidth=0)
                ln, = a.plot(s["step"], smooth(s["real"]), color=lk["color"], linewidth=1.1,
                             label=f"{style.label(e)}: realised")
                style.mark(ln, h, str(d), e, "realised")
                ln, = a.plot(s["step"], smooth(s["bound"]), color=lk["color"], linewidth=1.1, linestyle="--",
                             label=f"{style.label(e)}: bound")
                style.mark(ln, h, str(d), e, "bound")
            a.set_yscale("log", nonpositive="mask")
            a.set_ylim(bottom=FLOOR)
            a.set_title(f"{h} horizon, $d = {d}$")
            a.set_xlabel("update")
            a.set_ylabel("mass bias $m$")
    style.legend(fig, list(axes.ravel()), ncol=4)
    return fig


def caption(tr: pd.DataFrame) -> str:
    bt = bound_table(tr)
    tight = bound_table(tr, form="tight").set_index(["horizon", "delay", "scheme"])["holds_frac"] \
        if {"stale/chi2", "stale/mu4", "G", "eps"} <= set(tr.columns) else pd.Series(dtype=float)

    def tight_part(r):
        key = (r.horizon, r.delay, r.scheme)
        return f" (tight form: {tight[key]:.0%})" if key in tight.index else ""

    parts = [f"{r.horizon} d = {r.delay} {style.label(r.scheme)}: holds at {r.holds_frac:.0%}{tight_part(r)} of "
             f"{r.updates} updates, median ratio {r.ratio_median:.3g}, max {r.ratio_max:.3g}" for r in bt.itertuples()]
    return ("Theory (THEORY §3; the one table bounds.MASS_BOUNDS): each scheme's mass bias m is at most its bound at "
            "the batch's chi^2. Drawn and logged: Theorem 2's form (GMC: chi^2/(4 G eps); TIC-trunc: chi^2/(4 eps); "
            "TIC-mask: sqrt(1 + chi^2) sqrt(mu_4)/eps^2; stale: sqrt(chi^2)); "
            "in brackets the tight form (Scarf for GMC "
            "and TIC-trunc: (sqrt(chi^2/G + eps^2) - eps)/2 and (sqrt(chi^2 + eps^2) - eps)/2; the same bound for "
            "TIC-mask and stale) recomputed from the logged chi^2. The bound is on "
            "expectations; per batch both sides are plug-in estimates, so a batch can break it. Measured (realised / "
            "bound per update, 0/0 = 0): " + "; ".join(parts) + ". " + source_note(tr))


def main(out=None):
    return style.save(plot(load()), NAME, out)


if __name__ == "__main__":
    main()
