"""F14: the Qwen3-0.6B study on one GPU: final held-out pc against the delay, per estimator.

F11's drawing (:func:`figures.f11_study_pc_vs_delay.plot`, the same points, intervals and
warm-start line) of the runs of ``python -m llm_runs.gpu_study`` (``results/llm/gpu_study/``):
the long-horizon task, the estimators at the study's large delay and the seed's delay-0 run,
over the whole seeds (:func:`claims.study.whole_seeds`). Not among the figures ``python -m
figures`` draws (no GPU, no results): the report draws it when the folder exists.
"""
from __future__ import annotations

import pandas as pd

from claims.study import read_runs, whole_seeds
from schema.results import GPU_STUDY, read_json

from . import f11_study_pc_vs_delay as f11
from . import style

NAME = "f14_gpu_pc_vs_delay"
TITLE = "F14. Qwen3-0.6B on one GPU: final held-out pc against the delay"
SOURCES = [GPU_STUDY]


def load() -> pd.DataFrame:
    """The GPU study's runs (one row per run, :func:`claims.study.read_runs`), whole seeds only;
    ``attrs``: ``seeds``, ``source`` and the model's parameter count (from ``gpu_study.json``)."""
    root = GPU_STUDY.require()
    runs = read_runs(root)
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
    return f"{model_label(runs)} (`python -m llm_runs.gpu_study`). " + f11.caption(runs)


def main(out=None):
    return style.save(plot(load()), NAME, out)


if __name__ == "__main__":
    main()
