"""Every run of the budget design and where it comes from: the budget grid's own folder, or a reused run of the
group-size grid (:data:`studies.budget.grids.REUSED`), with its state and the design's estimated cost.

    python -m studies.budget.plan            # one line per run, then the counts and the estimated CPU time

A reused run is checked field for field (:func:`llm_runs.config.config_diff`, the one rule for resuming a run)
against the design's settings; one that differs is an error naming the fields, never silently read.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grids import GridCell, grid_folder

from .grids import DESIGN, GRIDS, REUSED

WALL_S = {128: 66.0, 512: 180.0}
"""Median wall seconds of one run (200 updates, one core) of the group-size grids at N = B x G = 128 (its
Adam runs, ``results/llm/group_size/summary.csv``: 65.8 s mean, 66 s median) and N = 512 (its 16 x 32 block,
180 s): the two budgets it measured. :func:`run_seconds` interpolates linearly in N between and beyond them."""


def run_seconds(N: int) -> float:
    """Estimated wall seconds of one run at sample budget ``N``: the line through :data:`WALL_S`."""
    (n1, t1), (n2, t2) = sorted(WALL_S.items())
    return t1 + (t2 - t1) * (N - n1) / (n2 - n1)


def source_name(cell: GridCell) -> tuple[str, str] | None:
    """(grid, run name) of the reused run that stands for a design cell, or None when the budget grid runs it."""
    hit = REUSED.get(cell.arm)
    if hit is None:
        return None
    grid, arm, ests, d0 = hit
    if (cell.delay == 0 and not d0) or (cell.delay > 0 and cell.estimator not in ests):
        return None
    return grid, GridCell(cell.estimator, cell.mode, cell.delay, cell.seed, cell.overrides, horizon=cell.horizon,
                          arm=arm).name


def reused_differences(cell: GridCell) -> dict:
    """``{field: (recorded, designed)}`` between a reused run's recorded config and the design's settings (empty:
    equal field for field). ``ValueError`` if the cell is not reused or its run is not committed."""
    from llm_runs.config import config_diff, resolve_config
    from schema.results import read_run_config

    src = source_name(cell)
    if src is None:
        raise ValueError(f"{cell.name} is not a reused cell of the budget design")
    run = grid_folder(src[0]) / src[1]
    return config_diff(read_run_config(run), resolve_config(cell.overrides).to_dict())


def plan_rows() -> list[dict]:
    """One row per run of the design, in the grid's order (seed-major): name, N, source, folder."""
    own = {c.name for c in GRIDS["budget"].cells()}
    rows = []
    for c in DESIGN.cells():
        src = source_name(c)
        if src is None and c.name not in own:
            raise ValueError(f"{c.name} is neither reused nor planned by the budget grid")
        N = c.overrides["prompts_per_step"] * c.overrides["group_size"]
        rows.append({"name": c.name, "cell": c, "N": N, "source": src[0] if src else "budget",
                     "run": grid_folder(src[0]) / src[1] if src else grid_folder("budget") / c.name})
    return rows


def state(row: dict) -> str:
    from llm_runs.config import resolve_config
    from llm_runs.run_folder import run_state

    run: Path = row["run"]
    if row["source"] != "budget":
        diff = reused_differences(row["cell"])
        if diff:
            raise ValueError(f"{row['name']}: the reused run {run} differs from the design in "
                             + ", ".join(f"{k} ({a!r} recorded, {b!r} designed)" for k, (a, b) in diff.items()))
    from schema.runlock import live_holder

    if run.is_dir() and live_holder(run) is not None:  # a trainer holds it: running now, never touched here
        return "running"
    return run_state(run, resolve_config(row["cell"].overrides).to_dict())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m studies.budget.plan", description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=1, help="runs at a time, for the time estimate")
    args = p.parse_args(argv)
    try:
        rows = plan_rows()
        for r in rows:
            print(f"{r['name']:48s} N={r['N']:<4d} {r['source']:10s} {state(r)}")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    new = [r for r in rows if r["source"] == "budget"]
    secs = sum(run_seconds(r["N"]) for r in new) / max(1, args.jobs)
    print(f"{len(rows)} runs in the design: {len(new)} run by the budget grid, {len(rows) - len(new)} reused from "
          f"the group-size grid; estimated {secs / 3600:.1f} h at {args.jobs} run(s) at a time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
