"""The drift map's runs as one table: every run of the drift grids and the mechanism grid's ``sgd``/``adamclip``
arms, with its drift level, settings, early drift and collapse (:func:`read`). The drift study's analysis and the
2026 corrections' (which sets its runs on the same map) both read them through here."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from grids.run_table import grid_folder, run_row
from studies.common.d5 import precollapse_kl, rule_collapse
from studies.common.drift_map import PRE_AXIS

STEP_ARMS = ("vcpo", "ess", "gmcstep", "skip0")
"""The drift grid's step-size arms (their runs carry an ``arm``, no level)."""
SETTINGS = ("optimizer", "lr", "max_grad_norm", "weight_decay", "momentum", "advantage", "ess_scaling", "gmc_step",
            "skip_zero_grad", "estimator")
"""The run settings the drift analysis reads from each run's config (the per-run summary omits some)."""


def map_folders() -> dict[str, Path]:
    """The folders of the grids the analysis reads (:func:`grids.run_table.grid_folder`)."""
    return {g: grid_folder(g) for g in ("drift", "drift_decisive", "mechanism")}


def _level(cfg: dict) -> str | None:
    """``sgd0.0001``, ``adamclip1e-05``: the drift level of a run's settings (None: not a level run)."""
    if cfg.get("ess_scaling", "none") != "none" or cfg.get("gmc_step") or cfg.get("skip_zero_grad"):
        return None
    if cfg.get("advantage", "loo") != "loo":
        return None
    opt = cfg.get("optimizer", "adam")
    if opt == "sgd" and not cfg.get("momentum") and cfg.get("max_grad_norm") is None:
        return f"sgd{cfg['lr']:g}"
    if opt == "adam" and cfg.get("max_grad_norm") == 1.0 and not cfg.get("weight_decay"):
        return f"adamclip{cfg['lr']:g}"
    return None


def read(folders: dict[str, Path] | None = None) -> pd.DataFrame:
    """One row per run of the drift grids and the mechanism grid's ``sgd``/``adamclip`` arms."""
    from grids.run_table import study_folders
    from llm_runs.drift import summary
    from schema.results import read_run, read_run_config

    folders = folders or map_folders()
    rows = []
    for name, root in folders.items():
        if not root.is_dir():
            continue
        for run in study_folders(root, name):
            arm = run.name.split("-")[1]
            if name == "mechanism" and arm not in ("sgd", "adamclip"):
                continue
            row = run_row(run)
            if row is None:
                continue
            _, m = read_run(run)
            cfg = read_run_config(run)
            row.update({k: cfg.get(k) for k in SETTINGS})
            row.update(summary(m, int(row["delay"])))
            row["t_collapse_rule"] = None if row["stable"] else rule_collapse(m, cfg)
            row[PRE_AXIS] = precollapse_kl(m, int(row["delay"]), row["t_collapse_rule"])
            scale = m.loc[m["step"] >= row["delay"], "step/lr_scale"].dropna() if "step/lr_scale" in m else ()
            row["lr_scale"] = float(scale.median()) if len(scale) else math.nan  # the step-size control's factor
            row["grid"] = name
            row["arm"] = arm if arm in STEP_ARMS else None
            row["level"] = None if row["arm"] else _level(row)
            row["family"] = None if row["level"] is None else "sgd" if row["optimizer"] == "sgd" else "adamclip"
            rows.append(row)
    if not rows:
        raise ValueError("no run of the drift grids: run `python -m studies.run --grid drift` first")
    return pd.DataFrame(rows)
