"""Run, price, continue or pack one of the studies' LLM grids (:data:`studies.grids.GRIDS`).

    python -m studies.run --dry-run                # the primary grid's runs, their state, the estimated time
    python -m studies.run                          # run (or continue) it -> results/llm/study/
    python -m studies.run --grid drift --resume    # continue the drift map's interrupted runs
    python -m studies.run --grid pilot --pack-grid # a finished grid as three tables (schema.packed)

The flags are :func:`grids.runner.main`'s; the folder of each grid is :func:`grids.grid_folder`'s.
"""
from __future__ import annotations

import sys

from grids.runner import main as run_grid

from .grids import GRIDS


def main(argv: list[str] | None = None) -> int:
    return run_grid(argv, GRIDS, prog="python -m studies.run")


if __name__ == "__main__":
    sys.exit(main())
