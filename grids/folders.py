"""Where each LLM grid's runs live: ``llm/<grid name>`` under the results root by convention
(:func:`schema.results.llm_relpath`), except for the grids whose folders predate the convention
(:data:`FOLDERS_BEFORE_THE_CONVENTION`, frozen). :func:`grid_folder` applies the two: every analysis,
figure and report card finds a grid's runs through it, never by a path of its own, so that a new grid,
defined in its study's ``grids.py``, touches no table here. The sources of the staleness study's grids
and its verdicts (:data:`STUDY`, :data:`STUDY_HORIZON`, :data:`MECHANISM`, :data:`STUDY_2025`,
:data:`VERDICTS`) are found through it too."""
from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from schema.results import LLMSource, Source, llm_relpath, results_root

FOLDERS_BEFORE_THE_CONVENTION = MappingProxyType({"primary": "llm/study", "peers_2025": "llm/study_2025"})
"""Grid name -> its folder under the results root, for the grids whose committed folders were named before the
convention ``llm/<grid name>``: the staleness study's primary grid and its 2025-2026 corrections grid.
Frozen: no entry is ever added (a new grid's folder is ``llm/<its name>``), and none is removed while its
committed runs live there."""


def grid_relpath(grid: str) -> str:
    """The folder of grid ``grid`` relative to the results root: its entry in
    :data:`FOLDERS_BEFORE_THE_CONVENTION`, else ``llm/<grid>``. A name that is no folder name is a
    ``ValueError`` naming it."""
    if isinstance(grid, str) and grid in FOLDERS_BEFORE_THE_CONVENTION:
        return FOLDERS_BEFORE_THE_CONVENTION[grid]
    try:
        return llm_relpath(grid)
    except ValueError:
        raise ValueError(f"not a grid name: {grid!r}") from None


def grid_folder(grid: str) -> Path:
    """The results folder of grid ``grid`` (:func:`grid_relpath`) under the results root."""
    return results_root() / grid_relpath(grid)


def grid_source(label: str, grid: str) -> LLMSource:
    """The source of grid ``grid``'s runs (its folder, :func:`grid_relpath`), made by ``python -m studies.run``."""
    arg = "" if grid == "primary" else f" --grid {grid}"
    return LLMSource(label, (grid_relpath(grid),), f"python -m studies.run{arg}")


STUDY = grid_source("llm study", "primary")
STUDY_HORIZON = grid_source("llm horizon grid", "horizon")
MECHANISM = grid_source("llm mechanism grid", "mechanism")
STUDY_2025 = grid_source("llm 2025-2026 corrections grid", "peers_2025")
_VERDICTS_FILE = f"{grid_relpath('primary')}/verdicts.json"
VERDICTS = Source(_VERDICTS_FILE, (_VERDICTS_FILE,), f"python -m studies.staleness --json results/{_VERDICTS_FILE}")
"""The staleness study's pre-registered verdicts, in its primary grid's folder."""
