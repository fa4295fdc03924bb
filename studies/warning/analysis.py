"""The early warning's selection on committed runs only (docs/PREREGISTRATION-WARNING.md).

Every complete run at positive delay of the training grids (:data:`TRAINING_GRIDS`) gives one record
(:func:`run_record`): its group size, collapse (the stability rule) and collapse update (both
:func:`studies.common.d5.d5_run`'s, which G6 read) and the per-update trace of every candidate statistic
(:data:`STATISTICS`). A rule is (statistic, summary, window W, threshold tau): the summary (mean or median)
of the last W updates' values, from the first update on, fires at the first update where it reaches tau
(:func:`llm_runs.warning.first_firing`, the live monitor's own logic). Per G stratum: hits (collapsed runs
it fired on at or before the collapse update), false alarms (runs that held and that it fired on at any
update), the median lead (collapse update minus the firing update, over the hits).

:func:`select` chooses, among the statistics whose law at a fixed ratio law does not depend on G
(:data:`ELIGIBLE`, :mod:`studies.warning.invariance`), the rule with false alarms <= :data:`FA_BUDGET` and a
median lead >= :data:`MIN_LEAD` in every stratum that maximises the smallest hit rate over the strata, then
the pooled hits, then the fewest pooled false alarms, then the shortest window.
"""
from __future__ import annotations

import math

import numpy as np

from llm_runs.warning import first_firing_all

TRAINING_GRIDS = ("drift", "drift_decisive", "mechanism", "group_size", "group_size_decisive")
"""The committed grids the rule is chosen on: the drift map (and its decisive seeds), the mechanism grid and
the group-size grids (and their decisive seeds)."""
FA_BUDGET = 0.2
MIN_LEAD = 10
HIT_TARGET = 0.8
SUMMARIES = ("mean", "median")
WINDOWS = (1, 2, 3, 5, 7, 9, 11, 15)
N_THRESHOLDS = 500
THRESHOLD_QUANTILES = (0.2, 0.999)
"""Thresholds tried per (statistic, summary, window): :data:`N_THRESHOLDS` quantiles, evenly spaced in
:data:`THRESHOLD_QUANTILES`, of the summaries' values over every update of every training run."""

STATISTICS = {
    "kl": "KL(pi_b || pi_theta) per completion token over the update's batch, the k3 estimate "
          "(drift/kl, mech/kl; llm_runs.theory.kl_per_token)",
    "chi2_log": "log-space pooled chi^2: -2 x the mean over the batch's trajectories of log w (stale/log_ratio_mean);"
                " log(1 + chi^2) when log w is normal",
    "chi2": "plug-in pooled chi^2: mean over the batch's trajectories of w^2, minus 1 (stale/chi2)",
    "abs_log_w": "mean over the batch's trajectories of |log w| (stale/log_ratio_abs_mean)",
    "chi2_token": "per-token chi^2: mean over completion tokens of r_t^2, minus 1 (stale/chi2_token)",
    "max_share": "the largest share of one trajectory in the batch's weight, max w / sum w "
                 "(exp(stale/log_ratio_max) / (B G stale/mass_mean))",
    "ess": "group ESS fraction, mean over groups of (sum w)^2 / (G sum w^2) (stale/ess); fires low",
}
"""Every candidate statistic and how it is read from a run's logged columns (:func:`statistic_trace`)."""
ELIGIBLE = ("kl", "chi2_log", "chi2", "abs_log_w", "chi2_token")
"""The candidates whose law at a fixed ratio law depends neither on G nor on the batch size N = B G except through
its spread (pooled means over the batch: :mod:`studies.warning.invariance`). ``max_share`` (its law moves with N)
and ``ess`` (moves with G: the current rule's statistic) are reported beside them, never chosen."""
LOW = ("ess",)
"""Statistics that fire when they fall: their values are negated before the rule (a threshold -tau)."""


