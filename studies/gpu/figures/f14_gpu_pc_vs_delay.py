"""F14: the Qwen3-0.6B study on one GPU: final held-out pc against the delay, per estimator.

F11's drawing (:func:`studies.staleness.figures.f11_study_pc_vs_delay.plot`, the same points, intervals and
warm-start line) of the runs of ``python -m studies.gpu.run`` (``results/llm/gpu_study/``):
the long-horizon task, the estimators at the study's large delay and the seed's delay-0 run,
over the whole seeds (:func:`grids.run_table.whole_seeds`). Not among the figures ``python -m
studies.figures`` draws (no GPU, no results): the report draws it when the folder exists.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from figures import style
from grids.run_table import run_row, whole_seeds
from schema.results import read_json, run_folders
from studies.gpu.grid import GPU_STUDY
from studies.staleness.figures import f11_study_pc_vs_delay as f11

NAME = "f14_gpu_pc_vs_delay"
TITLE = "F14. Qwen3-0.6B on one GPU: final held-out pc against the delay"
SOURCES = [GPU_STUDY]


def read_gpu_runs(root: Path) -> pd.DataFrame:
    """One row per run folder under ``root`` (:func:`grids.run_table.run_row`, the study's table). Every run
    folder must be a run the sweep planned (``sweep.json``'s ``runs``): a foreign one is a ``ValueError``,
    never mixed in. (The study's own check, :func:`grids.check.audit`, knows the CPU grids only.)"""
    planned = set(read_json(root / "sweep.json").get("runs", [])) if (root / "sweep.json").is_file() else None
    folders = run_folders(root)
    foreign = [p.name for p in folders if planned is not None and p.name not in planned]
    if foreign:
        raise ValueError(f"{root} holds run folders its sweep did not plan: {', '.join(foreign[:6])}; move them away")
    rows = [r for r in (run_row(p) for p in folders) if r is not None]
    if not rows:
        raise ValueError(f"no run folder (config.json + metrics.csv or metrics.csv.gz) under {root}")
    return pd.DataFrame(rows)


def load() -> pd.DataFrame:
    """The GPU study's runs (:func:`read_gpu_runs`), whole seeds only; ``attrs``: ``seeds``, ``source`` and
    the model's parameter count (from ``gpu_study.json``)."""
    root = GPU_STUDY.require()
    runs = read_gpu_runs(root)
    seeds = whole_seeds(runs)
    out = runs[runs["seed"].isin(seeds)].reset_index(drop=True)
    record = root / "gpu_study.json"
    params = read_json(record).get("parameters") if record.is_file() else None
    out.attrs.update(source=str(root), seeds=seeds, parameters=params)
    return out


def model_label(runs: pd.DataFrame) -> str:
    p = runs.attrs.get("parameters")
    return f"Qwen3, {p / 1e6:.1f}M parameters" if p else "Qwen3"


def plot(runs: pd.DataFrame, ax=None):
    fig = f11.plot(runs, ax)
    n = len(runs.attrs.get("seeds", sorted(runs["seed"].unique())))
    fig.suptitle(f"{model_label(runs)}, one GPU: final held-out pc, mean and 95% bootstrap interval over {n} whole "
                 f"seed{'s' * (n != 1)}", fontsize=10)
    return fig


def caption(runs: pd.DataFrame) -> str:
    return f"{model_label(runs)} (`python -m studies.gpu.run`). " + f11.caption(runs)


def main(out=None):
    return style.save(plot(load()), NAME, out)


if __name__ == "__main__":
    main()
