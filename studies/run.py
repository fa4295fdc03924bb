"""Run, price, continue or pack one of the studies' LLM grids (:data:`studies.grids.STUDIES`).

    python -m studies.run --dry-run                # the primary grid's runs, their state, the estimated time
    python -m studies.run                          # run (or continue) it -> results/llm/study/
    python -m studies.run --grid drift --resume    # continue the drift map's interrupted runs
    python -m studies.run --grid pilot --pack-grid # a finished grid as three tables (schema.packed)

The flags are :func:`llm_runs.study.main`'s; the folder of each grid is
:data:`schema.results.GRID_FOLDERS`.
"""
from __future__ import annotations

import sys

from llm_runs.study import main as run_grid

from .grids import STUDIES


def main(argv: list[str] | None = None) -> int:
    return run_grid(argv, STUDIES, prog="python -m studies.run")


if __name__ == "__main__":
    sys.exit(main())
