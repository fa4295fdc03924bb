"""``make llm-sweep``: every estimator x delay x seed on ``tiny-cpu``, resumable, two runs at a time.

    python -m grids.sweep                  # the full sweep -> results/llm/sweep/
    python -m grids.sweep --quick          # a < 2 minute taste -> results/llm/sweep_quick/
    python -m grids.sweep --resume         # continue interrupted runs (finished ones are skipped)
    python -m grids.sweep --dry-run        # print the plan and what is already done
    python -m grids.sweep --executor ray --ray-address auto   # one Ray task per run on a cluster

The settings are data (:data:`SWEEPS`): a base configuration shared by every run, the
estimators, delays and seeds of the controlled-delay cells, and the estimators run in
``mode = async`` with ``max_staleness`` = the delay. Async cells run last; while the async
mode is not registered they are skipped with a message and picked up by the next
invocation.

Each run is ``python -m llm_runs.train`` in its own subprocess with one torch thread, at most
``--jobs`` (2) at once (``--executor ray``: one Ray task per run, as many at once as the cluster
has room for, ``--cpus-per-run`` / ``--gpus-per-run`` each; see :mod:`execution`), in
``<out>/<estimator>-<mode>-d<delay>-s<seed>/`` (log in ``<out>/logs/``). The warm start is
computed once, before any run starts. A finished run
(``summary.json``) is skipped; an interrupted one is continued with ``--resume``; a run
folder whose stored configuration differs from the plan is refused, never overwritten.
Ctrl-C or SIGTERM stops every running run at its next update with a checkpoint.

Results: ``<out>/sweep.json`` (the settings), ``<out>/summary.csv`` (one row per run, the one per-run
record :func:`grids.run_table.run_row`: its settings, held-out and training-pool accuracy / pc at the
start and end, log-ratio and staleness statistics, stability and collapse, wall time, then every other
setting of its config) and the run folders the figures read.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import execution
from llm_runs.run_folder import run_state, torn_runs_error
from llm_runs.train import cli_flags
from schema.grid import Grid, as_record, check_plan, settings_product

from .run_table import RUN_COLUMNS, write_summary  # noqa: F401 (the sweep's summary table)
from .spec import Cell, record_as_today, with_legacy_settings

REPO = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------- settings (data)

BASE = {"preset": "tiny-cpu", "task": "arithmetic", "digits": 1, "terms": 3, "heldout_size": 200,
        "eval_train_size": 200, "warm_start_steps": 50, "prompts_per_step": 32, "group_size": 8, "lr": 1e-4,
        "eps": 0.2, "advantage": "loo", "steps": 200, "eval_every": 10, "checkpoint_every": 50,
        "keep_checkpoints": 1, "threads": 1}
"""Every run of the full sweep: ``tiny-cpu`` (986k parameters) on sums of three one-digit
numbers (1000 problems, 200 held out), warm start 50 supervised steps, B = 32 prompts x G = 8,
Adam lr 1e-4, eps 0.2, leave-one-out advantages."""


@dataclass(frozen=True)
class Sweep:
    """A sweep as data: ``base`` settings, the controlled cells estimators x delays x seeds, and
    ``async_estimators`` x delays x seeds in ``mode = async`` (``max_staleness`` = delay)."""

    name: str
    out: str
    base: dict
    estimators: tuple[str, ...]
    delays: tuple[int, ...]
    seeds: tuple[int, ...]
    async_estimators: tuple[str, ...] = ()
    doc: str = ""
    legacy_settings: tuple[str, ...] = ()  # as :attr:`grids.spec.Grid.legacy_settings` (not recorded)

    def record(self) -> dict:
        """What ``sweep.json`` records (:meth:`schema.grid.Grid.record`): every field but ``out``, ``doc`` and
        ``legacy_settings``."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(self).items()
                if k not in ("out", "doc", "legacy_settings")}

    def default_out(self) -> Path:
        """``out`` under the results root (``GMC_RESULTS`` or ``results/``)."""
        from schema.results import results_root

        return results_root() / Path(self.out).relative_to("results")

    def cells(self) -> list[Cell]:
        """Every cell, controlled first then async; within each, seed-major so that a partial
        sweep holds complete seeds."""
        axes = {"seed": self.seeds, "delay": self.delays}
        settle = partial(with_legacy_settings, names=self.legacy_settings)
        cells = [Cell(c["estimator"], "controlled", c["delay"], c["seed"], settle({**self.base, **c}))
                 for c in settings_product({**axes, "estimator": self.estimators})]
        cells += [Cell(c["estimator"], "async", c["delay"], c["seed"],
                       settle({**self.base, "estimator": c["estimator"], "seed": c["seed"],
                               **async_overrides(c["delay"])}))
                  for c in settings_product({**axes, "estimator": self.async_estimators})]
        return cells


