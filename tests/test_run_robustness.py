"""Faults and concurrency around run folders: one process per folder (the lock, two trainers, a sweep
and the dry run against a held folder) and children dying with their sweep (corrupt checkpoints and
failures before step 0: tests/test_run_robustness_checkpoints.py; the simulator sweep:
tests/test_run_robustness_sim.py).

Every trainer here is a 1-layer, hidden-32 Qwen3 on 2 prompts x G = 2 (about 0.02 s per update).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _run_folders import (  # noqa: F401 (a fixture)
    REPO,
    SMALL,
    _alive,
    _env,
    _flags,
    _lock_held,
    _steps_once,
    _wait,
    cache_fixture,
)

from llm_runs.train import main
from schema.runlock import LOCK_NAME, RunLock, RunLocked, read_holder


def _rows(out: Path) -> int:
    p = out / "metrics.csv"
    return max(0, len(p.read_text().splitlines()) - 1) if p.is_file() else 0


# --------------------------------------------------------------------------- the lock itself


def test_lock_is_exclusive_names_the_holder_and_is_released(tmp_path):
    with RunLock(tmp_path):
        assert read_holder(tmp_path)["pid"] == os.getpid()
        with pytest.raises(RunLocked, match=rf"in use by another process: pid {os.getpid()}"):
            RunLock(tmp_path).acquire()  # a second open file description conflicts, even in one process
    RunLock(tmp_path).acquire().release()  # free again
    assert (tmp_path / LOCK_NAME).is_file()


def test_lock_of_a_sigkilled_holder_is_released_by_the_os(tmp_path):
    with _lock_held(tmp_path) as proc:
        with pytest.raises(RunLocked, match=rf"pid {proc.pid}"):
            RunLock(tmp_path).acquire()
        proc.kill()
        proc.wait()
        RunLock(tmp_path).acquire().release()  # no stale lock after SIGKILL


# --------------------------------------------------------------------------- two trainers, one folder


def test_second_trainer_on_a_folder_is_refused_and_steps_are_written_once(cache, tmp_path, capsys):
    """Two trainers (fresh or --resume) on one folder: the second is refused naming the first's pid,
    and metrics.csv holds every step exactly once (both trained and wrote every step twice)."""
    out = tmp_path / "run"
    flags = _flags(cache, steps=3000, checkpoint_every=20)
    first = subprocess.Popen([sys.executable, "-m", "llm_runs.train", "--out", str(out), "--no-progress", *flags],
                             cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait(lambda: read_holder(out).get("pid") == first.pid and _rows(out) >= 2, 120, "the first trainer to train")
        assert main(["--out", str(out), "--no-progress", *flags]) == 2
        assert f"pid {first.pid}" in capsys.readouterr().err
        assert main(["--out", str(out), "--resume", "--no-progress"]) == 2
        assert f"pid {first.pid}" in capsys.readouterr().err
    finally:
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
    assert first.returncode == 128 + signal.SIGTERM, err.decode()[-2000:]
    n = _rows(out)
    _steps_once(out, n)
    # two resumes of the interrupted run: the second is refused while the first runs
    again = subprocess.Popen([sys.executable, "-m", "llm_runs.train", "--out", str(out), "--resume", "--no-progress"],
                             cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait(lambda: read_holder(out).get("pid") == again.pid and _rows(out) >= n + 2, 120, "the resumed trainer")
        assert main(["--out", str(out), "--resume", "--no-progress"]) == 2
        assert f"pid {again.pid}" in capsys.readouterr().err
    finally:
        again.send_signal(signal.SIGTERM)
        _, err = again.communicate(timeout=120)
    assert again.returncode == 128 + signal.SIGTERM, err.decode()[-2000:]
    assert len(_steps_once(out)) > n


# --------------------------------------------------------------------------- a killed sweep


def _tiny_sweep(out: Path, cache: Path):
    from grids.sweep import Sweep

    base = {"preset": "tiny-cpu", **SMALL, "cache_dir": str(cache), "steps": 150, "checkpoint_every": 10}
    return Sweep("t", str(out), base, ("gmc",), (0,), (0,))


def _sweep_cmd(out: Path, cache: Path) -> list[str]:
    sw = _tiny_sweep(out, cache)
    code = ("import sys; from grids.sweep import Sweep, run_sweep; "
            f"o = run_sweep(Sweep('t', {str(out)!r}, {sw.base!r}, ('gmc',), (0,), (0,)), {str(out)!r}, "
            f"jobs=1, progress=False); sys.exit(1 if o.failed else 0)")
    return [sys.executable, "-c", code]


def test_kill9_of_a_sweep_stops_its_trainer_and_resume_finishes_the_run(cache, tmp_path):
    """kill -9 of the sweep left its trainer running (its own session): now the trainer gets SIGTERM
    from the kernel, checkpoints and exits; --resume then runs one trainer and finishes the run."""
    out = tmp_path / "sweep"
    run = out / "gmc-controlled-d0-s0"
    sweep = subprocess.Popen(_sweep_cmd(out, cache), cwd=REPO, env=_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    seen: list[int] = []

    def trainer_running():
        pid = read_holder(run).get("pid")
        if isinstance(pid, int):
            seen.append(pid)
        return bool(seen) and _rows(run) >= 3

    try:
        _wait(trainer_running, 180, "the sweep's trainer")
    finally:
        sweep.kill()
        sweep.wait()
    child = seen[-1]
    assert child != sweep.pid
    _wait(lambda: not _alive(child), 60, f"the orphaned trainer (pid {child}) to stop")
    assert not (run / "summary.json").exists(), "the trainer ran on to the end after its sweep was killed"
    done = _rows(run)
    assert 3 <= done < 151
    from grids.sweep import run_sweep

    outcome = run_sweep(_tiny_sweep(out, cache), out, resume=True, jobs=1, progress=False, log=lambda m: None)
    assert outcome.ran == ["gmc-controlled-d0-s0"] and not outcome.failed
    assert (run / "summary.json").is_file()
    _steps_once(run, 151)  # updates 0..149 and the final evaluation row 150, each once
    log = (out / "logs" / "gmc-controlled-d0-s0.log").read_text()
    assert log.count("--no-progress --resume") == 1  # one resumed trainer


def test_a_sweep_never_starts_a_second_trainer_on_a_held_folder(tmp_path):
    """A run folder still held by a live trainer (say, of an earlier sweep) is refused by name."""
    from llm_runs.run_folder import run_state

    run = tmp_path / "gmc-controlled-d0-s0"
    run.mkdir()
    with _lock_held(run) as holder, pytest.raises(RunLocked, match=rf"pid {holder.pid}"):
        run_state(run, {})
    assert run_state(run, {}) == "new"  # only the (free) lock file: nothing of a run


def test_two_sweeps_on_one_folder_the_second_is_refused(cache, tmp_path):
    """The sweep holds its folder's lock: a second sweep on the same --out is refused naming the
    first one's pid (before, each started trainers and reported the other's runs FAILED)."""
    from grids.sweep import run_sweep

    out = tmp_path / "sweep"
    out.mkdir()
    with _lock_held(out) as first:
        with pytest.raises(RunLocked, match=rf"pid {first.pid}"):
            run_sweep(_tiny_sweep(out, cache), out, jobs=1, progress=False, log=lambda m: None)
        assert [p.name for p in out.iterdir()] == [LOCK_NAME]  # nothing started, nothing written


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_lock_held_only_by_orphans_of_a_dead_holder_does_not_block(tmp_path):
    """A process that inherited the lock's file description (not the holder) outlives the holder:
    the recorded holder is dead, so the lock is taken anew, never refused naming the dead pid."""
    code = (f"import os, subprocess, sys, time; sys.path.insert(0, {str(REPO)!r}); from schema.runlock import RunLock; "
            f"lock = RunLock({str(tmp_path)!r}).acquire(); "
            f"p = subprocess.Popen(['sleep', '60'], pass_fds=[lock._fd], stdout=subprocess.DEVNULL, "
            f"stderr=subprocess.DEVNULL); print(p.pid, flush=True); os._exit(0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    orphan = int(res.stdout.split()[0])
    try:
        assert _alive(orphan)
        with RunLock(tmp_path):
            assert read_holder(tmp_path)["pid"] == os.getpid()
            with pytest.raises(RunLocked, match=rf"pid {os.getpid()}"):
                RunLock(tmp_path).acquire()  # the new lock is a real one
    finally:
        os.kill(orphan, signal.SIGKILL)


def test_a_dry_run_reports_a_held_run_as_running_and_runs_nothing(tmp_path, capsys):
    """``--dry-run`` over a grid whose run a live trainer holds (a grid being run now) says so and exits 0: it
    only reads, so the lock that refuses a second trainer does not refuse it."""
    from studies.grids import GRIDS
    from studies.run import main

    name = GRIDS["budget"].cells()[0].name
    run = tmp_path / name
    run.mkdir()
    with _lock_held(run) as holder:
        assert main(["--grid", "budget", "--dry-run", "--out", str(tmp_path)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert f"{name:34s} running (pid {holder.pid})" in lines
        assert sum(line.endswith(" new") for line in lines) == len(GRIDS["budget"].cells()) - 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # nothing was made
