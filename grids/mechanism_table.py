"""The mechanism grid's run table: which optimiser arm a run is, both grids read as one (the committed
staleness study's unclipped-Adam runs as arm ``adam``, the mechanism grid's other arms), its whole
seeds, the replay check, the per-run means and the drift table the figures and the report draw.
The pre-registered hypotheses and their verdicts are :mod:`studies.mechanism.analysis`
(docs/PREREGISTRATION-MECHANISM.md); this table sits below the figures and the report cards, which
read the same runs.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .run_table import PRIMARY, read_runs, read_traces, whole_seeds
from .run_table import planned_cells as study_planned_cells

GRID, SCALE, SCALE_MECH, SCALE_VARIANTS = "mechanism", "scale", "scale_mech", "scale_variants"
"""The grids this analysis reads besides the study's (:data:`grids.run_table.PRIMARY`): each folder it is
given is checked to hold its grid (:func:`grids.check.check_grid_folder`)."""


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


# --------------------------------------------------------------------------- reading both grids

DELAY = 64  # every hypothesis is at the long horizon and this delay
REUSED = ("gmc", "is", "tic_mask", "tic_trunc", "topr")  # the committed study's unclipped-Adam runs reused
MECH_COLUMNS = ("mech/cos_is", "mech/heavy_share", "mech/lambda_min", "mech/step_norm", "mech/step_cos_grad",
                "mech/kl", "stale/gmc_lambda_mean", "stale/mass_cap_frac", "stale/mass_bias", "train/weight_max",
                "train/grad_norm")
"""Per-update columns averaged per run for the mechanism table and figure."""


def read_both(study: str | Path, root: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(runs, replays)``: one row per run of the long horizon with its ``arm`` (the committed
    study's reused cells as arm ``adam``, the mechanism grid's others), and the mechanism grid's
    ``adam``-arm runs of estimators the committed study already has (the full-length replays).
    ``ValueError`` if a mechanism run started from another warm start than the study's runs
    (:func:`grids.check.check_pairing`)."""
    from .check import check_grid_folder, check_pairing

    check_grid_folder(study, PRIMARY)
    check_grid_folder(root, GRID)
    check_pairing(root, study)
    s = read_runs(study, PRIMARY)
    s = s[(s["horizon"] == "long") & ((s["delay"] == 0) | s["estimator"].isin(REUSED))]
    s = s[(s["delay"] == 0) | (s["delay"] == DELAY)].assign(arm="adam", source="study")
    m = read_runs(root, GRID).assign(source="mechanism")
    from schema.results import read_run_config

    m["arm"] = [arm_of(read_run_config(Path(root) / run)) for run in m["run"]]
    replay = (m["arm"] == "adam") & m["estimator"].isin(REUSED)
    return pd.concat([s, m[~replay]], ignore_index=True), m[replay]


def compare_runs(pairs) -> dict:
    """``{run: {reference, differences, first}}`` for each ``(run folder, reference folder, updates)``
    of ``pairs`` whose reference has a metrics table: every column of the reference, every update,
    compared as text (:func:`llm_runs.replay.compare_metrics`)."""
    from llm_runs.replay import compare_metrics
    from schema.results import metrics_path

    out = {}
    for run, ref, steps in pairs:
        if metrics_path(ref) is not None:
            diffs = compare_metrics(metrics_path(ref), metrics_path(run), int(steps))
            out[run.name] = {"reference": ref.name, "differences": len(diffs), "first": diffs[:3]}
    return out


def replay_check(study: str | Path, root: str | Path, replays: pd.DataFrame) -> dict:
    """The mechanism grid's unclipped-Adam runs of gmc and topr against the committed study's runs
    of the same seed: every common column of every update, compared as text (llm_runs.replay)."""
    out = compare_runs((Path(root) / r.run, Path(study) / f"long-{r.estimator}-d{int(r.delay)}-s{int(r.seed)}", r.steps)
                       for r in replays[replays["complete"]].itertuples())
    same = all(v["differences"] == 0 for v in out.values())
    return {"verdict": ("byte-identical" if same else "DIFFERS") if out else "no replay complete yet", "runs": out}


