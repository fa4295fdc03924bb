"""Theory and experiment in one frame (THEORY §8, F23): when an exact model's outcome counts as a
prediction, when the LLM's cell counts as stable, and the cells where the two disagree. The frame table
itself is read by :func:`figures.f23_theory_frame.load`; the figure draws it and the report lists the
disagreements (``studies.report``), both by this one rule."""
from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from schema.stability import STABLE_FRACTION as LLM_STABLE  # the study's rule: stable in a cell at >= 80% seeds

HOLDS, COLLAPSES = 0.9, 0.5  # an exact model predicts "holds" at >= 90% runs held, "collapses" at >= 50% collapsed
MODELS = (("exact E2", "e2_collapse"), ("shared-parameter model", "shared_collapse"))
"""The exact models of the frame: their name and the frame table's column of their collapse share."""


@functools.cache
def llm_frame_runs() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The LLM's side of the frame, read once: the staleness study's and the mechanism grid's runs
    (:func:`grids.mechanism_table.load`) and their drift table (:func:`grids.mechanism_table.drift_table`)."""
    from grids.folders import MECHANISM, STUDY
    from grids.mechanism_table import drift_table
    from grids.mechanism_table import load as load_runs

    runs = load_runs()
    return runs, drift_table(runs, STUDY.require(), MECHANISM.require())


def prediction(collapse: float) -> str:
    """What an exact model whose runs collapsed in a share ``collapse`` predicts: ``holds``, ``collapses``,
    ``mixed``, or ``not run`` (no share)."""
    if not np.isfinite(collapse):
        return "not run"
    return "holds" if 1 - collapse >= HOLDS else "collapses" if collapse >= COLLAPSES else "mixed"


def llm_outcome(stable: int, n: int) -> str:
    """The LLM's cell of ``stable`` stable seeds of ``n``: ``stable``, ``unstable`` or ``not run``."""
    if not n:
        return "not run"
    return "stable" if stable / n >= LLM_STABLE else "unstable"


def disagreeing_cells(tab: pd.DataFrame) -> list[dict]:
    """The (scheme, optimiser, model) cells of the frame table where an exact model's prediction and the
    LLM's outcome differ (a model predicting ``holds`` where the LLM was unstable, or ``collapses`` where it
    was stable): each the frame row's values with ``model``, its ``prediction``, its ``held`` share and
    the LLM's ``outcome``."""
    out = []
    for r in tab.to_dict("records"):
        word = llm_outcome(r["llm_stable"], r["llm_n"])
        if word == "not run":
            continue
        for model, col in MODELS:
            p = prediction(r[col])
            if (p == "holds" and word == "unstable") or (p == "collapses" and word == "stable"):
                out.append({**r, "model": model, "prediction": p, "held": 1 - r[col], "outcome": word})
    return out
