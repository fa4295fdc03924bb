"""A grid's ``summary.csv``: one row per run folder, with the stability verdict of
:func:`schema.results.run_summary` (so the table and the figures agree)."""
from __future__ import annotations

import math
from pathlib import Path

SUMMARY_COLUMNS = ["run", "estimator", "mode", "delay", "seed", "steps", "steps_planned", "complete",
                   "heldout_acc_init", "heldout_acc_final", "heldout_pc_init", "heldout_pc_final",
                   "train_acc_init", "train_acc_final", "train_pc_init", "train_pc_final", "train_reward_last10",
                   "max_log_ratio", "mean_abs_log_ratio", "mean_staleness", "max_staleness", "dropped", "stable",
                   "nonfinite", "collapsed", "wall_s"]


def summarize_run(run: Path, cell, steps_planned: int) -> dict | None:
    """One summary row for the run folder of grid cell ``cell`` (None: no metrics yet). ``stable`` is
    :func:`schema.results.run_summary`'s rule, so the table and the figures agree."""
    from schema.results import (
        metrics_path,
        read_run,
        read_run_config,
        read_run_summary,
        run_finished,
        run_settings,
        run_summary,
    )

    if metrics_path(run) is None:
        return None
    stored = read_run_config(run)
    _, m = read_run(run)
    if m.empty:
        return None
    complete = run_finished(run)
    meta = {**{k: v for k, v in stored.items() if v is None or isinstance(v, (str, int, float))},
            "run": cell.name, **{k: run_settings(stored)[k] for k in ("mode", "delay")}, "steps": steps_planned,
            "complete": complete}
    verdict = run_summary(m.assign(**meta)).iloc[0]
    upd = m[m["step"] < steps_planned]
    ev = m.dropna(subset=["eval/heldout_acc"])

    def ends(col):
        return (float(ev[col].iloc[0]), float(ev[col].iloc[-1])) if len(ev) else (math.nan, math.nan)

    def col(name, how):
        return float(getattr(upd[name], how)()) if name in upd and upd[name].notna().any() else math.nan

    row = {"run": cell.name, "estimator": cell.estimator, "mode": cell.mode, "delay": cell.delay, "seed": cell.seed,
           "steps": len(upd), "steps_planned": steps_planned, "complete": complete}
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
    wall = math.nan
    if complete:
        wall = float(read_run_summary(run).get("wall_s", math.nan))
    row["wall_s"] = wall
    return row


def write_summary(out: Path, sweep, cells: list) -> Path:
    """``<out>/summary.csv``: one :func:`summarize_run` row per cell of ``sweep`` with metrics."""
    import pandas as pd

    rows = [r for c in cells if (r := summarize_run(out / c.name, c, int(c.overrides["steps"]))) is not None]
    df = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    from schema.io import write_text

    return write_text(out / "summary.csv", df.to_csv(index=False, float_format="%.6g"))
