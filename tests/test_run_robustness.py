"""Faults and concurrency around run folders: one process per folder, children die with their
sweep, corrupt checkpoints, failures before step 0, and the simulator sweep's errors.

Every trainer here is a 1-layer, hidden-32 Qwen3 on 2 prompts x G = 2 (about 0.02 s per update).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from llm_runs.config import resolve_config
from llm_runs.train import main
from llm_runs.trainer import Trainer
from schema.runlock import LOCK_NAME, RunLock, RunLocked, read_holder

REPO = Path(__file__).resolve().parents[1]
MODEL = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
         "num_key_value_heads": 1}
SMALL = {"model_kwargs": MODEL, "warm_start_steps": 5, "heldout_size": 8, "eval_train_size": 8, "prompts_per_step": 2,
         "group_size": 2, "eval_every": 0, "threads": 1}


def _flags(cache, **kw) -> list[str]:
    values = {**SMALL, "cache_dir": str(cache), **kw}
    return [f"--{k.replace('_', '-')}={json.dumps(v) if isinstance(v, dict) else v}" for k, v in values.items()]


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "PYTHONPATH": str(REPO)}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
        return "\nState:\tZ" not in state  # a zombie has exited
    except FileNotFoundError:
        return False
    except OSError:  # pragma: no cover - no /proc
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _wait(cond, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _rows(out: Path) -> int:
    p = out / "metrics.csv"
    return max(0, len(p.read_text().splitlines()) - 1) if p.is_file() else 0


def _steps_once(out: Path, n: int | None = None) -> list[int]:
    steps = pd.read_csv(out / "metrics.csv")["step"].tolist()
    assert steps == sorted(set(steps)), f"steps repeated or out of order: {steps}"
    assert steps == list(range(len(steps)))
    if n is not None:
        assert len(steps) == n
    return steps


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("robust-cache")


# --------------------------------------------------------------------------- the lock itself


def test_lock_is_exclusive_names_the_holder_and_is_released(tmp_path):
    with RunLock(tmp_path):
        assert read_holder(tmp_path)["pid"] == os.getpid()
        with pytest.raises(RunLocked, match=rf"in use by another process: pid {os.getpid()}"):
            RunLock(tmp_path).acquire()  # a second open file description conflicts, even in one process
    RunLock(tmp_path).acquire().release()  # free again
    assert (tmp_path / LOCK_NAME).is_file()


def test_lock_of_a_sigkilled_holder_is_released_by_the_os(tmp_path):
    code = (f"import sys, time; sys.path.insert(0, {str(REPO)!r}); from schema.runlock import RunLock; "
            f"RunLock({str(tmp_path)!r}).acquire(); print('locked', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
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
    code = (f"import sys, time; sys.path.insert(0, {str(REPO)!r}); from schema.runlock import RunLock; "
            f"RunLock({str(run)!r}).acquire(); print('locked', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunLocked, match=rf"pid {holder.pid}"):
            run_state(run, {})
    finally:
        holder.kill()
        holder.wait()
    assert run_state(run, {}) == "new"  # only the (free) lock file: nothing of a run


def test_two_sweeps_on_one_folder_the_second_is_refused(cache, tmp_path):
    """The sweep holds its folder's lock: a second sweep on the same --out is refused naming the
    first one's pid (before, each started trainers and reported the other's runs FAILED)."""
    from grids.sweep import run_sweep

    out = tmp_path / "sweep"
    out.mkdir()
    code = (f"import sys, time; sys.path.insert(0, {str(REPO)!r}); from schema.runlock import RunLock; "
            f"RunLock({str(out)!r}).acquire(); print('locked', flush=True); time.sleep(60)")
    first = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "locked"
        with pytest.raises(RunLocked, match=rf"pid {first.pid}"):
            run_sweep(_tiny_sweep(out, cache), out, jobs=1, progress=False, log=lambda m: None)
        assert [p.name for p in out.iterdir()] == [LOCK_NAME]  # nothing started, nothing written
    finally:
        first.kill()
        first.wait()


# --------------------------------------------------------------------------- corrupt checkpoints


def _interrupted_run(cache, out: Path, keep: int, monkeypatch) -> Trainer:
    """A run stopped (KeyboardInterrupt) during update 9, with checkpoints after updates 4 and 8 (keep=2)."""
    cfg = resolve_config({**SMALL, "cache_dir": str(cache), "steps": 12, "checkpoint_every": 4,
                          "keep_checkpoints": keep})
    trainer = Trainer(cfg, out, progress=False, log=lambda m: None)
    real = Trainer.train_step

    def stop_at_9(self, step):
        if step == 9:
            raise KeyboardInterrupt
        return real(self, step)

    monkeypatch.setattr(Trainer, "train_step", stop_at_9)
    with pytest.raises(KeyboardInterrupt):
        trainer.run()
    monkeypatch.setattr(Trainer, "train_step", real)
    return trainer


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("victim", ["model.safetensors", "trainer_state.pt"])
def test_corrupt_latest_checkpoint_falls_back_to_the_newest_intact_one(cache, tmp_path, monkeypatch, victim):
    out = tmp_path / "run"
    _interrupted_run(cache, out, keep=2, monkeypatch=monkeypatch)
    ckpts = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert ckpts == ["step-000004", "step-000008"]
    _truncate(out / "checkpoints" / "step-000008" / victim)
    said = []
    result = Trainer(resolve_config({**SMALL, "cache_dir": str(cache), "steps": 12, "checkpoint_every": 4,
                                     "keep_checkpoints": 2}), out, resume=True, progress=False, log=said.append).run()
    assert result.status == "complete"
    text = "\n".join(said)
    assert victim in text and "step-000004" in text and "newest intact checkpoint" in text
    assert any(p.name.startswith("step-000008.corrupt-") for p in (out / "checkpoints").iterdir())  # kept, aside
    _steps_once(out, 13)


def test_corrupt_only_checkpoint_is_refused_naming_the_file(cache, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    _interrupted_run(cache, out, keep=1, monkeypatch=monkeypatch)
    _truncate(out / "checkpoints" / "step-000008" / "model.safetensors")
    assert main(["--out", str(out), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "no intact checkpoint" in err and "model.safetensors" in err and "step-000008" in err
    assert "Traceback" not in err


def test_checkpoint_is_written_under_a_temporary_name_then_renamed(cache, tmp_path, monkeypatch):
    """A checkpoint is written under step-N.tmp: a write that fails removes it and names the fault; one
    cut short by a crash (the process killed mid-write) leaves step-N.tmp, never a checkpoint, and resume
    removes it."""
    out = tmp_path / "run"
    import llm_runs.checkpoints as ckpt_mod
    import llm_runs.trainer as train_mod

    def crash(*a, **k):
        raise OSError("disk full")

    trainer = _interrupted_run(cache, out, keep=2, monkeypatch=monkeypatch)
    monkeypatch.setattr(train_mod.torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        trainer.save_checkpoint(9)
    monkeypatch.undo()
    assert not (out / "checkpoints" / "step-000009.tmp").exists()
    (out / "checkpoints" / "step-000009.tmp").mkdir()  # what a process killed mid-write leaves
    assert [p.name for p in ckpt_mod.checkpoint_dirs(out)] == ["step-000004", "step-000008"]
    # resuming removes the cut-short write (it was never a checkpoint) and continues from step 8
    (out / "checkpoints" / "step-000011.tmp").mkdir()  # a cut-short write of a step the resumed run never saves
    said = []
    result = Trainer(resolve_config({**SMALL, "cache_dir": str(cache), "steps": 12, "checkpoint_every": 4,
                                     "keep_checkpoints": 2}), out, resume=True, progress=False, log=said.append).run()
    assert result.status == "complete" and "resuming" in "\n".join(said) and "step-000008" in "\n".join(said)
    assert "step-000011.tmp" in "\n".join(said) and not list(out.rglob("*.tmp"))
    _steps_once(out, 13)


# --------------------------------------------------------------------------- failures before step 0


def _unwritable_outs(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    outs = [a_file / "run"]
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        outs.append(ro / "run")
    elif Path("/sys").is_dir():
        outs.append(Path("/sys/gmc-robustness-test/run"))  # root cannot mkdir there (EPERM)
    return outs


def test_unwritable_out_is_a_one_line_error(cache, tmp_path, capsys):
    for out in _unwritable_outs(tmp_path):
        assert main(["--out", str(out), "--no-progress", *_flags(cache, steps=2)]) == 2, out
        err = capsys.readouterr().err
        assert err.startswith("error: ") and str(out) in err and "Traceback" not in err
        assert not out.exists()


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_missing_device_is_refused_before_the_folder_is_made(cache, tmp_path, capsys, device):
    available = torch.cuda.is_available() if device == "cuda" else torch.backends.mps.is_available()
    if available:
        pytest.skip(f"this machine has a {device} device")
    out = tmp_path / "run"
    assert main(["--out", str(out), "--no-progress", *_flags(cache, steps=2, device=device)]) == 2
    err = capsys.readouterr().err
    assert f"device {device!r}" in err and "--device cpu" in err
    assert not out.exists()


@pytest.mark.parametrize("kwargs,match", [
    ({"num_key_value_heads": 3}, "rejected by the Qwen3 model"),
    ({"head_dim": 7}, "rejected by Qwen3Config"),
    ({"hidden_size": -1}, "rejected by the Qwen3 model"),
    ({"hidden_act": "nope"}, "rejected by the Qwen3 model"),
])
def test_model_kwargs_the_model_rejects_are_refused_before_the_folder_is_made(cache, tmp_path, capsys, kwargs, match):
    out = tmp_path / "run"
    flags = _flags(cache, steps=2, model_kwargs={**MODEL, **kwargs})
    assert main(["--out", str(out), "--no-progress", *flags]) == 2
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    assert main(["--out", str(out), "--no-progress", *_flags(cache, steps=2)]) == 0  # a retry is not blocked


def test_failure_before_step_0_leaves_nothing_behind(cache, tmp_path, monkeypatch):
    import llm_runs.trainer as train_mod

    def boom(*a, **k):
        raise RuntimeError("warm start failed")

    monkeypatch.setattr(train_mod, "get_warm_start", boom)
    for out in (tmp_path / "new" / "deeper" / "run", tmp_path / "empty"):
        if out.name == "empty":
            out.mkdir()
        cfg = resolve_config({**SMALL, "cache_dir": str(cache), "steps": 2})
        with pytest.raises(RuntimeError, match="warm start failed"):
            Trainer(cfg, out, progress=False, log=lambda m: None).run()
        if out.name == "empty":  # a folder the user made stays, empty
            assert out.is_dir() and list(out.iterdir()) == []
        else:
            assert not (tmp_path / "new").exists()


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


@pytest.mark.parametrize("torn_step, resumed_from", [(5, "step-000004"), (2, None)])
def test_a_torn_metrics_row_before_the_last_checkpoint_is_rewritten(cache, tmp_path, monkeypatch, torn_step,
                                                                    resumed_from):
    """A row cut in half (a crash mid-write, the row flushed but not on disk) that lies before the last
    checkpoint: resume takes the newest checkpoint at or before it (or the start), moves the newer ones
    aside, rewrites the rows from there, says so, and the finished run equals one never interrupted."""
    out = tmp_path / "run"
    _interrupted_run(cache, out, keep=2, monkeypatch=monkeypatch)
    path = out / "metrics.csv"
    lines = path.read_text().splitlines(keepends=True)
    whole = lines[1 + torn_step]
    lines[1 + torn_step] = whole[: len(whole) // 2] + "\n"
    path.write_text("".join(lines))
    said = []
    cfg = resolve_config({**SMALL, "cache_dir": str(cache), "steps": 12, "checkpoint_every": 4, "keep_checkpoints": 2})
    result = Trainer(cfg, out, resume=True, progress=False, log=said.append).run()
    assert result.status == "complete"
    text = "\n".join(said)
    assert f"the row of update {torn_step} is torn" in text and "rewriting the rows" in text
    assert "step-000008.superseded-" in text
    if resumed_from:
        assert f"resuming {out} from {resumed_from}" in text
    _steps_once(out, 13)
    clean = tmp_path / "clean"
    Trainer(cfg, clean, progress=False, log=lambda m: None).run()
    a, b = pd.read_csv(path), pd.read_csv(clean / "metrics.csv")
    cols = [c for c in a.columns if not c.startswith("perf/")]
    pd.testing.assert_frame_equal(a[cols], b[cols])


def test_a_dry_run_reports_a_held_run_as_running_and_runs_nothing(tmp_path, capsys):
    """``--dry-run`` over a grid whose run a live trainer holds (a grid being run now) says so and exits 0: it
    only reads, so the lock that refuses a second trainer does not refuse it."""
    from studies.grids import GRIDS
    from studies.run import main

    name = GRIDS["budget"].cells()[0].name
    run = tmp_path / name
    run.mkdir()
    code = (f"import sys, time; sys.path.insert(0, {str(REPO)!r}); from schema.runlock import RunLock; "
            f"RunLock({str(run)!r}).acquire(); print('locked', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert main(["--grid", "budget", "--dry-run", "--out", str(tmp_path)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert f"{name:34s} running (pid {holder.pid})" in lines
        assert sum(line.endswith(" new") for line in lines) == len(GRIDS["budget"].cells()) - 1
    finally:
        holder.kill()
        holder.wait()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # nothing was made
