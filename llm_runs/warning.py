"""The early warning of a collapse under stale rollouts: a statistic of each update's batch, its rolling
summary over the last W updates, and the first update at which that summary reaches a threshold.

The rule's statistic, window and threshold were chosen on committed runs only and frozen before the runs
that confirm them (docs/PREREGISTRATION-WARNING.md; ``studies/warning/frozen.json`` holds them and
``tests/test_warning.py`` checks that :data:`FROZEN` equals it). The same firing logic serves the selection
(:func:`first_firing_all`, over many thresholds), the verdict reader and the live monitor of each stack.
"""
from __future__ import annotations

import logging
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


ACTIONS = ("off", "log", "stop", "lower_step")
"""The one switch (``early_warning`` in each stack): off (the default: nothing computed, runs unchanged); log
(the ``warn/`` metrics, and one ``logging`` warning when the rule fires); stop (the same, then the run saves a
checkpoint and stops after the firing update); lower_step (the same, then every later step is multiplied by
:data:`STEP_FACTOR` through the step control, :func:`llm_runs.stepsize.scaled_lr`)."""
STEP_FACTOR = 0.5
"""lower_step's factor on the learning rate after the rule fired."""
_log = logging.getLogger(__name__)


def check_action(action) -> str:
    """``action`` if it is one of :data:`ACTIONS`; else a ValueError naming it and the valid ones."""
    if action not in ACTIONS:
        raise ValueError(f"early_warning must be one of {', '.join(ACTIONS)}, got {action!r}")
    return action


class EarlyWarning:
    """The frozen rule, live: feed it each update's statistic (:meth:`observe`, or :meth:`observe_batch` with the
    update's token log-ratios and completion mask); it returns the ``warn/`` metrics (:data:`schema.metrics.WARN`),
    logs one warning when the rule fires, and says what to do (:meth:`should_stop`, :meth:`step_scale`).

    >>> w = EarlyWarning("log", window=2, threshold=0.5)
    >>> [w.observe(x, t)["warn/fired"] for t, x in enumerate([0.1, 0.2, 0.9, 0.1])]
    [0, 0, 1, 1]
    >>> w.fired_at
    2
    """

    def __init__(self, action: str = "log", *, window: int = FROZEN["window"], threshold: float = FROZEN["threshold"],
                 summary: str = FROZEN["summary"], step_factor: float = STEP_FACTOR, where: str = "run"):
        self.action = check_action(action)
        rolling_summary([], window, summary)  # checks window and summary
        if not (isinstance(threshold, (int, float)) and math.isfinite(threshold)):
            raise ValueError(f"threshold must be a finite number, got {threshold!r}")
        if not (isinstance(step_factor, (int, float)) and 0 < step_factor <= 1):
            raise ValueError(f"step_factor must be in (0, 1], got {step_factor!r}")
        self.window, self.threshold, self.summary = int(window), float(threshold), summary
        self.step_factor, self.where = float(step_factor), where
        self.values: list[float] = []
        self.fired_at: int | None = None
        self.last_step: int | None = None

    @property
    def fired(self) -> bool:
        return self.fired_at is not None

    def observe(self, value: float, step: int) -> dict[str, float]:
        """Record update ``step``'s statistic; the ``warn/`` metrics of this update."""
        self.values = (self.values + [float(value)])[-self.window:]
        self.last_step = int(step)
        s = float(rolling_summary(self.values, self.window, self.summary)[-1]) if self.values else math.nan
        if not self.fired and s >= self.threshold:
            self.fired_at = int(step)
            what = {"log": "", "stop": "; the run saves a checkpoint and stops",
                    "lower_step": f"; every later step is multiplied by {self.step_factor:g}"}[self.action]
            _log.warning("early warning (%s): at update %d the %s of the per-token KL over the last %d updates is "
                         "%.4g >= %.4g, the frozen threshold (docs/PREREGISTRATION-WARNING.md): a collapse may "
                         "follow%s", self.where, step, self.summary, self.window, s, self.threshold, what)
        return {"warn/kl": float(value), "warn/kl_rolling": s, "warn/fired": int(self.fired)}

    def observe_batch(self, token_log_ratio, mask, step: int) -> dict[str, float]:
        """:meth:`observe` of the update's per-token KL (k3, :func:`llm_runs.theory.kl_per_token`) from its token
        log-ratios log pi_theta - log pi_b and completion mask (torch tensors of one shape)."""
        from .theory import kl_per_token

        return self.observe(kl_per_token(token_log_ratio.detach(), mask), step)

    def should_stop(self) -> bool:
        """Under stop, True right after the update at which the rule fired (once: a run resumed after the stop
        goes on)."""
        return self.action == "stop" and self.fired and self.fired_at == self.last_step

    def step_scale(self) -> float:
        """The factor on the next step: :attr:`step_factor` once the rule fired under lower_step, else 1."""
        return self.step_factor if self.action == "lower_step" and self.fired else 1.0

    def state_dict(self) -> dict:
        return {"values": list(self.values), "fired_at": self.fired_at, "last_step": self.last_step}

    def load_state_dict(self, state: dict) -> None:
        self.values = [float(v) for v in state["values"]][-self.window:]
        self.fired_at = None if state["fired_at"] is None else int(state["fired_at"])
        self.last_step = None if state.get("last_step") is None else int(state["last_step"])

    def replay(self, values, steps) -> None:
        """Rebuild the state from a run's logged statistic (resume): the last values and the first firing."""
        values, steps = list(values), list(steps)
        self.values = [float(v) for v in values][-self.window:]
        t = first_firing(values, steps, self.window, self.threshold, self.summary) if values else None
        self.fired_at = t
        self.last_step = int(steps[-1]) if steps else None


