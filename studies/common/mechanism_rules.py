"""The mechanism study's decision rules that another study applies (docs/PREREGISTRATION-MECHANISM.md): M1 and
M2b (:func:`m1`, :func:`m2b`; the replicate study re-decides them on its own runs), M6 (:func:`m6`; the drift study
discloses it beside its own early warning), and the per-arm reading they share."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from grids.mechanism_table import DELAY, GRID
from grids.run_table import ALPHA, MARGIN, bootstrap, holm, p_below, read_traces, share_ci
from schema.stability import STABLE_FRACTION
from stats import fisher_greater

WARNING_WINDOW = 20  # updates 0-19: before the first evaluation that can detect a collapse
WARNING_FILE = "warning.json"
"""M6's pre-registered signal, under the mechanism grid's folder (written by ``--select-warning``)."""


def arm_runs(runs: pd.DataFrame, arm: str) -> pd.DataFrame:
    return runs[runs["arm"] == arm]



def stable_share(runs: pd.DataFrame, arm: str, estimator: str) -> tuple[int, int]:
    sel = arm_runs(runs, arm)
    sel = sel[(sel["estimator"] == estimator) & (sel["delay"] == DELAY) & sel["complete"]]
    return int(sel["stable"].sum()), len(sel)



def arm_stable(runs, arm, estimator) -> bool:
    k, n = stable_share(runs, arm, estimator)
    return bool(n) and k / n >= STABLE_FRACTION



def paired_difference(runs, arm_a, a, arm_b, b, metric="pc_final") -> dict:
    x = arm_runs(runs, arm_a)
    x = x[(x["estimator"] == a) & (x["delay"] == DELAY) & x["complete"]].groupby("seed")[metric].first()
    y = arm_runs(runs, arm_b)
    y = y[(y["estimator"] == b) & (y["delay"] == DELAY) & y["complete"]].groupby("seed")[metric].first()
    common = x.index.intersection(y.index)
    return bootstrap((x[common] - y[common]).to_numpy(float))



def interval_fields(b: dict) -> dict:
    return {k: b[k] for k in ("n", "mean", "low", "high")}



def m1(runs) -> dict:
    k, n = stable_share(runs, "sgd", "gmc")
    b_mask = paired_difference(runs, "sgd", "gmc", "sgd", "tic_mask")
    b_is = paired_difference(runs, "sgd", "gmc", "sgd", "is")
    ok = holm({"b": p_below(b_mask, -MARGIN), "c": p_below(b_is, 0.0)})
    bad = holm({"b": 1 - p_below(b_mask, 0.0), "c": 1 - p_below(b_is, 0.0)})
    a = bool(n) and k / n >= STABLE_FRACTION
    v = "CONFIRMED" if a and ok["b"] and ok["c"] else "REFUTED" if (n and not a) or bad["b"] or bad["c"] \
        else "INCONCLUSIVE"
    return {"verdict": v, "gmc_stable": [k, n], "gmc_minus_tic_mask": interval_fields(b_mask),
            "gmc_minus_is": interval_fields(b_is),
            "noninferior_to_tic_mask": ok["b"], "above_is": ok["c"]}



def m2b(runs) -> dict:
    baselines = [e for e in ("is", "tic_mask", "tic_trunc", "topr") if arm_stable(runs, "adamwclip", e)]
    boots = {e: paired_difference(runs, "adamwclip", "gmc", "adamwclip", e) for e in baselines}
    noninf = holm({e: p_below(b, -MARGIN) for e, b in boots.items()})
    worse = holm({e: 1 - p_below(b, 0.0) for e, b in boots.items()})
    v = "INCONCLUSIVE" if not baselines else "CONFIRMED" if all(noninf.values()) else \
        "REFUTED" if any(worse.values()) else "INCONCLUSIVE"
    return {"verdict": v, "margin": MARGIN, "gmc_stable": list(stable_share(runs, "adamwclip", "gmc")),
            "baselines": {e: {**interval_fields(boots[e]), "noninferior": noninf[e], "worse": worse[e]}
                          for e in baselines}}



def m6(root, runs) -> dict:
    path = Path(root) / WARNING_FILE
    if not path.is_file():
        return {"verdict": "INCONCLUSIVE", "reason": f"{path} is missing: the signal was not pre-registered"}
    from schema.results import read_json

    rule = read_json(path)
    col, summary = rule["signal"].rsplit(":", 1)
    held = runs[(runs["source"] == "mechanism") & (runs["delay"] == DELAY) & runs["complete"]]
    tr = read_traces(root, (col,), GRID)
    early = tr[tr["step"] < WARNING_WINDOW].groupby("run")[col].agg(summary)
    x = early.reindex(held["run"]).to_numpy(float)
    warned = x >= rule["threshold"] if rule["direction"] == "high" else x <= rule["threshold"]
    collapsed = held["collapsed"].to_numpy(bool)
    hit, miss = int((warned & collapsed).sum()), int((~warned & collapsed).sum())
    fa, quiet = int((warned & ~collapsed).sum()), int((~warned & ~collapsed).sum())

    def rate(k, n):
        return {"k": k, "n": n, "rate": k / n if n else math.nan, "ci": list(share_ci(k, n))}

    hits, alarms = rate(hit, hit + miss), rate(fa, fa + quiet)
    p = fisher_greater([[hit, miss], [fa, quiet]])
    if hit + miss < 5 or fa + quiet < 5:
        v = "INCONCLUSIVE"
    else:
        v = "CONFIRMED" if p < ALPHA else "REFUTED" if hits["rate"] <= alarms["rate"] else "INCONCLUSIVE"
    return {"verdict": v, "signal": rule["signal"], "direction": rule["direction"], "threshold": rule["threshold"],
            "hit_rate": hits, "false_alarm_rate": alarms, "p_fisher": p}
