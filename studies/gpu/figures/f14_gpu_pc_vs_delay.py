"""F14: the Qwen3-0.6B study on one GPU: final held-out pc against the delay, per estimator.

F11's drawing (:func:`figures.pc_vs_delay.plot`, the same points, intervals and
warm-start line) of the runs of ``python -m studies.gpu.run`` (``results/llm/gpu_study/``):
the long-horizon task, the estimators at the study's large delay and the seed's delay-0 run,
over the whole seeds (:func:`grids.run_table.whole_seeds`). Not among the figures ``python -m
studies.figures`` draws (no GPU, no results): the report draws it when the folder exists. Every number is
computed by :func:`load` (the table of means and 95% percentile-bootstrap intervals, :func:`figures.pc_vs_delay.table`
with :func:`grids.run_table.bootstrap`); :func:`plot` and :func:`caption` only read it.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from figures import pc_vs_delay, style
from grids.run_table import MIN_SEEDS, bootstrap, run_row, whole_seeds
from schema.results import read_json, run_folders
from studies.gpu.grid import GPU_STUDY

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


def load_runs() -> pd.DataFrame:
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


def load() -> dict:
    """The GPU study's runs (:func:`load_runs`) and what :func:`plot` and :func:`caption` read of them
    (:func:`figures.pc_vs_delay.summary`: the table of means and bootstrap intervals, the warm start)."""
    runs = load_runs()
    return pc_vs_delay.summary(runs, pc_vs_delay.table(runs, bootstrap))


def model_label(runs: pd.DataFrame) -> str:
    p = runs.attrs.get("parameters")
    return f"Qwen3, {p / 1e6:.1f}M parameters" if p else "Qwen3"


def plot(loaded: dict, ax=None):
    title = (f"{model_label(loaded['runs'])}, one GPU: final held-out pc, "
             f"{pc_vs_delay.over_seeds(len(loaded['seeds']))}")
    return pc_vs_delay.plot(loaded, title, ax)


def caption(loaded: dict) -> str:
    return f"{model_label(loaded['runs'])} (`python -m studies.gpu.run`). " + pc_vs_delay.caption(loaded, MIN_SEEDS)


def main(out=None):
    return style.save(plot(load()), NAME, out)


if __name__ == "__main__":
    main()
