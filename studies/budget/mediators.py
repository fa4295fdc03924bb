"""The budget study's mediators (docs/PREREGISTRATION-BUDGET.md, "Mediators"; no verdict rests on them): per run
the median over the stale window, updates 64-199, of

* ``share_max``: the largest share of one trajectory, ``train/weight_max / (B G)`` (§8.3's share of the nominal
  mass, realised);
* ``adv_zero_frac``: the share of groups with equal rewards, ``train/adv_zero_frac``;
* ``update_cos``: the update's cosine to the previous update, ``train/update_cos`` (parameter steps), with
  ``grad_cos`` (``train/grad_cos``, gradient estimates) beside it.

Reported per cell and correction (the mean over the cell's finished runs of the run medians); their association
with learned is exploratory: per correction, the AUC of each mediator for learned over its runs at d = 64 across
cells (:func:`stats.auc`; above 0.5: larger values go with learning).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from stats import auc

WINDOW = (64, 199)
"""The stale window, first and last update (inclusive)."""
COLUMNS = {"share_max": "train/weight_max", "adv_zero_frac": "train/adv_zero_frac", "update_cos": "train/update_cos",
           "grad_cos": "train/grad_cos"}
MEDIATORS = tuple(COLUMNS)


def run_mediators(metrics: pd.DataFrame, B: int, G: int) -> dict:
    """One run's mediators from its per-update metrics (a ``step`` column; NaN where a column is absent or holds no
    value in the window)."""
    m = metrics[(metrics["step"] >= WINDOW[0]) & (metrics["step"] <= WINDOW[1])]
    out = {}
    for name, col in COLUMNS.items():
        x = pd.to_numeric(m[col], errors="coerce").dropna() if col in m else pd.Series(dtype=float)
        v = float(x.median()) if len(x) else math.nan
        out[name] = v / (B * G) if name == "share_max" else v
    return out


def _read(run) -> dict | None:
    from schema.results import read_run

    try:
        _, m = read_run(run)
    except (OSError, KeyError, ValueError):
        return None
    return m


def mediator_runs(df: pd.DataFrame, runs: dict, read=_read) -> pd.DataFrame:
    """``df`` (:func:`studies.budget.analysis.design_runs`) with each finished run's mediators; ``runs``: name ->
    the run's folder (:func:`studies.budget.plan.plan_rows`)."""
    rows = []
    for r in df.itertuples():
        vals = dict.fromkeys(MEDIATORS, math.nan)
        if r.finished:
            m = read(runs[r.name])
            if m is not None:
                vals = run_mediators(m, int(r.B), int(r.G))
        rows.append(vals)
    return pd.concat([df.reset_index(drop=True), pd.DataFrame(rows, columns=list(MEDIATORS))], axis=1)


def summary(runs: pd.DataFrame) -> dict:
    """Per cell (level, kappa, estimator, delay, B, G) the mean of each mediator over its finished runs, and per
    correction at d = 64 the AUC of each mediator for learned over its runs."""
    done = runs[runs["finished"]].fillna({"kappa": 0.0})
    keys = ["level", "kappa", "estimator", "delay", "B", "G"]
    cells = []
    for k, x in done.groupby(keys, sort=True):
        cells.append({**dict(zip(keys, k)), "runs": len(x),
                      **{m: float(x[m].mean()) if x[m].notna().any() else None for m in MEDIATORS}})
    aucs = {}
    stale = done[done["delay"] == 64]
    for (level, kappa, est), x in stale.groupby(["level", "kappa", "estimator"], sort=True):
        name = est if not kappa else f"{est} kappa {kappa:g}"
        lab = x["learned"].to_numpy(float) > 0.5
        aucs[f"{level} {name}"] = {m: _auc(x[m].to_numpy(float), lab) for m in MEDIATORS}
    return {"window": list(WINDOW), "cells": cells, "auc_for_learned": aucs}


def _auc(scores: np.ndarray, labels: np.ndarray) -> float | None:
    """:func:`stats.auc` over the runs with a value (None where it is undefined)."""
    keep = np.isfinite(scores)
    a = auc(scores[keep], labels[keep])
    return None if math.isnan(a) else a