def monitor_for(config, metrics_file=None, where: str = "run") -> EarlyWarning | None:
    """The monitor a run of ``config`` (``early_warning``) asks for (None: off), its state rebuilt from the
    ``warn/kl`` column of the rows ``metrics_file`` already holds (a resumed run)."""
    action = check_action(getattr(config, "early_warning", "off"))
    if action == "off":
        return None
    mon = EarlyWarning(action, where=where)
    if metrics_file is not None:
        import csv
        from pathlib import Path

        if Path(metrics_file).is_file():
            with open(metrics_file, newline="") as fh:
                rows = list(csv.DictReader(fh))
            vals = [float(r["warn/kl"]) if r.get("warn/kl") else math.nan for r in rows]
            mon.replay(vals, [int(r["step"]) for r in rows])
    return mon


WARN_COLUMNS = {"toolkit": ("warn/kl", "drift/kl", "mech/kl"), "verl": ("actor/warn/kl", "actor/mech/kl"),
                "trl": ("warn/kl", "mech/kl", "drift/kl")}
"""Stack -> the metric names that carry the rule's statistic, the per-token KL (k3) of each update, preferred first:
the monitor's own, then the same estimate under the stack's other names (``python -m grids.drift_place`` reads them)."""


def warning_line(m, stack: str, updates) -> str:
    """What the frozen rule says of a run's metrics table ``m`` (one row per update; ``updates`` its update index per
    row): where it fires, on which column, or why it cannot be read."""
    import pandas as pd

    if stack not in WARN_COLUMNS:
        raise ValueError(f"unknown stack {stack!r}; valid: {', '.join(WARN_COLUMNS)}")
    col = next((c for c in WARN_COLUMNS[stack] if c in m and pd.to_numeric(m[c], errors="coerce").notna().any()), None)
    rule = (f"early warning (the {FROZEN['summary']} of the per-token KL over {FROZEN['window']} updates >= "
            f"{FROZEN['threshold']:.4g}, docs/PREREGISTRATION-WARNING.md)")
    if col is None:
        return f"{rule}: not readable, this run logs none of {', '.join(WARN_COLUMNS[stack])}"
    t = pd.to_numeric(pd.Series(updates, index=m.index), errors="coerce")
    x = pd.to_numeric(m[col], errors="coerce")
    keep = t.notna() & x.notna()
    t, x = t[keep].sort_values(), x[keep]
    x = x.loc[t.index].to_numpy(float)
    s = rolling_summary(x, FROZEN["window"], FROZEN["summary"])
    at = first_firing(x, t.to_numpy(float), FROZEN["window"], FROZEN["threshold"], FROZEN["summary"])
    if at is not None:
        return f"{rule}: fires at update {at} [{col}]"
    peak = np.nanmax(s) if np.isfinite(s).any() else math.nan
    return f"{rule}: does not fire in {len(x)} updates (largest {FROZEN['summary']} {peak:.4g}) [{col}]"
