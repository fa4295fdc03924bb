"""Where the LLM runs live and how a folder of them is found: the convention of their folders
(``llm/<name>`` under the results root, :func:`llm_relpath`), a source of run folders that counts once it
holds a finished run (:class:`LLMSource`) and the first delay sweep's (:data:`LLM`, read whole by
:func:`read_llm_runs`)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .runs import metrics_path, read_run, read_run_config, run_finished, run_folders, run_settings
from .sources import MissingResults, Source, results_root


def _run_index(root: Path) -> list[dict]:
    """Run folders under ``root`` (:func:`run_folders`) with their settings, sweep runs only."""
    out = []
    for run in run_folders(root):
        metrics = metrics_path(run)
        cfg = run_settings(read_run_config(run))
        if cfg["estimator"] is None or cfg["delay"] is None:
            continue
        done = run_finished(run)
        out.append({"run": run.name, "path": run, "metrics": metrics, "complete": done, **cfg})
    return out


class LLMSource(Source):
    """A folder of LLM run folders: it counts only once it holds a finished run (else any run folder)."""

    def find(self) -> Path | None:
        for rel in self.candidates:
            p = results_root() / rel
            if any(r["complete"] for r in _run_index(p)):
                return p
        for rel in self.candidates:  # no finished run anywhere: take any run folder
            p = results_root() / rel
            if _run_index(p):
                return p
        return None


LLM_FOLDER = "llm"
"""The folder under the results root that holds the LLM runs: one folder per grid or sweep."""


def llm_relpath(name: str) -> str:
    """``llm/<name>``: the folder, relative to the results root, of the LLM runs named ``name`` (the
    convention every grid's folder follows, :func:`grids.folders.grid_folder`). A name that is not one
    plain folder name is a ``ValueError`` naming it."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name:
        raise ValueError(f"not a folder name for LLM runs: {name!r}")
    return f"{LLM_FOLDER}/{name}"


LLM = LLMSource("llm sweep", ("llm/sweep", "llm/sweep_quick"), "python -m grids.sweep")


def read_llm_runs() -> pd.DataFrame:
    """Every run's metrics, long: one row per (run, step), the run's settings as columns.

    Columns: run, estimator, mode, delay, seed, eps, steps, complete, step and every metric
    column (``train/...``, ``eval/...``, ``stale/...``, ``perf/...``). A run is complete when
    its metrics reach step = steps (the final evaluation row) or it wrote ``summary.json``.
    A run whose files are corrupt (duplicated steps, a garbage line) raises ``ValueError``.
    """
    root = LLM.require()
    frames = []
    for r in _run_index(root):
        _, m = read_run(r["path"])
        if m.empty:
            continue
        complete = r["complete"] or (r["steps"] is not None and m["step"].max() >= r["steps"])
        meta = {k: r[k] for k in ("run", "estimator", "mode", "delay", "seed", "eps", "steps", "heldout_size")}
        frames.append(m.assign(**meta, complete=bool(complete)))
    if not frames:
        raise MissingResults(f"no run under {root} has a non-empty metrics file; make them with `{LLM.command}`")
    df = pd.concat(frames, ignore_index=True)
    df.attrs["source"] = str(root)
    df.attrs["quick"] = LLM.is_quick()
    return df
