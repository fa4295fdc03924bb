"""The mechanism study's M6 (docs/PREREGISTRATION-MECHANISM.md): an early-warning signal chosen on the committed
staleness study only (``python -m studies.mechanism --select-warning`` writes it once, to
:data:`WARNING_FILE`), then tested on the mechanism grid's held-out runs."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from grids.mechanism_table import DELAY, GRID
from grids.run_table import ALPHA, BOOT_SEED, PRIMARY, read_runs, read_traces, share_ci
from stats import auc, fisher_greater, stratified_auc

WARNING_WINDOW = 20  # updates 0-19: before the first evaluation that can detect a collapse
WARNING_SUMMARIES = ("median", "mean", "min", "max")
WARNING_MIN_FINITE = 0.9  # a candidate must be finite in at least this share of the training runs
WARNING_EXCLUDE_PREFIXES = ("eval/", "perf/", "stale/staleness_", "stale/dropped")
WARNING_FILE = "warning.json"
"""M6's pre-registered signal, under the mechanism grid's folder (written by ``--select-warning``)."""


def warning_candidates(traces: pd.DataFrame) -> pd.DataFrame:
    """One row per run: every candidate signal of M6, ``<column>:<summary>`` over updates
    0 .. WARNING_WINDOW - 1 (docs/PREREGISTRATION-MECHANISM.md)."""
    from llm_runs.metrics import COLUMNS

    cols = [c for c in COLUMNS if c != "step" and not c.startswith(WARNING_EXCLUDE_PREFIXES) and c in traces]
    early = traces[traces["step"] < WARNING_WINDOW]
    agg = early.groupby("run")[cols].agg(list(WARNING_SUMMARIES))
    agg.columns = [f"{c}:{s}" for c, s in agg.columns]
    return agg


def select_warning(study_root: str | Path) -> dict:
    """M6's signal, chosen on the committed staleness study only (every complete long-horizon run
    at positive delay): the candidate of largest pooled AUC for collapse (direction free) whose
    AUC stratified by estimator x delay is on the same side of 1/2; its threshold maximises
    Youden's J on those runs. Returns the record written to ``warning.json``."""
    runs = read_runs(study_root, PRIMARY)
    runs = runs[(runs["horizon"] == "long") & (runs["delay"] > 0) & runs["complete"]].set_index("run")
    traces = read_traces(study_root, _trace_columns(), PRIMARY)
    traces = traces[traces["run"].isin(runs.index)]
    cand = warning_candidates(traces).reindex(runs.index)
    labels = runs["collapsed"].to_numpy(bool)
    strata = (runs["estimator"] + "-d" + runs["delay"].astype(str)).to_numpy()
    table = []
    for name in cand.columns:
        x = cand[name].to_numpy(float)
        ok = np.isfinite(x)
        if ok.mean() < WARNING_MIN_FINITE or len(np.unique(x[ok])) < 2:
            continue
        a, sa = auc(x[ok], labels[ok]), stratified_auc(x[ok], labels[ok], strata[ok])
        sign = 1.0 if a >= 0.5 else -1.0
        table.append({"signal": name, "auc": a, "stratified_auc": sa, "direction": sign,
                      "score": abs(a - 0.5), "consistent": (sa - 0.5) * (a - 0.5) > 0, "n": int(ok.sum())})
    ranked = pd.DataFrame(table).sort_values("score", ascending=False)
    best = ranked[ranked["consistent"]].iloc[0]
    x = cand[best["signal"]].to_numpy(float)
    ok = np.isfinite(x)
    s, y = best["direction"] * x[ok], labels[ok]
    thresholds = np.unique(s)
    j = [(np.mean(s[y] >= t) - np.mean(s[~y] >= t), t) for t in thresholds]
    jbest, tbest = max(j)
    boot = stats.bootstrap((np.arange(len(s)),), lambda i: auc(s[i.astype(int)], y[i.astype(int)]),
                           n_resamples=2000, method="percentile", confidence_level=1 - ALPHA,
                           random_state=np.random.default_rng(BOOT_SEED))
    return {"signal": best["signal"], "direction": "high" if best["direction"] > 0 else "low",
            "threshold": float(best["direction"] * tbest), "youden_j": float(jbest),
            "auc": float(best["auc"]) if best["direction"] > 0 else 1 - float(best["auc"]),
            "auc_ci": [float(boot.confidence_interval.low), float(boot.confidence_interval.high)],
            "stratified_auc": (float(best["stratified_auc"]) if best["direction"] > 0
                               else 1 - float(best["stratified_auc"])),
            "training_runs": int(ok.sum()), "training_collapsed": int(y.sum()),
            "ranking": ranked.head(15).round(4).to_dict("records"),
            "rule": "warned = the summary of the signal over updates 0-19 is >= threshold (direction high) or <= "
                    "threshold (direction low)"}


def _trace_columns() -> tuple[str, ...]:
    from llm_runs.metrics import COLUMNS

    return tuple(c for c in COLUMNS if c != "step" and not c.startswith(WARNING_EXCLUDE_PREFIXES))



def _m6(root, runs) -> dict:
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

