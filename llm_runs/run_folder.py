"""The life of a run folder: refuse one that holds something else, create it, hold its lock for the
life of the run (one process per run folder), and leave nothing behind when a fresh run fails before
its first update."""
from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from schema.results import METRICS_FILE, PACKED_METRICS_FILE, finished_run_problem, is_packed_run, read_run_config
from schema.runlock import LOCK_NAME, RunLock, check_free, entries

from .config import config_diff


def check_new_run_folder(out: Path) -> None:
    """Refuse, before anything is created, an ``out`` that is a file, a non-empty folder, or that cannot be
    created (no writable ancestor)."""
    if out.exists():
        if not out.is_dir():
            raise ValueError(f"output folder {out} is a file, not a folder: choose another --out")
        if entries(out):
            check_free(out)  # a live trainer in it: name its pid
            raise ValueError(f"output folder {out} already exists and is not empty: refusing to overwrite it "
                             f"(use --resume to continue that run, or choose another --out)")
        if not os.access(out, os.W_OK | os.X_OK):
            raise ValueError(f"output folder {out} is not writable")
        return
    parent = next(p for p in out.absolute().parents if p.exists())
    if not parent.is_dir():
        raise ValueError(f"cannot create the output folder {out}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"cannot create the output folder {out}: {parent} is not writable")


def check_resumable(out: Path, config: dict) -> None:
    """Refuse a resume of a folder that holds no run, a finished run whose metrics are packed, a run
    a live trainer holds, or one whose stored settings differ from ``config``."""
    stored = out / "config.json"
    if out.is_dir():
        check_free(out)  # a live trainer in it: name its pid
    if not stored.is_file() and is_packed_run(out):
        raise ValueError(f"--resume: {out} is a finished run of a packed grid ({out.parent}/runs.jsonl.gz): "
                         f"there is nothing to resume")
    if not stored.is_file():
        raise ValueError(f"--resume: {out} holds no run (no config.json)")
    if (out / PACKED_METRICS_FILE).exists():
        raise ValueError(f"--resume: {out} is a finished run whose metrics are packed "
                         f"({PACKED_METRICS_FILE}): there is nothing to resume")
    diff = config_diff(read_run_config(out), config)
    if diff:
        raise ValueError(f"--resume: settings differ from {stored}: "
                         + ", ".join(f"{k}: stored {a!r} vs given {b!r}" for k, (a, b) in diff.items()))


class RunFolder:
    """``open()`` creates ``out`` (a fresh run) and takes its lock; ``close(failed)`` releases it and,
    if a fresh run failed before anything of it was kept (``started`` still False), removes what it
    made, folders included."""

    def __init__(self, out: Path, resume: bool):
        self.out, self.resume = out, resume
        self.started = False  # a metrics row or a checkpoint exists: from here on a failure keeps the folder
        self._lock: RunLock | None = None
        self._created: list[Path] = []  # folders a fresh run made, removed again if it fails before step 0
        self._owns = False  # a fresh run that locked an empty folder

    def open(self) -> None:
        if not self.resume:
            missing = [p for p in (self.out, *self.out.parents) if not p.exists()]
            try:
                self.out.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ValueError(f"cannot create the output folder {self.out}: {exc.strerror or exc}") from None
            self._created = missing[::-1]
        self._lock = RunLock(self.out).acquire()  # RunLocked (a ValueError) names the holder's pid
        if not self.resume and entries(self.out):  # another process made a run here between the check and now
            raise ValueError(f"output folder {self.out} already exists and is not empty: refusing to overwrite it "
                             f"(use --resume to continue that run, or choose another --out)")
        self._owns = not self.resume  # everything in the folder from here on is this fresh run's

    def close(self, failed: bool) -> None:
        if failed and self._owns and not self.started:
            for name in ("config.json", "config.tmp", METRICS_FILE, "checkpoints", LOCK_NAME):
                target = self.out / name
                if target.is_dir():
                    shutil.rmtree(target, ignore_errors=True)
                elif target.exists():
                    target.unlink()
            for folder in reversed(self._created):  # only folders this run created, and only if now empty
                try:
                    folder.rmdir()
                except OSError:
                    break
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def run_state(run: Path, planned: dict) -> str:
    """``new`` | ``complete`` | ``interrupted`` | ``torn``; a folder that is not this planned run is a ValueError,
    and so is one a live trainer holds (:mod:`schema.runlock`): never two trainers on one folder. A run folder
    finished by its ``summary.json`` is ``complete`` only when it is whole (:func:`schema.results.
    finished_run_problem`: its metrics read whole and hold every step 0..T); else ``torn``, which no caller skips
    (:func:`torn_runs_error` names each with the commands that move it aside)."""
    if run.is_dir():
        check_free(run)
    if not (run / "config.json").is_file() and is_packed_run(run):  # a finished run of a packed grid
        diff = config_diff(read_run_config(run), planned)
        if diff:
            changes = ", ".join(f"{k}: {a!r} vs planned {b!r}" for k, (a, b) in diff.items())
            raise ValueError(f"{run} (packed in {run.parent}) was run with other settings ({changes}): use another "
                             f"--out")
        return "complete"
    if not run.exists() or (run.is_dir() and not entries(run)):
        return "new"
    stored_file = run / "config.json"
    if not stored_file.is_file():
        raise ValueError(f"{run} exists but holds no run (no config.json): move it away; it is never overwritten")
    diff = config_diff(read_run_config(run), planned)
    if diff:
        changes = ", ".join(f"{k}: {a!r} vs planned {b!r}" for k, (a, b) in diff.items())
        raise ValueError(f"{run} was run with other settings ({changes}): use another --out or move it away")
    if not (run / "summary.json").is_file():
        return "interrupted"
    return "complete" if finished_run_problem(run) is None else "torn"


def torn_runs_error(out: Path, names: list[str]) -> ValueError:
    """The refusal of a sweep over ``out`` whose finished runs ``names`` are torn (:func:`run_state`): each named
    with what is wrong, and the commands that move them aside so that the same command runs them again from the
    start (their results are never overwritten, and never skipped as complete)."""
    aside = Path(f"{out}.torn")
    why = "; ".join(f"{n}: {finished_run_problem(Path(out) / n)}" for n in names[:4])
    more = f" (and {len(names) - 4} more)" if len(names) > 4 else ""
    move = f"mkdir -p {shlex.quote(str(aside))} && mv " + " ".join(shlex.quote(str(Path(out) / n)) for n in names)
    return ValueError(f"{len(names)} finished run(s) of {out} are torn, their metrics not whole: {why}{more}. "
                      f"Nothing was run. They are never skipped as complete nor overwritten: move them aside "
                      f"({move} {shlex.quote(str(aside))}/) and run the same command again, which runs them anew")
