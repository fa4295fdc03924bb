"""The mechanism study's M6 (docs/PREREGISTRATION-MECHANISM.md): an early-warning signal chosen on the committed
staleness study only (``python -m studies.mechanism --select-warning`` writes it once, to
:data:`WARNING_FILE`), then tested on the mechanism grid's held-out runs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from grids.run_table import ALPHA, BOOT_SEED, PRIMARY, read_runs, read_traces
from stats import auc, stratified_auc
from studies.common.mechanism_rules import WARNING_FILE, WARNING_WINDOW, m6  # noqa: F401 (M6 is decided here)

WARNING_SUMMARIES = ("median", "mean", "min", "max")
WARNING_MIN_FINITE = 0.9  # a candidate must be finite in at least this share of the training runs
WARNING_EXCLUDE_PREFIXES = ("eval/", "perf/", "stale/staleness_", "stale/dropped")


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



