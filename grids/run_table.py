"""The run table every LLM campaign reads, and the staleness study's reading rules.

One row per run folder of a study grid (:func:`run_row`, the one per-run record: settings, horizon, final
held-out pc, AUC of the pc curve, stability, collapse timing; :func:`read_runs` for a grid, and a grid's
``summary.csv``, :func:`write_summary`), the per-update traces
(:func:`read_traces`), whole seeds, paired differences with the study's bootstrap settings
(:func:`paired`, :func:`bootstrap`, :func:`differences_table`) and the exploratory grids set beside the
study (:func:`read_paired`); the realised mass bias against THEORY's bound is :mod:`grids.bound_table`.

The constants below are the pre-registered rule's (docs/PREREGISTRATION.md quotes them): the staleness
study's analysis (:mod:`studies.staleness`) decides its hypotheses with them, and the other campaigns,
the figures and the report cards read the runs by the same rule. They sit here, below the figures
and the cards, so that every reader of the study grids shares one rule; the hypotheses and their
verdicts are :mod:`studies.staleness.analysis`.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd

import stats as _stats
from schema.stability import STABLE_FRACTION

from .folders import grid_folder

_log = logging.getLogger(__name__)

ALPHA = 0.05  # two-sided level of every interval (95%)
MARGIN = 0.03  # the smallest difference in final held-out pc that matters (H2's non-inferiority margin)
N_RESAMPLES = 10_000  # bootstrap resamples (scipy.stats.bootstrap, percentile method)
BOOT_SEED = 20261201  # the bootstrap's random state
TRAJECTORY = ("gmc", "tic_mask")  # H3's pair: the gap between these trajectory corrections
H4_DIAGNOSTIC, H4_THRESHOLD, H4_WINDOW = "stale/chi2", 1.0, 5  # rolling median over 5 updates above chi^2 = 1
COLLAPSE_FRACTION = 0.5  # collapse: held-out pc below half its running maximum (and still there at the end)
MIN_COLLAPSES = 5  # H4 needs at least this many collapsed runs
MIN_SEEDS = 6  # the stopping rule: the analysis uses the seeds whose runs are all complete, at least 6


# --------------------------------------------------------------------------- reading


PRIMARY = "primary"
"""The grid the pre-registered hypotheses are about (``results/llm/study``)."""


def read_runs(root: str | Path, grid: str | tuple[str, ...] | None = None) -> pd.DataFrame:
    """One :func:`run_row` per run under ``root`` (:func:`summary_table`: settings, horizon, final pc, AUC
    of pc, stability (:func:`schema.results.run_summary`), collapse timing, every setting). ``grid``:
    the grid(s) an analysis needs; a folder whose ``sweep.json`` names another is refused
    (:func:`grids.check.check_grid_folder`)."""
    rows = [r for r in (run_row(run) for run in study_folders(root, grid)) if r is not None]
    if not rows:
        raise ValueError(f"no run folder (config.json + metrics.csv or metrics.csv.gz) under {root}")
    return summary_table(rows)


RUN_COLUMNS = ["run", "estimator", "mode", "delay", "seed", "horizon", "steps", "steps_done", "complete", "finished",
               "pc0", "pc_final", "auc", "heldout_acc_init", "heldout_acc_final", "train_acc_init", "train_acc_final",
               "train_pc_init", "train_pc_final", "train_reward_last10", "max_log_ratio", "mean_abs_log_ratio",
               "mean_staleness", "max_staleness", "dropped", "stable", "nonfinite", "acc_drop", "collapsed",
               "t_collapse", "t_warning", "masked_update_frac", "wall_s"]
"""The one per-run record (:func:`run_row`), in its order; every other scalar setting of the run's stored
config follows, one column each (a grid's ``summary.csv`` is these rows, :func:`write_summary`).

* ``steps`` is the run's planned updates (the setting), ``steps_done`` the updates its metrics hold;
  ``complete``: the metrics reach the planned step; ``finished``: the run wrote its summary.
* ``pc0`` and ``pc_final`` (the final score): held-out pc at the first and the last evaluation; ``auc``
  the mean of the pc curve over the run (trapezoid); ``heldout_acc_*``, ``train_acc_*`` and
  ``train_pc_*`` the same ends of the other evaluations.
* ``stable`` and ``nonfinite`` are the stability rule's (:func:`schema.results.run_summary`), and
  ``acc_drop`` its accuracy drop (final held-out accuracy below the warm start's by more than the
  rule's threshold); ``collapsed``, ``t_collapse`` and ``t_warning`` the collapse timing's
  (:func:`collapse_timing`: pc below half its running maximum, and still there at the end)."""


def run_row(run: Path, name: str | None = None) -> dict | None:
    """The one per-run record of an LLM run folder (None: its metrics table is empty or absent):
    :data:`RUN_COLUMNS`, then every scalar setting of its stored config. The analyses read these rows
    (:func:`read_runs`), a grid's ``summary.csv`` is them (:func:`write_summary`). ``name``: the row's
    run name (default the folder's)."""
    from schema.results import (
        horizon_of,
        metrics_path,
        read_run,
        read_run_config,
        read_run_summary,
        run_finished,
        run_summary,
    )

    run = Path(run)
    if metrics_path(run) is None:
        return None
    settings, m = read_run(run)
    if m.empty:
        return None
    stored = read_run_config(run)
    name = name or run.name
    steps = int(settings["steps"])
    complete = bool(m["step"].max() >= steps)
    meta = {**settings, "run": name, "steps": steps, "complete": complete}
    verdict = run_summary(m.assign(**meta)).iloc[0]
    upd = m[m["step"] < steps]
    ev = m.dropna(subset=["eval/heldout_acc"])
    pcs = m.dropna(subset=["eval/heldout_pc"]).sort_values("step")
    pc, t = pcs["eval/heldout_pc"].to_numpy(float), pcs["step"].to_numpy(float)
    auc = float(np.trapezoid(pc, t) / (t[-1] - t[0])) if len(t) > 1 and t[-1] > t[0] else math.nan

    def ends(col):
        return (float(ev[col].iloc[0]), float(ev[col].iloc[-1])) if len(ev) else (math.nan, math.nan)

    def over_updates(col, how):
        return float(getattr(upd[col], how)()) if col in upd and upd[col].notna().any() else math.nan

    finished = run_finished(run)
    row = {**meta, "horizon": horizon_of(stored), "steps_done": len(upd), "finished": finished,
           "pc0": float(pc[0]) if len(pc) else math.nan, "pc_final": float(pc[-1]) if len(pc) else math.nan,
           "auc": auc}
    for key, col in (("heldout_acc", "eval/heldout_acc"), ("train_acc", "eval/train_acc"),
                     ("train_pc", "eval/train_pc")):
        row[f"{key}_init"], row[f"{key}_final"] = ends(col)
    tail = upd["train/reward_mean"].tail(max(1, len(upd) // 10)) if "train/reward_mean" in upd else pd.Series([])
    row.update({"train_reward_last10": float(tail.mean()) if len(tail) else math.nan,
                "max_log_ratio": over_updates("stale/log_ratio_max", "max"),
                "mean_abs_log_ratio": over_updates("stale/log_ratio_abs_mean", "mean"),
                "mean_staleness": over_updates("stale/staleness_mean", "mean"),
                "max_staleness": over_updates("stale/staleness_max", "max"),
                "dropped": over_updates("stale/dropped", "sum"), "stable": bool(verdict["stable"]),
                "nonfinite": bool(verdict["nonfinite"]), "acc_drop": bool(verdict["acc_drop"]),
                "masked_update_frac": masked_update_fraction(m), **collapse_timing(m)})
    row["wall_s"] = float(read_run_summary(run).get("wall_s", math.nan)) if finished else math.nan
    scalars = {k: v for k, v in stored.items() if v is None or isinstance(v, (str, int, float))}
    row.update({k: v for k, v in scalars.items() if k not in row})
    return {**{c: row[c] for c in RUN_COLUMNS}, **{k: v for k, v in row.items() if k not in RUN_COLUMNS}}


def summary_table(rows: list[dict]) -> pd.DataFrame:
    """:func:`run_row` rows as one table: :data:`RUN_COLUMNS` first, then the settings, sorted (a setting a
    run's config predates is empty in its row)."""
    settings = sorted({k for r in rows for k in r} - set(RUN_COLUMNS))
    return pd.DataFrame(rows, columns=RUN_COLUMNS + settings)


def write_summary(out: Path, cells: list) -> Path:
    """``<out>/summary.csv``: the :func:`run_row` of every cell (``.name``) with metrics under ``out``."""
    from schema.io import write_text

    rows = [r for c in cells if (r := run_row(Path(out) / c.name, c.name)) is not None]
    return write_text(Path(out) / "summary.csv", summary_table(rows).to_csv(index=False, float_format="%.6g"))


def masked_update_fraction(m: pd.DataFrame) -> float:
    """Of a run's updates with a learning signal (some group with a reward spread, so some advantage
    is not 0), the share whose gradient is exactly zero: the correction masked or weighted 0 every
    token or sequence that carried one. The optimiser still steps on them, as verl's and TRL's
    actors do, so Adam moves the policy on its momentum alone. NaN for a run without such updates."""
    if "train/grad_norm" not in m or "train/adv_zero_frac" not in m:
        return math.nan
    u = m.dropna(subset=["train/grad_norm", "train/adv_zero_frac"])
    u = u[u["train/adv_zero_frac"] < 1]
    return float((u["train/grad_norm"] == 0).mean()) if len(u) else math.nan


def study_folders(root: str | Path, grid: str | tuple[str, ...] | None = None) -> list[Path]:
    """The run folders under ``root`` that belong to its grid (:func:`grids.check.audit`), which
    must be one of ``grid`` when given. ``ValueError`` if it is no folder, another grid's, or holds a
    foreign run (never mixed in); a run folder without metrics is named on stderr (it is not
    analysed, and not dropped silently)."""
    from .check import audit, check_grid_folder

    check_grid_folder(root, grid)
    found = audit(root)
    found.raise_if_foreign(root)
    if found.no_metrics:
        _log.warning("warning: %d run folder(s) under %s have a config.json but no metrics table and are not "
                     "analysed: %s", len(found.no_metrics), root, ", ".join(found.no_metrics))
    return found.runs


def collapse_timing(m: pd.DataFrame) -> dict:
    """``collapsed``, its step ``t_collapse`` (first evaluation with pc below COLLAPSE_FRACTION of
    the running maximum, the run ending below it too) and ``t_warning`` (first update whose
    rolling median of H4_DIAGNOSTIC over H4_WINDOW updates exceeds H4_THRESHOLD)."""
    ev = m.dropna(subset=["eval/heldout_pc"]).sort_values("step")
    pc, steps = ev["eval/heldout_pc"].to_numpy(float), ev["step"].to_numpy(int)
    run_max = np.maximum.accumulate(pc)
    below = pc < COLLAPSE_FRACTION * run_max
    collapsed = bool(len(pc) and below[-1])
    t_collapse = int(steps[np.argmax(below)]) if collapsed else None
    t_warning = None
    if H4_DIAGNOSTIC in m:
        upd = m.dropna(subset=[H4_DIAGNOSTIC]).sort_values("step")
        med = upd[H4_DIAGNOSTIC].rolling(H4_WINDOW, min_periods=H4_WINDOW).median()
        hit = upd["step"][med > H4_THRESHOLD]
        t_warning = int(hit.iloc[0]) if len(hit) else None
    return {"collapsed": collapsed, "t_collapse": t_collapse, "t_warning": t_warning}


# --------------------------------------------------------------------------- statistics


def paired(runs: pd.DataFrame, horizon: str, delay: int, a: str, b: str, metric: str = "pc_final") -> np.ndarray:
    """``metric(a) - metric(b)`` per seed, over the seeds where both runs are complete. At delay 0
    every estimator is the one delay-0 run of its seed (all schemes make the same update there)."""
    def values(e):
        sel = runs[(runs["horizon"] == horizon) & runs["complete"]]
        sel = sel[sel["delay"] == 0] if delay == 0 else sel[(sel["delay"] == delay) & (sel["estimator"] == e)]
        return sel.groupby("seed")[metric].first()

    x, y = values(a), values(b)
    common = x.index.intersection(y.index)
    return (x[common] - y[common]).to_numpy(float)


def bootstrap(diffs: np.ndarray, confidence: float = 1 - ALPHA) -> dict:
    """Mean paired difference, its percentile-bootstrap interval and the bootstrap distribution of the
    mean (:func:`stats.bootstrap_mean` with the study's :data:`N_RESAMPLES` and :data:`BOOT_SEED`)."""
    return _stats.bootstrap_mean(diffs, confidence, N_RESAMPLES, BOOT_SEED)


def share_ci(k: int, n: int, method: str = "exact") -> tuple[float, float]:
    """The 95% interval of a share k/n (:func:`stats.share_ci` at the study's :data:`ALPHA`)."""
    return _stats.share_ci(k, n, method, ALPHA)


p_below = _stats.p_below


def holm(pvalues: dict[str, float], alpha: float = ALPHA) -> dict[str, bool]:
    """Holm's step-down procedure (:func:`stats.holm`) at the study's level by default."""
    return _stats.holm(pvalues, alpha)


def seeds_for_power(sd_diff: float, delta: float = MARGIN, alpha: float = ALPHA, power: float = 0.8,
                    n_max: int = 10_000) -> int:
    """:func:`stats.seeds_for_power` at the study's margin and level by default."""
    return _stats.seeds_for_power(sd_diff, delta, alpha, power, n_max)



def interval_of(boot: dict) -> dict:
    return {k: boot[k] for k in ("n", "mean", "low", "high")}


def stable_in_cell(runs: pd.DataFrame, horizon: str, delay: int, estimator: str) -> bool:
    sel = runs[(runs["horizon"] == horizon) & (runs["delay"] == delay) & (runs["estimator"] == estimator)
               & runs["complete"]]
    return bool(len(sel)) and float(sel["stable"].mean()) >= STABLE_FRACTION


CELL = ("horizon", "estimator", "delay")
"""The fields that name a cell of a study grid (a seed has one run per cell)."""


def recorded_cells(root: str | Path, fields: tuple[str, ...] = CELL) -> set[tuple]:
    """``fields`` of every run one seed of the grid under ``root`` plans: the plan its ``sweep.json``
    records (:func:`grids.spec.recorded_grid`)."""
    from .spec import recorded_grid

    grid = recorded_grid(root)
    return {tuple(getattr(c, f) for f in fields) for c in grid.cells() if c.seed == grid.seeds[0]}


def planned_cells(grid: str, fields: tuple[str, ...] = CELL) -> set[tuple]:
    """:func:`recorded_cells` of grid ``grid``'s folder (:func:`grid_folder`)."""
    return recorded_cells(grid_folder(grid), fields)


def whole_seeds(runs: pd.DataFrame, cells: set | None = None, fields: tuple[str, ...] = CELL) -> list[int]:
    """The seeds with a complete run in every cell (``fields``, by default horizon, estimator,
    delay): the ``cells`` given (a grid's plan, :func:`planned_cells`), else every cell that any
    seed has."""
    fields = list(fields)
    if cells is None:
        cells = set(runs[fields].itertuples(index=False, name=None))
    done = runs[runs["complete"]].groupby("seed")
    return sorted(int(s) for s, g in done if set(g[fields].itertuples(index=False, name=None)) >= cells)


def differences_table(runs: pd.DataFrame, reference: str = "gmc", metric: str = "pc_final") -> pd.DataFrame:
    """GMC minus each estimator, per horizon and positive delay: mean paired difference and 95% interval."""
    rows = []
    for (h, d), g in runs[runs["delay"] > 0].groupby(["horizon", "delay"]):
        for e in sorted(set(g["estimator"]) - {reference}):
            b = bootstrap(paired(runs, h, int(d), reference, e, metric))
            rows.append({"horizon": h, "delay": int(d), "baseline": e, **interval_of(b),
                         "baseline_stable": stable_in_cell(runs, h, int(d), e)})
    return pd.DataFrame(rows)


DIFFERENCE_METRICS = ("pc_final", "auc")
"""The metrics of the report's difference table and F10."""


def differences(runs: pd.DataFrame) -> pd.DataFrame:
    """:func:`differences_table` of every metric of :data:`DIFFERENCE_METRICS`, stacked (column
    ``metric``), with the exploratory estimators' rows (:func:`with_exploratory`, column
    ``exploratory``) after the study's: computed once per runs frame (kept in ``runs.attrs``), read
    by F10, its caption and the report."""
    tab = runs.attrs.get("differences")
    if tab is None:
        both, extra = with_exploratory(runs), exploratory_estimators(runs)
        tab = pd.concat([differences_table(both, metric=m).assign(metric=m) for m in DIFFERENCE_METRICS],
                        ignore_index=True)
        tab["exploratory"] = tab["baseline"].isin(extra) if len(tab) else pd.Series(dtype=bool)
        runs.attrs["differences"] = tab
    return tab


# --------------------------------------------------------------------------- grids paired with the study


def read_paired(root: str | Path, primary: pd.DataFrame, with_primary: tuple[str, ...]) -> pd.DataFrame:
    """The runs of a grid of ``with_primary`` (the names of the grids whose :attr:`grids.spec.Grid.pairs` name the
    study, :func:`grids.spec.pairing_with`) that pairs with the study
    (:attr:`grids.spec.Grid.pairs`; the 2025-2026 corrections, ``python -m studies.run --grid peers_2025``),
    to set beside ``primary`` (the study's runs,
    ``attrs["source"]`` their folder, ``attrs["seeds"]`` its whole seeds) as exploratory rows: not
    part of the pre-registered hypotheses. Only the seeds whole in both grids are kept (every run
    the grid's plan holds for the seed complete); ``attrs["seeds"]`` lists them.

    ``ValueError`` if a run started from another warm start than the study's runs with its key (its
    seed would not be paired, :func:`grids.check.check_pairing`), or if the grid runs an
    estimator the study has (two runs of one cell)."""
    from .check import audit, check_grid_folder, check_pairing

    check_grid_folder(root, with_primary)
    check_pairing(root, primary.attrs["source"])
    runs = read_runs(root, with_primary)
    clash = sorted(set(runs.loc[runs["delay"] > 0, "estimator"]) & set(primary["estimator"]))
    if clash:
        raise ValueError(f"{root} runs estimator(s) {clash}, which the study under {primary.attrs['source']} has: "
                         f"one cell would have two runs")
    grid = audit(root).grid
    cells = recorded_cells(root) if grid is not None else None
    primary_seeds = primary.attrs.get("seeds", sorted(primary["seed"].unique()))
    seeds = [s for s in whole_seeds(runs, cells) if s in primary_seeds]
    out = runs[runs["seed"].isin(seeds) & (runs["delay"] > 0)].reset_index(drop=True).assign(exploratory=True)
    out.attrs.update(source=str(root), seeds=seeds)
    return out


def exploratory_estimators(runs: pd.DataFrame) -> list[str]:
    """The estimators of the exploratory runs set beside ``runs`` (``attrs["exploratory"]``)."""
    extra = runs.attrs.get("exploratory")
    return sorted(set(extra["estimator"])) if extra is not None and len(extra) else []


def with_exploratory(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` and the exploratory runs set beside them (``attrs["exploratory"]``, :func:`read_paired`)
    in one frame (column ``exploratory``), for the tables that list both; never for the hypotheses."""
    extra = runs.attrs.get("exploratory")
    base = pd.DataFrame(runs, copy=True)
    base.attrs = {}
    base["exploratory"] = False
    if extra is None or not len(extra):
        return base
    extra = pd.DataFrame(extra, copy=True)
    extra.attrs = {}
    return pd.concat([base, extra], ignore_index=True)


# --------------------------------------------------------------------------- traces


def read_traces(root: str | Path, columns: tuple[str, ...], grid: str | tuple[str, ...] | None = None) -> pd.DataFrame:
    """The update rows (step < steps) of every complete run under ``root``, long: run, horizon
    (label), H (tokens, :func:`schema.results.horizon_tokens`), estimator, delay, seed, G (group
    size), eps, step and ``columns`` (a column a run does not log reads as NaN). ``grid`` as in
    :func:`read_runs`."""
    from schema.results import horizon_of, horizon_tokens, read_run, read_run_config

    frames = []
    for run in study_folders(root, grid):
        settings, m = read_run(run)
        steps = int(settings["steps"])
        if m.empty or m["step"].max() < steps:
            continue
        upd = m[m["step"] < steps]
        frame = pd.DataFrame({"step": upd["step"].to_numpy()})
        for c in columns:
            frame[c] = pd.to_numeric(upd[c], errors="coerce").to_numpy(float) if c in upd else math.nan
        cfg = read_run_config(run)
        frames.append(frame.assign(run=run.name, horizon=horizon_of(cfg), H=horizon_tokens(cfg),
                                   estimator=settings["estimator"], delay=int(settings["delay"]),
                                   seed=int(settings["seed"]), G=settings["group_size"], eps=settings["eps"]))
    if not frames:
        raise ValueError(f"no complete run folder (config.json + metrics) under {root}")
    return pd.concat(frames, ignore_index=True)
