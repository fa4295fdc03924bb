"""What the drift study's report shows beside its pre-registered verdicts (none of it changes one): D2's
interval over whole seeds, the points read after their run's collapse and the map on the pre-collapse
window, each level's gain over the warm start, how far the axis depends on the correction, and the
mechanism study's M6 on both counts of its runs."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from grids.run_table import ALPHA, BOOT_SEED, MARGIN, bootstrap, grid_folder
from studies.common.drift_map import (
    AXIS,
    N_BOOT,
    PRE_AXIS,
    SHARE,
    boundaries,
    cell_table,
    find_boundary,
    level_runs,
    resampled_boundary,
)


def d2_whole_seeds(runs: pd.DataFrame, seeds: list[int], n_boot: int = N_BOOT) -> dict:
    """D2's Spearman interval with whole seeds resampled: each draw picks the seeds with replacement once,
    for every correction and both optimisers together, and recomputes every boundary from those seeds'
    runs (a level run on fewer seeds keeps the drawn seeds it has). The pre-registration defines one
    bootstrap, over whole seeds (every run of a seed together); :func:`studies.drift.verdicts.d2`'s interval
    jitters each boundary independently within its own interval instead."""
    from studies.drift.grids import DRIFT_ESTIMATORS

    r = level_runs(runs, seeds)
    cells = {key: {lv: {s: (x[AXIS].to_numpy(float), x["stable"].to_numpy(float)) for s, x in g2.groupby("seed")}
                   for lv, g2 in g.groupby("level")}
             for key, g in r.groupby(["estimator", "family"])}
    rng = np.random.default_rng(BOOT_SEED)
    rhos = []
    for _ in range(n_boot):
        pick = rng.choice(seeds, size=len(seeds), replace=True)
        b = {key: resampled_boundary(by_level, pick) for key, by_level in cells.items()}
        x = [b.get((e, "sgd")) for e in DRIFT_ESTIMATORS]
        y = [b.get((e, "adamclip")) for e in DRIFT_ESTIMATORS]
        if None not in x and None not in y:
            rhos.append(float(stats.spearmanr(x, y).statistic))
    rhos = [x for x in rhos if math.isfinite(x)]
    return {"resampling": "whole seeds", "n_boot": n_boot, "draws": len(rhos),
            "low": float(np.quantile(rhos, ALPHA / 2)) if rhos else math.nan,
            "high": float(np.quantile(rhos, 1 - ALPHA / 2)) if rhos else math.nan}


def after_collapse(runs: pd.DataFrame, seeds: list[int]) -> dict:
    """How many of the map's points (level runs at d > 0) had their early KL window read at or after their
    run's collapse (the stability rule's collapse update before the window's end, d + 20), per optimiser;
    how many of those collapsed at or before the window's start (the whole window after the collapse)."""
    from llm_runs.drift import EARLY_UPDATES

    r = level_runs(runs, seeds)
    out = {}
    for fam, g in r.groupby("family"):
        tc = pd.to_numeric(g["t_collapse_rule"], errors="coerce")
        unstable = ~g["stable"].astype(bool)
        after = unstable & (tc < g["delay"] + EARLY_UPDATES)
        out[fam] = {"points": len(g), "unstable": int(unstable.sum()), "after_collapse": int(after.sum()),
                    "whole_window_after": int((unstable & (tc <= g["delay"])).sum()),
                    "collapse_unknown": int((unstable & tc.isna()).sum())}
    return out


def precollapse_boundaries(runs: pd.DataFrame, seeds: list[int], early: list[dict]) -> list[dict]:
    """The map on the pre-collapse window (:data:`PRE_AXIS`): each boundary beside the early-window one,
    with ``moved`` when its point estimate differs by more than 1% or its censoring differs, and
    ``outside`` when it lies outside the early boundary's 95% seed-bootstrap interval."""
    out = []
    for b in boundaries(runs, seeds, axis=PRE_AXIS):
        e = find_boundary(early, b["estimator"], b["optimizer"])
        moved = (e is None or b["censored"] != e["censored"] or b["boundary"] is None or e["boundary"] is None
                 or abs(math.log(b["boundary"] / e["boundary"])) > 0.01)
        outside = (e is not None and None not in (e["low"], e["high"], b["boundary"])
                   and not e["low"] <= b["boundary"] <= e["high"])
        out.append({**b, "early_boundary": None if e is None else e["boundary"], "moved": bool(moved),
                    "outside_early_interval": bool(outside)})
    return out


