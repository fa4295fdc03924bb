"""Run a sweep: ``python -m simulators.sweep NAME [--quick] [--out DIR] [--force]`` (or ``all``).

Each sweep is a ``SETTINGS`` table kept as data (a grid per scale, ``full`` and ``quick``,
in the environment's ``sweeps`` module) and a function running one setting for a list of
seeds. Results are tidy: one row per (setting, seed, scheme), every setting key a column,
standard errors beside means (``*_se``).

Layout of ``results/sim/NAME/`` (``NAME-quick/`` for ``--quick``)::

    config.json      the settings table, seeds, column meanings, versions, git commit
    parts/KEY.parquet  one file per finished setting (KEY = hash of the setting)
    results.parquet  every part concatenated (re-made at the end of each run)
    steps.parquet    per-step records, for sweeps that have them (async_sgd); a table over 4 MB is
                     written as row-range parts steps.part00.parquet, ... (async_optimizers), read
                     back as one table by schema.results.read_sim(..., steps=True)

Where settings run (``--executor``, see :mod:`execution`): ``local`` (default) one after the
other in this process; ``ray`` one Ray task per setting (``--ray-address``, ``--cpus-per-run``),
the parts still written here, atomically, as each task returns.

Resumable: a setting whose part exists is skipped. Never a silent overwrite: a directory
made with a different table is refused unless ``--force``, which moves it aside first.
Deterministic per seed: a setting's Monte Carlo stream is seeded by (seed, setting key).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import pandas as pd

import execution
from schema.io import (
    check_output_folder,
    same_settings_or_move_aside,
    write_json,
    write_parquet,
    write_parquet_parts,
)
from schema.log import cli_logging
from schema.provenance import git_commit, package_versions
from schema.results import results_root
from schema.runlock import LOCK_NAME, RunLock

# the spec every sweep module defines its sweeps with
from .sweep_spec import Sweep, derive_seed, setting_key  # noqa: F401

_log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent


def registry() -> dict[str, Sweep]:
    from .bandit.sweeps import SWEEPS as e1
    from .delay_sweeps import SWEEPS as delay
    from .extremal.sweeps import SWEEPS as e4
    from .lognormal.sweeps import SWEEPS as e3
    from .optimizer_sweeps import SWEEPS as optimizers
    from .peers import SWEEPS as peers
    from .second_moment_sweeps import SWEEPS as second
    from .shared_softmax import SWEEPS as shared

    out = {}
    for group in (e1, e4, e3, delay, peers, optimizers, second, shared):
        out.update({s.name: s for s in group})
    return out


def results_dir(name: str, quick: bool = False) -> Path:
    """``sim/NAME[-quick]`` under the results root (``GMC_RESULTS`` or ``results/``)."""
    return results_root() / "sim" / (f"{name}-quick" if quick else name)


def _versions() -> dict:
    v = package_versions(("numpy", "scipy", "pandas"))
    return {"python": v["python"], "numpy": v["numpy"], "scipy": v["scipy"], "pandas": v["pandas"],
            "git_commit": git_commit()["git_commit"] or ""}


def _tidy(df: pd.DataFrame, setting: dict, key: str) -> pd.DataFrame:
    df = df.copy()
    for k, v in setting.items():
        if isinstance(v, (list, tuple, dict)):
            continue  # list-valued settings (e.g. the schemes run) live in their own column
        if k not in df.columns:
            df[k] = v
    df["setting_key"] = key
    front = [k for k in setting if k in df.columns and not isinstance(setting[k], (list, tuple, dict))]
    front += [c for c in ("seed", "scheme") if c in df.columns and c not in front]
    return df[front + [c for c in df.columns if c not in front]]


def run_sweep(name: str, quick: bool = False, out: Path | None = None, force: bool = False,
              progress: bool = True, executor=None) -> Path:
    """Run (or resume) sweep ``name``; returns the directory holding ``results.parquet``.

    ``executor`` (an :class:`execution.Executor`; default: in this process) runs the settings;
    the caller keeps ownership of one it passes in.
    """
    sweeps = registry()
    if name not in sweeps:
        raise ValueError(f"unknown sweep {name!r}; valid: {', '.join(sweeps)}, all")
    sweep = sweeps[name]
    out = Path(out) if out is not None else results_dir(name, quick)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder: choose another --out")
    cfg = sweep.record(quick)
    cfg_path = out / "config.json"
    if out.is_dir() and not cfg_path.exists() and [p for p in out.iterdir() if p.name != LOCK_NAME]:
        raise ValueError(f"{out} is not empty and holds no simulator sweep (no config.json): it is never written "
                         f"into; choose another --out")
    check_output_folder(out)  # writable now (OSError naming it), before any setting runs
    with RunLock(out) as lock:  # one process per results folder (RunLocked names the other one's pid)
        return _run_locked(sweep, name, quick, out, cfg, cfg_path, force, progress, lock, executor)


def _run_locked(sweep: Sweep, name: str, quick: bool, out: Path, cfg: dict, cfg_path: Path, force: bool,
                progress: bool, lock: RunLock, executor) -> Path:
    from tqdm import tqdm

    from execution import LocalExecutor

    if not same_settings_or_move_aside(out, cfg, ("sweep", "quick", "settings", "seeds"), force) \
            and not out.exists():  # --force moved the old results aside, their lock file with them
        out.mkdir(parents=True)
        lock.release()
        lock.folder = out
        lock.acquire()
    parts = out / "parts"
    parts.mkdir(parents=True, exist_ok=True)
    write_json(cfg_path, {**cfg, "versions": _versions()}, indent=1)
    cells = sweep.cells(quick)
    table = [c.settings for c in cells]
    seeds = sweep.seeds(quick)
    todo = [(c.settings, c.name) for c in cells if not _intact_part(parts, c.name)]
    if len(todo) < len(table):
        _log.info("%s: %d of %d settings already done, resuming", name, len(table) - len(todo), len(table))
    own = executor is None
    executor = LocalExecutor(1) if own else executor
    queue, running = list(todo), {}
    try:
        with tqdm(total=len(todo), desc=name, disable=not progress, unit="setting") as bar:
            while queue or running:
                while queue and len(running) < executor.capacity:
                    setting, key = queue.pop(0)
                    running[key] = (executor.submit_call(sweep.run, setting, seeds), setting)
                done = [k for k, (job, _) in running.items() if job.poll() is not None]
                if not done:
                    time.sleep(0.05)
                for key in done:
                    job, setting = running.pop(key)
                    res = job.result()
                    df, steps = (res if isinstance(res, tuple) else (res, None))
                    if steps is not None:
                        _atomic_parquet(_tidy(steps, setting, key), parts / f"{key}.steps.parquet")
                    _atomic_parquet(_tidy(df, setting, key), parts / f"{key}.parquet")
                    bar.update(1)
    finally:
        for job, _ in running.values():  # only after an exception: drop what has not returned
            job.terminate()
        if own:
            executor.close()
    keys = [c.name for c in cells]
    _atomic_parquet(pd.concat([pd.read_parquet(parts / f"{k}.parquet") for k in keys], ignore_index=True),
                    out / "results.parquet")
    step_files = [parts / f"{k}.steps.parquet" for k in keys if (parts / f"{k}.steps.parquet").exists()]
    if step_files:
        write_parquet_parts(out / "steps.parquet",
                            pd.concat([pd.read_parquet(f) for f in step_files], ignore_index=True))
    return out


def _intact_part(parts: Path, key: str) -> bool:
    """True if the setting's part files exist and read; an unreadable one is moved aside to
    ``*.corrupt-<time>`` (never deleted), saying so, and the setting is computed again."""
    main = parts / f"{key}.parquet"
    if not main.exists():
        return False
    for path in (main, parts / f"{key}.steps.parquet"):
        if not path.exists():
            continue
        try:
            pd.read_parquet(path)
        except Exception as exc:  # noqa: BLE001 (ArrowInvalid, OSError ... from a truncated or foreign file)
            aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
            os.replace(path, aside)
            _log.warning("warning: part file %s is unreadable (%s: %s); moved it to %s, computing that setting again",
                         path, type(exc).__name__, " ".join(str(exc).split())[:200], aside.name)
            if path == main:
                return False
            main.rename(main.with_name(f"{main.name}.stale-{time.strftime('%Y%m%d-%H%M%S')}"))
            return False
    return True


def _atomic_parquet(df: pd.DataFrame, path: Path):
    write_parquet(path, df)


def main(argv=None):
    sweeps_names = list(registry())
    p = argparse.ArgumentParser(prog="python -m simulators.sweep", description=__doc__.split("\n")[0])
    p.add_argument("name", help=f"one of {', '.join(sweeps_names)}, or all")
    p.add_argument("--quick", action="store_true", help="the small grid (well under a minute per sweep)")
    p.add_argument("--out", type=Path, default=None, help="output directory (default results/sim/NAME[-quick])")
    p.add_argument("--force", action="store_true", help="move aside results made with a different table")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--jobs", type=int, default=1, help="settings at a time (--executor local; default 1: in this "
                                                        "process)")
    execution.add_arguments(p)
    a = p.parse_args(argv)
    cli_logging()
    names = sweeps_names if a.name == "all" else [a.name]
    if a.out is not None and len(names) > 1:
        p.error("--out needs a single sweep name")
    if a.name != "all" and a.name not in sweeps_names:
        p.error(f"unknown sweep {a.name!r}; valid: {', '.join(sweeps_names)}, all")
    try:
        executor = execution.from_arguments(a, jobs=a.jobs)
    except ValueError as exc:
        p.error(str(exc))
    with executor:
        for n in names:
            t0 = time.time()
            try:
                d = run_sweep(n, quick=a.quick, out=a.out, force=a.force, progress=not a.no_progress,
                              executor=executor)
            except (ValueError, OSError) as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            print(f"{n}: {d / 'results.parquet'} ({time.time() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