MECHANISM_CELL = ("arm", "estimator", "delay")
"""The fields that name a cell of the mechanism grid (and of the single-horizon grids it reads)."""


def planned_cells(grid: str = "mechanism") -> set[tuple]:
    """(arm, estimator, delay) of every run a seed of the grid plans (:func:`grids.run_table.planned_cells`)."""
    return study_planned_cells(grid, MECHANISM_CELL)


def whole_seeds_of(runs: pd.DataFrame, cells: set | None = None) -> list[int]:
    """Seeds whose every cell (arm, estimator, delay) is complete: the ``cells`` given (a grid's
    plan, :func:`planned_cells`), else every cell any seed has (:func:`grids.run_table.whole_seeds`)."""
    return whole_seeds(runs, cells, MECHANISM_CELL)


def mechanism_seeds(runs: pd.DataFrame, replays: pd.DataFrame) -> list[int]:
    """The whole seeds of the mechanism grid: every planned run of the seed complete."""
    return whole_seeds_of(pd.concat([runs[runs["source"] == "mechanism"], replays]), planned_cells())


def load(study: str | Path | None = None, root: str | Path | None = None) -> pd.DataFrame:
    """The runs the figures draw (:func:`read_both`): the whole seeds, or while there is none
    every complete run of the mechanism grid and the committed runs of those seeds (interim);
    ``attrs["seeds"]`` lists the whole seeds."""
    from .folders import MECHANISM, STUDY

    study, root = study or STUDY.require(), root or MECHANISM.require()
    runs, replays = read_both(study, root)
    seeds = mechanism_seeds(runs, replays)
    mech = runs[(runs["source"] == "mechanism") & runs["complete"]]
    keep = seeds or sorted(set(mech["seed"]))
    out = runs[runs["seed"].isin(keep)].reset_index(drop=True)
    out.attrs.update(seeds=seeds, source=str(root))
    return out


def per_run_means(roots: list[str | Path], columns=MECH_COLUMNS) -> pd.DataFrame:
    """Per run (name, source root): the mean of each of ``columns`` over its updates."""
    frames = []
    for root in roots:
        tr = read_traces(root, tuple(columns))
        means = tr.groupby("run")[list(columns)].mean()
        frames.append(means.assign(root=str(root)))
    return pd.concat(frames)


DRIFT_COLUMNS = ("stale/log_ratio_abs_mean", "stale/chi2", "mech/kl", "mech/step_norm", "mech/cos_is",
                 "mech/heavy_share", "stale/mass_cap_frac")
"""How far the policy is from the one that sampled its batch, and what the update does, per run."""


def drift_table(runs: pd.DataFrame, study: str | Path, root: str | Path, first: int | None = None) -> pd.DataFrame:
    """Per (arm, estimator) at d = 64: runs, stable runs, and the median over runs of each run's
    median over its updates (its first ``first`` updates, if given) of :data:`DRIFT_COLUMNS` (the
    committed runs have no ``mech/`` columns: NaN there)."""
    sel = runs[(runs["delay"] == DELAY) & runs["complete"]]
    meds = []
    for src, path in (("study", study), ("mechanism", root)):
        names = set(sel.loc[sel["source"] == src, "run"])
        if not names:
            continue
        tr = read_traces(path, DRIFT_COLUMNS)
        if first is not None:
            tr = tr[tr["step"] < first]
        meds.append(tr[tr["run"].isin(names)].groupby("run")[list(DRIFT_COLUMNS)].median().assign(source=src))
    if not meds:
        return pd.DataFrame()
    per_run = pd.concat(meds).reset_index()
    per_run = per_run.merge(sel[["run", "source", "arm", "estimator", "stable"]], on=["run", "source"])
    g = per_run.groupby(["arm", "estimator"])
    out = g[list(DRIFT_COLUMNS)].median()
    out.insert(0, "stable", g["stable"].sum().astype(int))
    out.insert(0, "runs", g.size())
    return out.reset_index()
