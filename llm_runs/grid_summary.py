"""A grid's ``summary.csv``: one :func:`summary_row` per run folder, with the stability verdict of
:func:`schema.results.run_summary` (so the table, the figures and :func:`llm_runs.run_table.run_row` agree)
and every setting of the run's stored config."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

SUMMARY_COLUMNS = ["run", "estimator", "mode", "delay", "seed", "steps", "steps_planned", "complete",
                   "heldout_acc_init", "heldout_acc_final", "heldout_pc_init", "heldout_pc_final",
                   "train_acc_init", "train_acc_final", "train_pc_init", "train_pc_final", "train_reward_last10",
                   "max_log_ratio", "mean_abs_log_ratio", "mean_staleness", "max_staleness", "dropped", "stable",
                   "nonfinite", "collapsed", "wall_s"]
"""The leading columns of a grid's ``summary.csv`` (:func:`summary_row`): ``steps`` is the updates done,
``steps_planned`` the run's planned updates, ``collapsed`` the stability rule's accuracy drop
(:func:`schema.results.run_summary`, not :func:`llm_runs.run_table.collapse_timing`'s). Every other setting
of the run's stored config follows them, one column each."""


def summary_row(run: Path, name: str | None = None, steps_planned: int | None = None) -> dict | None:
    """A grid's ``summary.csv`` row for one run folder (None: no metrics yet): :data:`SUMMARY_COLUMNS`, then
    every scalar setting of its stored config (the optimiser, the rate, the knobs, ...). Stability is
    :func:`schema.results.run_summary`'s rule, as in :func:`run_row`, so the table and the analyses agree.
    ``name``: the row's run name (default the folder's); ``steps_planned``: default the config's ``steps``."""
    from schema.results import metrics_path, read_run, read_run_config, read_run_summary, run_finished, run_summary

    run = Path(run)
    if metrics_path(run) is None:
        return None
    stored = read_run_config(run)
    settings, m = read_run(run)
    if m.empty:
        return None
    name = name or run.name
    planned = int(stored["steps"] if steps_planned is None else steps_planned)
    complete = run_finished(run)
    scalars = {k: v for k, v in stored.items() if v is None or isinstance(v, (str, int, float))}
    meta = {**scalars, "run": name, "mode": settings["mode"], "delay": settings["delay"], "steps": planned,
            "complete": complete}
    verdict = run_summary(m.assign(**meta)).iloc[0]
    upd = m[m["step"] < planned]
    ev = m.dropna(subset=["eval/heldout_acc"])

    def ends(col):
        return (float(ev[col].iloc[0]), float(ev[col].iloc[-1])) if len(ev) else (math.nan, math.nan)

    def col(c, how):
        return float(getattr(upd[c], how)()) if c in upd and upd[c].notna().any() else math.nan

    row = {"run": name, "estimator": settings["estimator"], "mode": settings["mode"], "delay": settings["delay"],
           "seed": settings["seed"], "steps": len(upd), "steps_planned": planned, "complete": complete}
    for key, c in (("heldout_acc", "eval/heldout_acc"), ("heldout_pc", "eval/heldout_pc"),
                   ("train_acc", "eval/train_acc"), ("train_pc", "eval/train_pc")):
        row[f"{key}_init"], row[f"{key}_final"] = ends(c)
    tail = upd["train/reward_mean"].tail(max(1, len(upd) // 10))
    row.update({"train_reward_last10": float(tail.mean()), "max_log_ratio": col("stale/log_ratio_max", "max"),
                "mean_abs_log_ratio": col("stale/log_ratio_abs_mean", "mean"),
                "mean_staleness": col("stale/staleness_mean", "mean"),
                "max_staleness": col("stale/staleness_max", "max"),
                "dropped": col("stale/dropped", "sum"), "stable": bool(verdict["stable"]),
                "nonfinite": bool(verdict["nonfinite"]), "collapsed": bool(verdict["collapsed"])})
    row["wall_s"] = float(read_run_summary(run).get("wall_s", math.nan)) if complete else math.nan
    row.update({k: v for k, v in scalars.items() if k not in row and k != "steps"})
    return row


def summary_table(rows: list[dict]) -> pd.DataFrame:
    """:func:`summary_row` rows as one table: :data:`SUMMARY_COLUMNS` first, then the settings, sorted (a
    setting a run's config predates is empty in its row)."""
    settings = sorted({k for r in rows for k in r} - set(SUMMARY_COLUMNS))
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS + settings)


def write_summary(out: Path, sweep, cells: list) -> Path:
    """``<out>/summary.csv``: one :func:`summary_row` per cell of ``sweep`` with metrics."""
    from schema.io import write_text

    rows = [r for c in cells if (r := summary_row(out / c.name, c.name, int(c.overrides["steps"]))) is not None]
    return write_text(out / "summary.csv", summary_table(rows).to_csv(index=False, float_format="%.6g"))
