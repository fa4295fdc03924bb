"""The LLM grids: a grid is the specification of a set of training runs, settings per cell
(:mod:`grids.spec`: :class:`Grid`, :class:`Arm`, :class:`Cell`, :func:`grid_out`), its folder under the
results root (:mod:`grids.folders`: :func:`grid_folder`), its runner (:mod:`grids.runner`, the command line
of ``python -m studies.run``; :mod:`grids.sweep` runs the cells, and is the first delay sweep's command),
the check that a folder is the grid it claims to be (:mod:`grids.check`), its run tables
(:mod:`grids.run_table`, :mod:`grids.bound_table`) and the mechanism grid's table
(:mod:`grids.mechanism_table`), what a plan costs (:mod:`grids.costs`), and a run's place on the drift grid's map
(:mod:`grids.drift_place`, ``python -m grids.drift_place``).

This floor lies between the producers (:mod:`llm_runs`, the training library, and the simulators) and the
readers (claims, figures, report cards, studies); a study (a campaign, ``studies/<study>/``) defines its
grids in its ``grids.py``, and nothing here imports the studies: what needs a study's grids (which grids
pair with which, :attr:`Grid.pairs`) takes them as an argument."""
from __future__ import annotations

from .folders import FOLDERS_BEFORE_THE_CONVENTION, grid_folder, grid_relpath  # noqa: F401
from .spec import Arm, Cell, Grid, GridCell, grid_out, pairing_with, recorded_grid  # noqa: F401
