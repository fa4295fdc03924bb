"""Faults around the simulator sweep's folder: one-line errors, another table refused, a corrupt part
recomputed, the folder locked, the enumeration guard, and pool workers dying with a killed sweep."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from _run_folders import REPO, _alive, _env, _wait

from schema.runlock import RunLock, RunLocked

# --------------------------------------------------------------------------- simulator sweep


def _sim(*args):
    return subprocess.run([sys.executable, "-m", "simulators.sweep", *args, "--no-progress"], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=300, check=False)


def test_simulator_sweep_errors_are_one_line(tmp_path):
    res = _sim("no_such_sweep")
    assert res.returncode == 2 and "unknown sweep 'no_such_sweep'" in res.stderr and "Traceback" not in res.stderr
    a_file = tmp_path / "file"
    a_file.write_text("x")
    res = _sim("lognormal_mass_bias", "--quick", "--out", str(a_file))
    assert res.returncode == 2 and "is a file" in res.stderr and "Traceback" not in res.stderr
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    res = _sim("lognormal_mass_bias", "--quick", "--out", str(other))
    assert res.returncode == 2 and "holds no simulator sweep" in res.stderr and "Traceback" not in res.stderr
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]


def test_simulator_sweep_refuses_another_table_and_recomputes_a_corrupt_part(tmp_path):
    from simulators.sweep import run_sweep

    out = tmp_path / "lognormal"
    run_sweep("lognormal_mass_bias", quick=True, out=out, progress=False)
    ref = pd.read_parquet(out / "results.parquet")
    res = _sim("bias_vs_G", "--quick", "--out", str(out))  # another sweep's table
    assert res.returncode == 2 and "made with other settings" in res.stderr and "Traceback" not in res.stderr
    part = min((out / "parts").glob("*.parquet"))
    part.write_bytes(part.read_bytes()[:40])
    res = _sim("lognormal_mass_bias", "--quick", "--out", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "unreadable" in res.stderr and part.name in res.stderr
    pd.testing.assert_frame_equal(pd.read_parquet(out / "results.parquet"), ref)
    assert any(".corrupt-" in p.name for p in (out / "parts").iterdir())


def test_simulator_sweep_folder_is_locked(tmp_path):
    from simulators.sweep import run_sweep

    out = tmp_path / "lognormal"
    out.mkdir()
    with RunLock(out), pytest.raises(RunLocked, match=rf"pid {os.getpid()}"):
        run_sweep("lognormal_mass_bias", quick=True, out=out, progress=False)


def test_exact_enumeration_guard_counts_the_prompts():
    """Q = 400 prompts, K = 8, G = 20 ran into a 2.65 GiB MemoryError; now the guard refuses it first."""
    import numpy as np

    from simulators.bandit.env import exact_moments

    Q, K = 400, 8
    rng = np.random.default_rng(0)
    theta = rng.normal(size=(Q, K))
    rewards = rng.uniform(size=(Q, K))
    with pytest.raises(ValueError, match=r"B = 400 instances .* over the limit"):
        exact_moments(theta, theta * 0.9, rewards, 20, 0.2, "gmc")
    single = exact_moments(theta[:1], theta[:1] * 0.9, rewards[:1], 3, 0.2, "gmc")  # small ones still run
    assert np.isfinite(single["bias_norm"])


# --------------------------------------------------------------------------- a killed simulator sweep


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_kill9_of_a_simulator_sweep_kills_its_pool_workers_and_frees_the_folder(tmp_path):
    """The pool workers of ``--jobs 2`` were forked with the sweep's lock open: after ``kill -9`` of the
    sweep they lived on (reparented) and held the lock, so the rerun was refused naming the dead pid."""
    out = tmp_path / "opt"
    sweep = subprocess.Popen([sys.executable, "-m", "simulators.sweep", "async_optimizers", "--out", str(out),
                              "--jobs", "2", "--no-progress"], cwd=REPO, env=_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: len(_children(sweep.pid)) >= 2, 60, "the sweep's two pool workers")
        workers = _children(sweep.pid)
        sweep.kill()
        sweep.wait()
        _wait(lambda: not any(_alive(w) for w in workers), 10, f"the pool workers {workers} to die with the sweep")
    finally:
        for w in _children(sweep.pid):
            os.kill(w, signal.SIGKILL)
    RunLock(out).acquire().release()  # nothing holds the folder: a rerun is not refused
