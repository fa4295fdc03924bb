"""The early warning of a collapse under stale rollouts: a statistic of each update's batch, its rolling
summary over the last W updates, and the first update at which that summary reaches a threshold.

The rule's statistic, window and threshold were chosen on committed runs only and frozen before the runs
that confirm them (docs/PREREGISTRATION-WARNING.md; ``studies/warning/frozen.json`` holds them and
``tests/test_warning.py`` checks that :data:`FROZEN` equals it). The same firing logic serves the selection
(:func:`first_firing_all`, over many thresholds), the verdict reader and the live monitor of each stack.
"""
from __future__ import annotations

import math

import numpy as np

SUMMARIES = ("mean", "median")

FROZEN = {"statistic": "kl", "summary": "mean", "window": 7, "threshold": 0.12472130167818271}
"""The frozen rule (docs/PREREGISTRATION-WARNING.md, ``studies/warning/frozen.json``): the per-token KL
(k3, :func:`llm_runs.theory.kl_per_token`) of each update's batch, its mean over the last 7 updates from the
first update on, fires at the first update where that mean is >= the threshold."""


def rolling_summary(x, window: int, summary: str = "mean") -> np.ndarray:
    """Per update t, the ``summary`` (mean or median) of ``x[t - window + 1 .. t]``: NaN for the first
    ``window - 1`` updates and wherever the window holds a NaN (an update without the statistic); a +inf in
    the window makes the mean +inf."""
    if summary not in SUMMARIES:
        raise ValueError(f"unknown summary {summary!r}; valid: {', '.join(SUMMARIES)}")
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    x = np.asarray(x, float)
    out = np.full(len(x), math.nan)
    if len(x) < window:
        return out
    view = np.lib.stride_tricks.sliding_window_view(x, window)
    with np.errstate(invalid="ignore"):
        val = view.mean(-1) if summary == "mean" else np.median(view, -1)
    val[np.isnan(view).any(-1)] = math.nan
    out[window - 1:] = val
    return out


def first_firing_all(x, steps, window: int, thresholds, summary: str = "mean") -> np.ndarray:
    """For each threshold, the step (of ``steps``, one per value of ``x``, increasing) of the first update
    whose rolling summary (:func:`rolling_summary`) is >= it; inf where it never is."""
    steps = np.asarray(steps, float)
    s = rolling_summary(x, window, summary)
    if len(steps) != len(s):
        raise ValueError(f"steps has {len(steps)} entries, the trace {len(s)}")
    run_max = np.fmax.accumulate(np.where(np.isnan(s), -np.inf, s)) if len(s) else s
    i = np.searchsorted(run_max, np.asarray(thresholds, float), side="left")
    return np.where(i < len(steps), steps[np.minimum(i, max(len(steps) - 1, 0))] if len(steps) else np.inf, np.inf)


def first_firing(x, steps, window: int, threshold: float, summary: str = "mean") -> int | None:
    """The step of the first update at which the rule fires (None: never)."""
    t = float(first_firing_all(x, steps, window, [threshold], summary)[0])
    return None if math.isinf(t) else int(t)