def statistic_trace(name: str, m, B: int, G: int) -> np.ndarray:
    """Statistic ``name`` per update row of a run's metrics ``m`` (NaN where the run did not log it)."""
    import pandas as pd

    def col(c):
        return pd.to_numeric(m[c], errors="coerce").to_numpy(float) if c in m else np.full(len(m), math.nan)

    if name == "kl":
        x = col("drift/kl")
        return x if np.isfinite(x).any() else col("mech/kl")
    if name == "chi2_log":
        return -2.0 * col("stale/log_ratio_mean")
    if name == "chi2":
        return col("stale/chi2")
    if name == "abs_log_w":
        return col("stale/log_ratio_abs_mean")
    if name == "chi2_token":
        return col("stale/chi2_token")
    if name == "max_share":
        return np.exp(col("stale/log_ratio_max")) / (B * G * col("stale/mass_mean"))
    if name == "ess":
        return -col("stale/ess")
    raise ValueError(f"unknown statistic {name!r}; valid: {', '.join(STATISTICS)}")


def run_record(run, names=tuple(STATISTICS)) -> dict | None:
    """One run of a grid: name, G, B, delay, estimator, collapsed and collapse update (G6's reading,
    :func:`studies.common.d5.d5_run`), the update steps and the trace of each statistic of ``names``
    (None: delay 0, or not complete)."""
    from schema.results import read_run, read_run_config
    from studies.common.d5 import d5_run

    rec = d5_run(run)
    if rec is None:
        return None
    cfg = read_run_config(run)
    _, m = read_run(run)
    upd = m[m["step"] < int(cfg["steps"])].sort_values("step")
    B, G = int(cfg["prompts_per_step"]), int(cfg["group_size"])
    return {"run": run.name, "G": G, "B": B, "delay": int(cfg["delay"]), "estimator": cfg["estimator"],
            "collapsed": bool(rec["collapsed"]), "t_collapse": rec["t_collapse"],
            "steps": upd["step"].to_numpy(int), "traces": {n: statistic_trace(n, upd, B, G) for n in names}}


def read_records(grids=TRAINING_GRIDS, names=tuple(STATISTICS), progress=None) -> list[dict]:
    """:func:`run_record` of every run of ``grids`` (grid names, :func:`grids.grid_folder`), with the grid's name."""
    from grids import grid_folder
    from schema.results import metrics_path, run_dirs

    out = []
    for g in grids:
        root = grid_folder(g)
        if not root.is_dir():
            continue
        for run in run_dirs(root):
            if metrics_path(run) is None:
                continue
            rec = run_record(run, names)
            if rec is not None:
                out.append({**rec, "grid": g})
        if progress:
            progress(f"{g}: {sum(r['grid'] == g for r in out)} runs")
    return out


def firing_updates(recs: list[dict], name: str, summary: str, window: int, taus: np.ndarray) -> np.ndarray:
    """``(runs, thresholds)``: the first update at which each rule fires (inf: never)."""
    return np.stack([first_firing_all(r["traces"][name], r["steps"], window, taus, summary) for r in recs])


def counts(recs: list[dict], fire: np.ndarray) -> dict:
    """Per G (and ``all``), per threshold column of ``fire`` (:func:`firing_updates`): hits, collapsed runs,
    false alarms, runs that held, median lead and the leads' share >= :data:`MIN_LEAD`."""
    G = np.array([r["G"] for r in recs])
    col = np.array([r["collapsed"] for r in recs])
    tc = np.array([math.inf if r["t_collapse"] is None else r["t_collapse"] for r in recs], float)
    fired = np.isfinite(fire)
    hit = col[:, None] & fired & (fire <= tc[:, None])
    with np.errstate(invalid="ignore"):  # inf - inf where neither happened: not a hit, masked below
        lead = np.where(hit & np.isfinite(tc)[:, None], tc[:, None] - fire, np.nan)
    out = {}
    for g in [*sorted(set(G.tolist())), "all"]:
        sel = np.ones(len(G), bool) if g == "all" else G == g
        c, s = sel & col, sel & ~col
        with np.errstate(all="ignore"):
            leads = lead[c]
            med = np.array([np.median(x[np.isfinite(x)]) if np.isfinite(x).any() else np.nan for x in leads.T])
        out[g] = {"hits": hit[c].sum(0), "collapsed": int(c.sum()), "false_alarms": (fired[s]).sum(0),
                  "held": int(s.sum()), "lead_median": med}
    return out


