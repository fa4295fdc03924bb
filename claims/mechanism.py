"""The mechanism study's pre-registered analysis (docs/PREREGISTRATION-MECHANISM.md), applied as written.

    python -m claims.mechanism --select-warning     # M6's signal from the committed study only -> warning.json
    python -m claims.mechanism [--json results/llm/mechanism/verdicts.json]

Reuses the staleness study's machinery unchanged (:mod:`claims.study`: the run reader with its
grid check, the stability rule, paired bootstrap intervals, Holm, whole seeds). A run's
``arm`` is its optimiser setting (:func:`arm_of`); the committed study's runs are the
unclipped-Adam arm ``adam``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from .study import ALPHA, BOOT_SEED, N_RESAMPLES, read_runs, read_traces

WARNING_WINDOW = 20  # updates 0-19: before the first evaluation that can detect a collapse
WARNING_SUMMARIES = ("median", "mean", "min", "max")
WARNING_MIN_FINITE = 0.9  # a candidate must be finite in at least this share of the training runs
WARNING_EXCLUDE_PREFIXES = ("eval/", "perf/", "stale/staleness_", "stale/dropped")


def arm_of(config: dict) -> str:
    """The optimiser arm of a run's settings: ``sgd``, ``adamclip``, ``adamwclip``, ``adam`` (the
    committed study's: Adam, no clipping, no decay), ``adamk2`` (gmc_cap with kappa 2 under
    ``adam``), else a description."""
    opt = config.get("optimizer") or "adam"
    clip = config.get("max_grad_norm")
    if opt == "sgd":
        return "sgd"
    if opt == "adam" and clip is None and not config.get("weight_decay"):
        return "adamk2" if config.get("estimator") == "gmc_cap" and config.get("gmc_cap_kappa") == 2.0 else "adam"
    if opt == "adam" and clip == 1.0 and not config.get("weight_decay"):
        return "adamclip"
    if opt == "adamw" and clip == 1.0 and config.get("weight_decay") == 0.01:
        return "adamwclip"
    return f"{opt}-clip{clip}-wd{config.get('weight_decay')}"


# --------------------------------------------------------------------------- M6: the early warning


def warning_candidates(traces: pd.DataFrame) -> pd.DataFrame:
    """One row per run: every candidate signal of M6, ``<column>:<summary>`` over updates
    0 .. WARNING_WINDOW - 1 (docs/PREREGISTRATION-MECHANISM.md)."""
    from llm_runs.metrics import COLUMNS

    cols = [c for c in COLUMNS if c != "step" and not c.startswith(WARNING_EXCLUDE_PREFIXES) and c in traces]
    early = traces[traces["step"] < WARNING_WINDOW]
    agg = early.groupby("run")[cols].agg(list(WARNING_SUMMARIES))
    agg.columns = [f"{c}:{s}" for c, s in agg.columns]
    return agg


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """P(score of a positive > score of a negative) + 1/2 P(tie): the Mann-Whitney AUC."""
    pos, neg = scores[labels], scores[~labels]
    if not len(pos) or not len(neg):
        return math.nan
    u = stats.mannwhitneyu(pos, neg, alternative="two-sided").statistic
    return float(u) / (len(pos) * len(neg))


def stratified_auc(scores: np.ndarray, labels: np.ndarray, strata: np.ndarray) -> float:
    """The AUC over the (positive, negative) pairs that share a stratum (estimator x delay)."""
    num = den = 0.0
    for s in np.unique(strata):
        sel = strata == s
        p, n = int(labels[sel].sum()), int((~labels[sel]).sum())
        if p and n:
            num += auc(scores[sel], labels[sel]) * p * n
            den += p * n
    return num / den if den else math.nan


def select_warning(study_root: str | Path) -> dict:
    """M6's signal, chosen on the committed staleness study only (every complete long-horizon run
    at positive delay): the candidate of largest pooled AUC for collapse (direction free) whose
    AUC stratified by estimator x delay is on the same side of 1/2; its threshold maximises
    Youden's J on those runs. Returns the record written to ``warning.json``."""
    runs = read_runs(study_root)
    runs = runs[(runs["horizon"] == "long") & (runs["delay"] > 0) & runs["complete"]].set_index("run")
    traces = read_traces(study_root, _trace_columns())
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
            "stratified_auc": float(best["stratified_auc"]) if best["direction"] > 0 else 1 - float(best["stratified_auc"]),
            "training_runs": int(ok.sum()), "training_collapsed": int(y.sum()),
            "ranking": ranked.head(15).round(4).to_dict("records"),
            "rule": "warned = the summary of the signal over updates 0-19 is >= threshold (direction high) or <= "
                    "threshold (direction low)"}


def _trace_columns() -> tuple[str, ...]:
    from llm_runs.metrics import COLUMNS

    return tuple(c for c in COLUMNS if c != "step" and not c.startswith(WARNING_EXCLUDE_PREFIXES))


WARNING_FILE = "warning.json"
"""M6's pre-registered signal, under the mechanism grid's folder (written by ``--select-warning``)."""


def main(argv: list[str] | None = None) -> int:
    from schema.results import results_root

    p = argparse.ArgumentParser(prog="python -m claims.mechanism", description=__doc__.split("\n\n")[0])
    p.add_argument("--study", default=None, help="the committed staleness study (default: <results>/llm/study)")
    p.add_argument("--root", default=None, help="the mechanism grid (default: <results>/llm/mechanism)")
    p.add_argument("--select-warning", action="store_true",
                   help="choose M6's signal on the committed study only and write <root>/warning.json")
    p.add_argument("--json", default=None, help="write the verdicts here")
    args = p.parse_args(argv)
    study = Path(args.study) if args.study else results_root() / "llm" / "study"
    root = Path(args.root) if args.root else results_root() / "llm" / "mechanism"
    try:
        if args.select_warning:
            from schema.io import write_json

            target = root / WARNING_FILE
            if target.exists():
                raise ValueError(f"{target} exists: the signal is chosen once, before the held-out runs are read; "
                                 f"it is never replaced")
            rec = select_warning(study)
            write_json(target, {**rec, "training_set": str(study)})
            print(f"M6 signal: {rec['signal']} ({rec['direction']}, threshold {rec['threshold']:.4g}); training AUC "
                  f"{rec['auc']:.3f} [{rec['auc_ci'][0]:.3f}, {rec['auc_ci'][1]:.3f}] -> {target}")
            return 0
        return _report(study, root, args.json)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _report(study: Path, root: Path, json_out: str | None) -> int:
    raise ValueError("the mechanism grid's analysis runs once the stopping rule is met (at least 6 whole seeds)")


if __name__ == "__main__":
    sys.exit(main())