SWEEPS = {
    "full": Sweep("full", "results/llm/sweep", BASE,
                  estimators=("token_clip", "tic_mask", "tic_trunc", "gmc", "is", "stale", "gspo"),
                  delays=(0, 2, 8, 32), seeds=(0, 1, 2), async_estimators=("gmc", "tic_mask"),
                  doc="7 estimators x 4 delays x 3 seeds controlled (84 runs) + 2 x 4 x 3 async (24 runs)",
                  legacy_settings=("gspo_eps_low", "gspo_eps_high")),  # its GSPO runs clipped at 1 - eps
    "quick": Sweep("quick", "results/llm/sweep_quick", {**BASE, "steps": 30, "eval_every": 10, "checkpoint_every": 0},
                   estimators=("gmc", "tic_mask"), delays=(0, 8), seeds=(0,), async_estimators=("gmc",),
                   doc="2 estimators x 2 delays x 1 seed controlled + gmc async at max staleness 0 and 8, "
                       "30 updates (figures on a fresh clone)"),
}


def async_overrides(delay: int) -> dict:
    """How an async cell of ``delay`` is configured: maximum staleness d, and a queue of
    max(1, d) batches so that the worker can actually run up to d versions ahead (with a
    shorter queue the realised staleness stays near the queue length whatever d is). The
    async mode drops (and counts) any batch older than d; realised staleness is recorded."""
    return {"mode": "async", "max_staleness": delay, "queue_size": max(1, delay)}


def plan(sweep: Grid) -> list[Cell]:
    """The grid's cells (:meth:`Grid.cells`), refusing a plan with two runs of one name."""
    return check_plan(sweep.name, sweep.cells())


def async_available() -> bool:
    """True once ``mode = async`` is registered and the config has ``max_staleness``."""
    from llm_runs.config import config_fields
    from llm_runs.rollout_sources import ROLLOUT_SOURCES

    return "async" in ROLLOUT_SOURCES and "max_staleness" in {f.name for f in config_fields()}


# --------------------------------------------------------------------------- running


@dataclass
class Outcome:
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # already complete
    failed: list[str] = field(default_factory=list)
    interrupted: list[str] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)  # async cells while the async mode is missing
    summary: Path | None = None
    wall_s: float = 0.0


def _child_env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "GMC_PARENT_PID": str(os.getpid()),
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


def _prepare(sweep: Grid, out: Path, resume: bool, log) -> tuple[list[Cell], list[tuple[Cell, str]], list[Cell]]:
    """(all cells, [(cell, state)] to run, async cells set aside). Refuses before any work."""
    from llm_runs.config import resolve_config

    cells = plan(sweep)
    have_async = async_available()
    waiting = [] if have_async else [c for c in cells if c.mode == "async"]
    if waiting:
        log(f"async mode is not available yet (llm_runs.async_rollout not registered): {len(waiting)} async runs are "
            f"skipped this time; run the same command again once it is, and they will be picked up")
    todo, stale, torn = [], [], []
    for cell in cells:
        if cell in waiting:
            continue
        planned = resolve_config(cell.overrides).to_dict()
        state = run_state(out / cell.name, planned)
        if state == "interrupted" and not resume:
            stale.append(cell.name)
        if state == "torn":  # finished, but its metrics are not whole: never skipped, never overwritten
            torn.append(cell.name)
        todo.append((cell, state))
    if torn:
        raise torn_runs_error(out, torn)
    if stale:
        raise ValueError(f"{len(stale)} run(s) of {out} were interrupted ({', '.join(stale[:4])}"
                         f"{', ...' if len(stale) > 4 else ''}): continue them with --resume")
    return cells, todo, waiting


