"""The staleness study's hypotheses H1-H4 as decision rules on a table of runs (docs/PREREGISTRATION.md):
:func:`hypotheses`. The staleness study decides them on its whole seeds; the replicate study re-decides H1, H2 and
H4 on its own runs with the same function."""
from __future__ import annotations

import math

import pandas as pd

from grids.run_table import (
    H4_DIAGNOSTIC,
    H4_THRESHOLD,
    MARGIN,
    MIN_COLLAPSES,
    TRAJECTORY,
    bootstrap,
    holm,
    interval_of,
    p_below,
    paired,
    share_ci,
    stable_in_cell,
)


def verdict_of(low: float, high: float, threshold: float = 0.0) -> str:
    if math.isnan(low) or math.isnan(high):
        return "INCONCLUSIVE"
    return "CONFIRMED" if low > threshold else "REFUTED" if high < threshold else "INCONCLUSIVE"



def hypotheses(runs: pd.DataFrame) -> dict:
    out = {}
    dmax = int(runs.loc[runs["delay"] > 0, "delay"].max()) if (runs["delay"] > 0).any() else 0
    # H1: GMC's final held-out pc exceeds TIC-mask's at the largest delay, long horizon.
    b = bootstrap(paired(runs, "long", dmax, "gmc", "tic_mask"))
    out["H1"] = {"verdict": verdict_of(b["low"], b["high"]), "delay": dmax, "gmc_minus_tic_mask": interval_of(b)}
    # H2: GMC is at least as good as every stable baseline there (non-inferiority by MARGIN, Holm).
    baselines = sorted(e for e in runs.loc[(runs["horizon"] == "long") & (runs["delay"] == dmax), "estimator"].unique()
                       if e != "gmc" and stable_in_cell(runs, "long", dmax, e))
    boots = {e: bootstrap(paired(runs, "long", dmax, "gmc", e)) for e in baselines}
    p_noninf = {e: p_below(bt, -MARGIN) for e, bt in boots.items()}  # H0: gmc - e <= -MARGIN
    p_worse = {e: 1.0 - p_below(bt, 0.0) for e, bt in boots.items()}  # H0: gmc - e >= 0
    noninf, worse = holm(p_noninf), holm(p_worse)
    if not baselines:
        v2 = "INCONCLUSIVE"
    elif all(noninf.values()):
        v2 = "CONFIRMED"
    elif any(worse.values()):
        v2 = "REFUTED"
    else:
        v2 = "INCONCLUSIVE"
    out["H2"] = {"verdict": v2, "delay": dmax, "margin": MARGIN,
                 "baselines": {e: {**interval_of(boots[e]), "p_noninferior": p_noninf[e], "noninferior": noninf[e],
                                   "p_worse": p_worse[e], "worse": worse[e]} for e in baselines},
                 "unstable_excluded": sorted(set(runs.loc[(runs["horizon"] == "long") & (runs["delay"] == dmax),
                                                          "estimator"]) - set(baselines) - {"gmc"})}
    # H3: the gap between trajectory corrections (GMC - TIC-mask) grows with H (long minus short, paired by seed).
    a, c = TRAJECTORY
    g_long = per_seed_difference(runs, "long", dmax, a, c)
    g_short = per_seed_difference(runs, "short", dmax, a, c)
    common = g_long.index.intersection(g_short.index)
    b3 = bootstrap((g_long[common] - g_short[common]).to_numpy(float))
    out["H3"] = {"verdict": verdict_of(b3["low"], b3["high"]), "delay": dmax, "pair": list(TRAJECTORY),
                 "long_gap_minus_short_gap": interval_of(b3)}
    # H4: the diagnostic crossing its threshold precedes collapse.
    pos = runs[(runs["delay"] > 0) & runs["complete"]]
    col = pos[pos["collapsed"]]
    warned_first = [(r.t_warning is not None and not is_nan(r.t_warning) and r.t_warning < r.t_collapse)
                    for r in col.itertuples()]
    k, n = int(sum(warned_first)), len(warned_first)
    quiet = pos[~pos["collapsed"]]
    false_alarms = int(sum(t is not None and not is_nan(t) for t in quiet["t_warning"]))
    if n < MIN_COLLAPSES:
        v4, ci = "INCONCLUSIVE", (math.nan, math.nan)
    else:
        ci = share_ci(k, n)
        v4 = "CONFIRMED" if ci[0] > 0.5 else "REFUTED" if ci[1] < 0.5 else "INCONCLUSIVE"
    out["H4"] = {"verdict": v4, "diagnostic": H4_DIAGNOSTIC, "threshold": H4_THRESHOLD, "collapsed_runs": n,
                 "warned_before_collapse": k, "ci": list(ci), "false_alarms": false_alarms,
                 "non_collapsed_runs": len(quiet)}
    return out



def is_nan(x) -> bool:
    return isinstance(x, float) and math.isnan(x)



def per_seed_difference(runs, horizon, delay, a, b) -> pd.Series:
    sel = runs[(runs["horizon"] == horizon) & (runs["delay"] == delay) & runs["complete"]]
    x = sel[sel["estimator"] == a].groupby("seed")["pc_final"].first()
    y = sel[sel["estimator"] == b].groupby("seed")["pc_final"].first()
    common = x.index.intersection(y.index)
    return x[common] - y[common]