def gains(runs: pd.DataFrame, seeds: list[int]) -> list[dict]:
    """Per (optimiser, level, correction) at d = 64: the runs' gain over their warm start (final held-out pc
    minus the run's first evaluation, paired within the run), its mean and 95% bootstrap interval over the
    runs (one per seed), the stable count, ``held`` (stable share >= :data:`SHARE`) and ``learned``: the
    interval above :data:`grids.run_table.MARGIN`, the smallest difference in final held-out pc the
    studies count (a gain inside it, such as GSPO's +0.01 to +0.03 under SGD, is not learning)."""
    r = level_runs(runs, seeds)
    out = []
    for (fam, level, est), g in r.groupby(["family", "level", "estimator"]):
        diff = (g["pc_final"] - g["pc0"]).to_numpy(float)
        b = bootstrap(diff)
        out.append({"optimizer": fam, "level": level, "estimator": est, "n": len(g), "stable": int(g["stable"].sum()),
                    "held": bool(g["stable"].mean() >= SHARE), "pc0": float(g["pc0"].mean()),
                    "pc_final": float(g["pc_final"].mean()), "gain": b["mean"], "low": b["low"], "high": b["high"],
                    "learned": bool(b["low"] > MARGIN), "drift": float(g[AXIS].median())})
    return sorted(out, key=lambda x: (x["optimizer"], _rate_of(x["level"]), x["estimator"]))


def _rate_of(level: str) -> float:
    """``adamclip3e-05`` -> 3e-05: a level's step, to order levels by it."""
    return float(level[len("adamclip"):] if level.startswith("adamclip") else level[len("sgd"):])


def axis_dependence(cells: pd.DataFrame) -> list[dict]:
    """Per level (optimiser and step, set before any correction acts): the early KL each correction's own
    updates give there, the smallest and largest, and their ratio. The map's axis is measured under each
    correction's updates, so one level sits at different drifts for different corrections."""
    out = []
    for (fam, level), g in cells.groupby(["family", "level"]):
        g = g[np.isfinite(g["drift"]) & (g["drift"] > 0)]
        if g.empty:
            continue
        lo, hi = g.loc[g["drift"].idxmin()], g.loc[g["drift"].idxmax()]
        out.append({"optimizer": fam, "level": level, "by_estimator": dict(zip(g["estimator"], g["drift"])),
                    "min": [lo["estimator"], float(lo["drift"])], "max": [hi["estimator"], float(hi["drift"])],
                    "ratio": float(hi["drift"] / lo["drift"])})
    return sorted(out, key=lambda x: (x["optimizer"], _rate_of(x["level"])))


def beside(runs: pd.DataFrame, seeds: list[int], bounds: list[dict]) -> dict:
    """What the report shows beside the pre-registered verdicts (none of it changes one): D2's interval
    over whole seeds, the points read after their run's collapse and the map on the pre-collapse window,
    each level's gain over the warm start, and how far the axis depends on the correction."""
    return {"d2_whole_seeds": d2_whole_seeds(runs, seeds), "after_collapse": after_collapse(runs, seeds),
            "precollapse_boundaries": precollapse_boundaries(runs, seeds, bounds), "gains": gains(runs, seeds),
            "axis_dependence": axis_dependence(cell_table(runs, seeds))}


def m6_disclosure() -> dict:
    """The mechanism study's M6 on the 200 runs its analysis uses and on all 220 its pre-registration
    names at d = 64 (the 20 more are the ``adam`` arm's gmc and topr runs, byte copies of study runs
    the signal was chosen on): hits and false alarms and Fisher's one-sided p for each."""
    from grids.mechanism_table import read_both
    from studies.common.mechanism_rules import m6

    runs, replays = read_both(grid_folder("primary"), grid_folder("mechanism"))
    out = {}
    for label, df in (("200", runs), ("220", pd.concat([runs, replays.assign(source="mechanism")], ignore_index=True))):
        r = m6(grid_folder("mechanism"), df)
        out[label] = {"verdict": r["verdict"], "hits": [r["hit_rate"]["k"], r["hit_rate"]["n"]],
                      "false_alarms": [r["false_alarm_rate"]["k"], r["false_alarm_rate"]["n"]],
                      "p_fisher": r["p_fisher"]}
    return out
