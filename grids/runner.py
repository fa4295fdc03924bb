"""Running, pricing, continuing and packing an LLM grid (:class:`grids.spec.Grid`): the staleness
study's design and every grid after it.

    python -m studies.run --dry-run                   # the runs, their state and the estimated time
    python -m studies.run                             # run (or continue) the grid -> results/llm/study/
    python -m studies.run --resume                    # continue interrupted runs (finished ones are skipped)
    python -m studies.run --grid pilot                # the delay-0 pilot that sized it -> results/llm/pilot/
    python -m studies.run --grid horizon              # chi^2 against the horizon H = 3..18 -> results/llm/horizon/
    python -m studies.run --grid pilot_long_steps     # delay 0, long horizon, 800 updates
    python -m studies.run --grid pilot --pack-grid    # a finished grid as three tables (schema.packed)
    python -m studies.run --grid pilot --summary      # its summary.csv again, every setting a column

The grids are data (``studies.grids.GRIDS``, each study's ``grids.py``), run by
:func:`main` (the command ``python -m studies.run`` passes them): the settings shared by every
run (:data:`llm_runs.reference.STUDY_BASE`), one
block of settings per horizon (:data:`llm_runs.reference.HORIZONS`: ``short`` is the arithmetic task of the
reference sweep, completions of at most 3 tokens; ``long`` the scratchpad task, completions of
exactly 18 tokens), the estimators and positive delays, the stale floor (run at the largest
delay only) and the seeds. Delay 0 makes every trajectory scheme the same update (every ratio
is 1), so it is run once per seed and horizon (as ``gmc``) and is the common delay-0 point of
every estimator.

Pairing (common random numbers): every run of one seed shares the warm start (one per horizon,
``warm_start_seed`` fixed), the prompt of every update and the uniforms of every sample (both
derived from ``seed``, :mod:`llm_runs.delay`, :mod:`llm_runs.rollout`), so that estimators
differ only through their updates. Runs go seed-major (a partial grid holds whole seeds), at
most ``--jobs`` at a time, through :func:`grids.sweep.run_sweep` (resumable; a folder of
other settings is refused, never overwritten). ``--dry-run`` prices the plan with the step
costs measured by the pilot (:data:`grids.costs.STEP_COST_S`), or with ``--cost-from DIR`` (a folder of
finished runs whose ``perf/`` columns are read).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import execution
from llm_runs.reference import HORIZONS

from .check import Audit, audit, check_warm_starts  # noqa: F401 (the analysis' entry points)
from .costs import EVAL_COST_S, RUN_OVERHEAD_S, STEP_COST_S, horizon_cost
from .spec import Grid, GridCell
from .sweep import run_sweep

# --------------------------------------------------------------------------- pricing


def horizon_label(config: dict, horizons: dict) -> str | None:
    """The label of the horizon in ``horizons`` whose every task setting the run's stored
    ``config`` has (None if none does)."""
    from llm_runs.config import TrainConfig

    knobs = {f.name for f in dataclasses.fields(TrainConfig) if "knob" in f.metadata}
    for h, task in horizons.items():  # an estimator's knob in a horizon's block (the geo mask's L) is no task setting
        if all(config.get(k) == v for k, v in task.items() if k not in knobs):
            return h
    return None


def measured_costs(folder: str | Path, horizons: dict | None = None) -> tuple[dict, dict]:
    """(step cost, eval cost) per horizon label of ``horizons`` (default: the staleness study's)
    from the finished runs under ``folder``: the median ``perf/step_s`` and ``perf/eval_s``
    (a run's horizon is the one whose task settings it has, :func:`horizon_label`)."""
    import pandas as pd

    from schema.results import metrics_path, read_metrics_csv, read_run_config, run_folders

    steps, evals = {}, {}
    for run in run_folders(folder):
        path = metrics_path(run)
        h = horizon_label(read_run_config(run), horizons or HORIZONS)
        if h is None:
            continue
        m = read_metrics_csv(path)
        steps.setdefault(h, []).extend(m["perf/step_s"].dropna().tolist())
        evals.setdefault(h, []).extend(m["perf/eval_s"].dropna().tolist())
    med = lambda x: float(pd.Series(x).median())
    if not steps:
        raise ValueError(f"no finished study or pilot run under {folder} to measure step costs from")
    return {h: med(v) for h, v in steps.items()}, {h: med(v) for h, v in evals.items()}


def estimate_seconds(cells: list[GridCell], jobs: int, step_cost: dict | None = None,
                     eval_cost: dict | None = None) -> float:
    """Wall time of ``cells`` run ``jobs`` at a time: the sum of per-run costs / jobs (runs are
    short and many, so the schedule packs well). A horizon without a measured cost is an error."""
    step_cost, eval_cost = step_cost or STEP_COST_S, eval_cost or EVAL_COST_S
    total = 0.0
    for c in cells:
        step = horizon_cost(step_cost, c.horizon)
        if step is None:
            raise ValueError(f"no measured step cost for horizon {c.horizon!r} (have {sorted(step_cost)})")
        o = c.overrides
        n_eval = o["steps"] // o["eval_every"] + 2 if o["eval_every"] else 2
        total += o["steps"] * step + n_eval * (horizon_cost(eval_cost, c.horizon) or 0.0) + RUN_OVERHEAD_S
    return total / max(1, jobs)


def missing_estimators(grid: Grid) -> list[str]:
    """Estimators of the grid that :func:`estimators.losses.loss_names` does not know (yet)."""
    from estimators.losses import loss_names

    known = set(loss_names())
    return [e for e in grid.estimator_names() if e not in known]


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None, grids: dict[str, Grid], prog: str = "python -m studies.run") -> int:
    """Run, price, continue or pack one grid of ``grids`` (name -> :class:`Grid`): the command line of
    ``python -m studies.run``, which passes the studies' grids."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--grid", default="primary", choices=sorted(grids), help="which grid (default: primary)")
    p.add_argument("--out", default=None, help="grid folder (default: the grid's own)")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time (one torch thread each)")
    p.add_argument("--resume", action="store_true", help="continue interrupted runs")
    p.add_argument("--dry-run", action="store_true", help="print the runs, their state and the estimated time")
    p.add_argument("--cost-from", default=None, help="price the plan with the step costs measured in this folder")
    p.add_argument("--no-progress", action="store_true")
    execution.add_arguments(p)
    p.add_argument("--pack", action="store_true",
                   help="only pack the finished runs' metrics.csv as metrics.csv.gz (same bytes; runs after a sweep "
                        "too)")
    p.add_argument("--summary", action="store_true",
                   help="only write the grid's summary.csv again from its runs (one row per run, every setting a "
                        "column; grids.run_table.run_row)")
    p.add_argument("--pack-grid", action="store_true",
                   help="pack the finished grid into three tables (runs.jsonl.gz, metrics.parquet, logs.jsonl.gz; "
                        "schema.packed) and remove its run folders once the tables read back the same; refused "
                        "unless every run of the grid finished")
    args = p.parse_args(argv)
    grid = grids[args.grid]
    out = Path(args.out) if args.out else grid.default_out()
    try:
        if args.pack_grid:
            n = pack_finished_grid(grid, out)
            print(f"grid {grid.name}: packed {n} run folders under {out}")
            return 0
        if args.summary:
            from .check import check_grid_folder
            from .run_table import write_summary

            check_grid_folder(out, grid.name)
            print(f"grid {grid.name}: wrote {write_summary(out, grid.cells())}")
            return 0
        if args.pack:
            n = pack_finished(grid, out)
            print(f"grid {grid.name}: packed {n} finished runs under {out}")
            return 0
        cells = grid.cells()
        step_cost, eval_cost = measured_costs(args.cost_from, grid.horizons) if args.cost_from else (None, None)
        est = estimate_seconds(cells, args.jobs, step_cost, eval_cost)
        missing = missing_estimators(grid)
        if args.dry_run:
            if args.executor == "local":
                execution.from_arguments(args, jobs=args.jobs).close()  # the flags' errors, without running
            from llm_runs.config import resolve_config
            from llm_runs.run_folder import run_state
            from schema.results import finished_run_problem, is_packed_run
            from schema.runlock import RunLocked

            for c in cells:
                if c.estimator in missing:
                    state = "estimator not registered"
                elif (out / c.name).exists() or is_packed_run(out / c.name):  # a packed run: complete
                    try:
                        state = run_state(out / c.name, resolve_config(c.overrides).to_dict())
                    except RunLocked as exc:  # a live trainer holds it: the dry run reports, it runs nothing
                        state = f"running (pid {exc.holder.get('pid', 'unknown')})"
                    if state == "torn":  # finished, its metrics not whole: the run refuses it, naming it
                        state = f"torn: {finished_run_problem(out / c.name)}"
                else:
                    state = "new"
                print(f"{c.name:34s} {state}")
            per_h = {h: sum(c.horizon == h for c in cells) for h in grid.horizons}
            print(f"{len(cells)} runs ({', '.join(f'{n} {h}' for h, n in per_h.items())}), {len(grid.seeds)} seeds, "
                  f"{args.jobs} at a time ({args.executor}): estimated {est / 3600:.2f} h"
                  + (f"; not registered yet: {', '.join(missing)}" if missing else ""))
            return 0
        if missing:
            raise ValueError(f"estimators {missing} are not registered (estimators.losses.loss_names()): the grid "
                             f"needs every one of them; nothing was run")
        if grid.kernel_env:  # every run of the grid on the forced kernel path (each run's config records it)
            os.environ.update(dict(grid.kernel_env))
            print(f"kernel path forced for every run: {', '.join(f'{k}={v}' for k, v in grid.kernel_env)}")
        warm = _warm_starts(grid)
        for folder in [out, *grid.paired_folders()]:  # its own runs and those its analysis pairs them with
            check_warm_starts(folder, warm)
        with execution.from_arguments(args, jobs=args.jobs) as executor:
            o = run_sweep(grid, out, resume=args.resume, jobs=args.jobs, progress=not args.no_progress,
                          executor=executor)
        pack_finished(grid, out)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"grid {grid.name}: {len(o.ran)} runs done, {len(o.skipped)} already complete, {len(o.failed)} failed, "
          f"{len(o.interrupted)} interrupted; {o.wall_s / 60:.1f} min; summary {o.summary}")
    if o.interrupted:
        print(f"interrupted: continue with {prog} --grid {args.grid} --resume")
        return 130
    return 1 if o.failed else 0


def pack_finished(grid: Grid, out: Path) -> int:
    """Pack (:func:`schema.results.pack_metrics`) the metrics of every finished run of ``grid``
    under ``out``: the committed grid must fit the results budget, and a finished run's table
    never changes again. A folder a live trainer holds is refused (:func:`schema.runlock.check_free`).
    Returns the number of runs newly packed."""
    from schema.results import PACKED_METRICS_FILE, metrics_path, pack_metrics
    from schema.runlock import check_free

    n = 0
    for c in grid.cells():
        run = Path(out) / c.name
        if not (run / "summary.json").is_file():
            continue
        path = metrics_path(run)
        if path is None or path.name == PACKED_METRICS_FILE:
            continue
        check_free(run)
        pack_metrics(run)
        n += 1
    return n


def pack_finished_grid(grid: Grid, out: Path) -> int:
    """Pack the finished grid ``grid`` under ``out`` (:func:`schema.packing.pack_grid`): every cell
    of the grid must have finished (a packed run counts as finished, and ``--resume`` never runs it
    again). Returns the number of run folders packed."""
    from schema.packing import pack_grid
    from schema.results import run_finished

    from .check import check_grid_folder

    check_grid_folder(out, grid.name)
    unfinished = [c.name for c in grid.cells() if not run_finished(Path(out) / c.name)]
    if unfinished:
        raise ValueError(f"{out}: {len(unfinished)} run(s) of grid {grid.name} have not finished "
                         f"({', '.join(unfinished[:4])}{', ...' if len(unfinished) > 4 else ''}): only a finished "
                         f"grid is packed")
    return pack_grid(out)


def _warm_starts(grid: Grid) -> dict[str, dict]:
    """One warm start per horizon, computed before any run (runs would otherwise race for it);
    ``{horizon: its record}``."""
    from llm_runs.config import resolve_config
    from llm_runs.tasks import build_task
    from llm_runs.warmstart import get_warm_start, torch_threads

    with torch_threads(1):
        found = {}
        for h, task in grid.horizons.items():
            cfg = resolve_config({**grid.base, **task})
            found[h] = get_warm_start(cfg, build_task(cfg)).info
        return found