def run_sweep(sweep: Grid, out: str | Path | None = None, *, resume: bool = False, jobs: int = 2,
              progress: bool = True, log=None, executor=None) -> Outcome:
    """Run (or continue) ``sweep`` in ``out`` (default ``sweep.out`` under the results root); returns an
    :class:`Outcome`.

    ``executor`` (an :class:`execution.Executor`) says where runs execute; default: a local
    pool of ``jobs`` processes. The caller keeps ownership of an executor it passes in.
    One sweep per folder: the sweep holds ``out``'s lock (:mod:`schema.runlock`) while it runs,
    and a second sweep on it is refused (``RunLocked``, naming the first one's pid).
    """
    from schema.runlock import LOCK_NAME, RunLock

    # runs start in this working directory: cache_dir is relative to it
    out = (Path(out) if out else sweep.default_out()).absolute()
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        with RunLock(out):
            return _run_sweep(sweep, out, resume=resume, jobs=jobs, progress=progress, log=log, executor=executor)
    except BaseException:
        if made and [p.name for p in out.iterdir()] in ([], [LOCK_NAME]):  # refused before anything was written
            (out / LOCK_NAME).unlink(missing_ok=True)
            out.rmdir()
        raise


def _run_sweep(sweep: Grid, out: Path, *, resume: bool, jobs: int, progress: bool, log, executor) -> Outcome:
    from tqdm.auto import tqdm

    from execution import LocalExecutor
    from llm_runs.config import resolve_config
    from llm_runs.tasks import build_task
    from llm_runs.warmstart import get_warm_start, torch_threads

    log = log or (lambda msg: print(msg, flush=True))
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    settings_file = out / "sweep.json"
    from schema.results import read_json

    if settings_file.is_file():
        doc = read_json(settings_file)  # a truncated file is named
        stored = doc.get("settings") if isinstance(doc, dict) else None
        if not isinstance(stored, dict):
            raise ValueError(f"{settings_file} holds no sweep settings (no 'settings' object): not a sweep's "
                             f"sweep.json; use another --out")
        if record_as_today(stored) != as_record(sweep.record()):
            raise ValueError(f"{settings_file} holds other sweep settings: use another --out (results are never "
                             f"overwritten)")
    cells, todo, waiting = _prepare(sweep, out, resume, log)
    outcome = Outcome(not_run=[c.name for c in waiting])
    outcome.skipped = [c.name for c, s in todo if s == "complete"]
    pending = [(c, s) for c, s in todo if s != "complete"]
    out.mkdir(parents=True, exist_ok=True)
    if not settings_file.is_file():  # atomic, with the commit and versions that started the grid
        from schema.io import write_json
        from schema.provenance import provenance

        write_json(settings_file, {"settings": sweep.record(), "doc": sweep.doc, "runs": [c.name for c in cells],
                                   "provenance": provenance()})
    t0 = time.perf_counter()
    if pending:
        with torch_threads(1):  # the shared warm start, once (runs would otherwise race to compute it)
            base = resolve_config(pending[0][0].overrides)
            get_warm_start(base, build_task(base), log)
    own_executor = executor is None
    executor = LocalExecutor(jobs) if own_executor else executor
    slots = executor.capacity
    log(f"sweep {sweep.name}: {len(cells)} runs planned, {len(outcome.skipped)} complete, {len(pending)} to run "
        f"({sum(s == 'interrupted' for _, s in pending)} resumed), {slots} at a time ({executor.kind}) -> {out}")
    (out / "logs").mkdir(exist_ok=True)
    stopping: list[int] = []

    def on_signal(signum, frame):
        if not stopping:
            stopping.append(signum)

    handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    running: dict[str, tuple[object, Cell]] = {}
    queue, shown = list(pending), []
    bar = tqdm(total=len(pending), desc=f"llm sweep ({sweep.name})", unit="run", disable=not progress,
               dynamic_ncols=True, file=sys.stderr)
    try:
        while queue or running:
            if stopping and queue is not None:
                for job, _ in running.values():
                    job.terminate()  # SIGTERM: each run checkpoints after its current update
                queue = None  # start nothing more
            while queue and len(running) < slots:
                cell, state = queue.pop(0)
                cmd = [sys.executable, "-m", "llm_runs.train", "--out", str(out / cell.name), "--no-progress"]
                cmd += ["--resume"] if state == "interrupted" else cli_flags(cell.overrides)
                # each run in its own session: Ctrl-C reaches the sweep, which stops runs cleanly
                job = executor.start_command(cmd, env=_child_env(), log_path=out / "logs" / f"{cell.name}.log",
                                             cwd=os.getcwd())
                running[cell.name] = (job, cell)
            if list(running) != shown:
                shown = list(running)
                bar.set_postfix_str("running: " + ", ".join(shown), refresh=True)
            time.sleep(0.2)
            for name in [n for n, (j, _) in running.items() if j.poll() is not None]:
                job, cell = running.pop(name)
                rc = job.poll()
                if rc == 0 and not (out / name / "summary.json").is_file():
                    outcome.failed.append(name)
                    bar.write(f"FAILED {name}: it exited without a summary.json; see {out / 'logs' / (name + '.log')}")
                elif rc == 0:
                    outcome.ran.append(name)
                    s = read_json(out / name / "summary.json")  # a non-finite value reads back as the float
                    bar.write(f"done {name}: held-out acc {s['heldout_acc_start']:.3f} -> {s['heldout_acc_end']:.3f}, "
                              f"pc {s['heldout_pc_start']:.3f} -> {s['heldout_pc_end']:.3f}, {s['wall_s']:.0f} s")
                elif rc == 128 + signal.SIGTERM and stopping:
                    outcome.interrupted.append(name)
                else:
                    outcome.failed.append(name)
                    bar.write(f"FAILED {name} (exit status {rc}); see {out / 'logs' / (name + '.log')}")
                bar.update(1)
                write_summary(out, cells)
    finally:
        for job, _ in running.values():  # only after an exception: stop what we started
            job.terminate()
        for job, _ in running.values():
            job.result()
        if own_executor:
            executor.close()
        bar.close()
        for s, h in handlers.items():
            signal.signal(s, h)
    outcome.wall_s = time.perf_counter() - t0
    outcome.summary = write_summary(out, cells)
    return outcome


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grids.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help=f"the quick sweep ({SWEEPS['quick'].doc})")
    p.add_argument("--resume", action="store_true", help="continue interrupted runs (finished runs are always skipped)")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time (one torch thread each)")
    p.add_argument("--out", default=None, help="sweep folder (default: results/llm/sweep or results/llm/sweep_quick)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the state of each run, run nothing")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    execution.add_arguments(p)
    args = p.parse_args(argv)
    sweep = SWEEPS["quick" if args.quick else "full"]
    out = Path(args.out) if args.out else sweep.default_out()
    try:
        if args.dry_run:
            cells, todo, _ = _prepare(sweep, out, True, print)
            states = {c.name: s for c, s in todo}
            for c in cells:
                print(f"{c.name:32s} {states.get(c.name, 'waiting for the async mode')}")
            return 0
        with execution.from_arguments(args, jobs=args.jobs) as executor:
            o = run_sweep(sweep, out, resume=args.resume, progress=not args.no_progress, executor=executor)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"sweep {sweep.name}: {len(o.ran)} runs done, {len(o.skipped)} already complete, {len(o.failed)} failed, "
          f"{len(o.interrupted)} interrupted, {len(o.not_run)} waiting for the async mode; {o.wall_s / 60:.1f} min; "
          f"summary {o.summary}")
    if o.interrupted:
        again = ["--quick"] * args.quick + (["--out", args.out] if args.out else []) + ["--resume"]
        print(f"interrupted: continue with python -m grids.sweep {' '.join(again)}")
        return 130
    return 1 if o.failed else 0


if __name__ == "__main__":
    sys.exit(main())