def thresholds(recs: list[dict], name: str, summary: str, window: int) -> np.ndarray:
    """:data:`N_THRESHOLDS` quantiles of the rule's summary values over every update of ``recs``."""
    from llm_runs.warning import rolling_summary

    vals = np.concatenate([rolling_summary(r["traces"][name], window, summary) for r in recs])
    vals = vals[np.isfinite(vals)]
    if not len(vals):
        return np.array([])
    return np.unique(np.quantile(vals, np.linspace(*THRESHOLD_QUANTILES, N_THRESHOLDS)))


def best_rule(recs: list[dict], name: str, summary: str, window: int) -> dict | None:
    """The best threshold of one (statistic, summary, window) under the budget (module docstring); None if no
    threshold meets it."""
    taus = thresholds(recs, name, summary, window)
    if not len(taus):
        return None
    c = counts(recs, firing_updates(recs, name, summary, window, taus))
    strata = [g for g in c if g != "all"]
    ok = np.ones(len(taus), bool)
    for g in strata:
        ok &= (c[g]["false_alarms"] <= FA_BUDGET * c[g]["held"]) & (c[g]["lead_median"] >= MIN_LEAD)
    if not ok.any():
        return None
    min_hit = np.min([c[g]["hits"] / max(c[g]["collapsed"], 1) for g in strata], axis=0)
    key = np.lexsort((c["all"]["false_alarms"], -c["all"]["hits"], -min_hit))  # last key sorts first
    i = next(int(j) for j in key if ok[j])
    return {"statistic": name, "summary": summary, "window": window, "threshold": float(taus[i]),
            "min_hit_rate": float(min_hit[i]), "table": table_at(c, i)}


def table_at(c: dict, i: int) -> list[dict]:
    """The per-G rows (and ``all``) of :func:`counts` at threshold column ``i``, with Clopper-Pearson intervals."""
    from grids.run_table import share_ci

    rows = []
    for g, v in c.items():
        h, n1, f, n0 = int(v["hits"][i]), v["collapsed"], int(v["false_alarms"][i]), v["held"]
        rows.append({"G": g, "hits": h, "collapsed": n1, "hit_rate": h / n1 if n1 else math.nan,
                     "hit_ci": list(share_ci(h, n1)), "false_alarms": f, "held": n0,
                     "false_alarm_rate": f / n0 if n0 else math.nan, "false_alarm_ci": list(share_ci(f, n0)),
                     "lead_median": float(v["lead_median"][i])})
    return rows


def select(recs: list[dict], progress=None) -> dict:
    """The frozen rule's record (module docstring) and every candidate's best rule (ranking), eligible or not."""
    ranking = []
    for name in STATISTICS:
        for summary in SUMMARIES:
            for w in WINDOWS:
                b = best_rule(recs, name, summary, w)
                ranking.append(b or {"statistic": name, "summary": summary, "window": w, "threshold": None,
                                     "min_hit_rate": None, "table": None})
                if progress:
                    said = ("no threshold meets the budget" if b is None
                            else f"min hit rate {b['min_hit_rate']:.3f} at {b['threshold']:.6g}")
                    progress(f"{name} {summary} W={w}: {said}")
    ok = [r for r in ranking if r["threshold"] is not None and r["statistic"] in ELIGIBLE]
    if not ok:
        raise ValueError("no eligible rule meets the false-alarm and lead budget in every stratum")
    pooled = {id(r): next(x for x in r["table"] if x["G"] == "all") for r in ok}
    best = max(ok, key=lambda r: (r["min_hit_rate"], pooled[id(r)]["hits"], -pooled[id(r)]["false_alarms"],
                                  -r["window"]))
    return {"rule": best, "ranking": ranking}
