"""F11: the staleness study's final held-out pc against the delay, per horizon and estimator.

One panel per horizon; one line per estimator through delays 0, 16 and 64, where delay 0 is
the seed's one delay-0 run (every trajectory scheme makes the same update there, so it is the
common start of every line). Points: the mean over the whole seeds (:func:`grids.run_table.whole_seeds`)
of the final held-out pc; bars: the 95% percentile bootstrap interval of that mean
(:func:`grids.run_table.bootstrap`, the analysis' settings). Dotted grey: the warm-start pc (the
step-0 evaluation, the same for every run of a horizon). Estimators are dodged sideways. The drawing is
:func:`figures.pc_vs_delay.plot`. Every number is computed by :func:`load` (the table of means and
intervals, :func:`table`); :func:`plot` and :func:`caption` only read it.
"""
from __future__ import annotations

import pandas as pd

from figures import pc_vs_delay, style
from grids.folders import STUDY, STUDY_2025
from grids.run_table import MIN_SEEDS, bootstrap, exploratory_estimators, with_exploratory
from schema.results import source_note

from .f10_study_differences import load_runs

NAME = "f11_study_pc_vs_delay"
TITLE = "F11. Staleness study: final held-out pc against the delay"
SOURCES = [STUDY, STUDY_2025]


def table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per horizon, estimator and delay (delay 0: the delay-0 run, listed under every estimator
    that has a positive-delay run): n seeds, mean final pc and its bootstrap interval
    (:func:`figures.pc_vs_delay.table` with :func:`grids.run_table.bootstrap`). The
    exploratory estimators set beside the study (:func:`grids.run_table.with_exploratory`) are listed
    after the study's, with ``exploratory`` True."""
    return pc_vs_delay.table(with_exploratory(runs), bootstrap, exploratory_estimators(runs))


def summary(runs: pd.DataFrame) -> dict:
    """What :func:`plot` draws and :func:`caption` reads (:func:`figures.pc_vs_delay.summary`), ``table``
    being :func:`table` of ``runs`` (:func:`studies.staleness.figures.f10_study_differences.load_runs`' frame)."""
    return pc_vs_delay.summary(runs, table(runs))


def load() -> dict:
    """The study's runs (:func:`studies.staleness.figures.f10_study_differences.load_runs`) and their
    :func:`summary`."""
    return summary(load_runs())


def plot(loaded: dict, ax=None):
    n = len(loaded["seeds"])
    return pc_vs_delay.plot(loaded, f"Final held-out pc, {pc_vs_delay.over_seeds(n)}", ax)


def caption(loaded: dict) -> str:
    tab, runs = loaded["table"], loaded["runs"]
    more = ""
    if tab["exploratory"].astype(bool).any():
        e = runs.attrs["exploratory"]
        es = e.attrs.get("seeds", [])
        more = (f" Dashed, (expl.): the 2025-2026 corrections, exploratory (not pre-registered), over their "
                f"{len(es)} whole seed(s) ({', '.join(map(str, es)) or 'none'}); {source_note(e)}")
    return pc_vs_delay.caption(loaded, MIN_SEEDS) + more


def main(out=None):
    return style.save(plot(load()), NAME, out)


if __name__ == "__main__":
    main()
