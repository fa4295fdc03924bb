"""llm_runs async mode: bounded staleness with counted drops, exact reduction to the controlled
mode at max_staleness 0, and a killed / hung rollout worker (clear error, checkpoint, resume).

Same tiny 2-layer Qwen3 and 8 prompts x G = 4 as ``test_llm_core``; every async run spawns a
worker process (about 5 s of imports each).
"""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import _metrics_without_perf, pd_read, tiny

from llm_runs.async_rollout import AsyncRollout
from llm_runs.checkpoints import latest_checkpoint
from llm_runs.delay import RolloutSourceError, prompts_at
from llm_runs.presets import load_pretrained
from llm_runs.tasks import build_task
from llm_runs.trainer import Trainer
from llm_runs.update import flat_params
from llm_runs.warmstart import default_max_new_tokens, get_warm_start

STEPS = 12


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("warmstart-cache")


@pytest.fixture(scope="module")
def controlled(cache, tmp_path_factory):
    """The controlled run at delay 0 that async at max_staleness 0 must reproduce."""
    out = tmp_path_factory.mktemp("controlled") / "run"
    trainer = Trainer(tiny(cache, mode="controlled", delay=0, steps=STEPS, eval_every=5, seed=3), out, progress=False,
                      log=lambda m: None)
    trainer.run()
    return out, flat_params(trainer.policy)


def async_config(cache, **kw):
    return tiny(cache, **{"mode": "async", "max_staleness": 0, "steps": STEPS, "eval_every": 5, "seed": 3,
                          "checkpoint_every": 4, **kw})


def _wait_for(cond, what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


# --------------------------------------------------------------------------- staleness and drops


def test_stale_batches_are_dropped_counted_and_never_used(cache):
    """Driving the source by hand makes a drop certain. d = 2, queue 2: while the learner stands
    after update 0, the worker (d batches ahead at most) makes batches 1, 2, 3 with theta_0
    (1, 2 queued, 3 blocked). Updates 1 and 2 use batches 1 and 2 (staleness 1, 2); update 3
    must drop batch 3 (staleness 3 > d) and uses batch 4, started only after update 1 took a
    batch, so by theta_1 or later."""
    d, q = 2, 2
    config = tiny(cache, mode="async", max_staleness=d, queue_size=q)
    task = build_task(config)
    model, tok = load_pretrained(get_warm_start(config, task, log=lambda m: None).path)
    source = AsyncRollout(config, task, tok, default_max_new_tokens(config, task))
    G, BG = config.group_size, config.prompts_per_step * config.group_size
    index, dropped = [], []
    try:
        for step in range(7):
            batch = source.batch(step, model)  # same weights, new version number: staleness is what is tested
            index.append(source.next_index - 1)
            dropped.append(source.step_metrics()["stale/dropped"])
            staleness = step - batch.versions
            assert int(staleness.max()) <= d and int(staleness.min()) >= 0
            assert batch.problem_index[::G].tolist() == prompts_at(config, index[-1], len(task.train))
            if step == 0:  # let the worker fill the queue and block on batch 3 (its file written, the put waiting)
                _wait_for(lambda: source._ch.queue.qsize() == q, "a full queue")
                third = Path(source._ch.folder) / "batch-00000003.npz"
                _wait_for(third.exists, "the worker to make batch 3")
        pid = source.worker_pid
    finally:
        source.close()
    assert not _pid_alive(pid)
    assert index[:4] == [0, 1, 2, 4] and dropped[:4] == [0, 0, 0, BG]
    assert source.dropped_total == sum(dropped) == (source.next_index - len(index)) * BG  # taken = used + dropped


def _pid_alive(pid) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is dead
        return fh.read().split(")")[-1].split()[0] != "Z"


def test_trainer_records_bounded_staleness_and_cumulative_drops(cache, tmp_path):
    d = 1
    config = tiny(cache, mode="async", max_staleness=d, queue_size=4, steps=10, eval_every=1, seed=1)
    Trainer(config, tmp_path / "run", progress=False, log=lambda m: None).run()
    df = pd_read(tmp_path / "run")
    rows = df[df.step < config.steps]
    assert len(rows) == config.steps and list(df.step) == list(range(config.steps + 1))
    assert (rows["stale/staleness_max"] <= d).all() and (rows["stale/staleness_mean"] >= 0).all()
    assert (rows["stale/staleness_max"] > 0).any()  # the worker ran ahead
    BG = config.prompts_per_step * config.group_size
    assert (rows["stale/dropped"] % BG == 0).all()
    np.testing.assert_array_equal(rows["stale/dropped_total"], rows["stale/dropped"].cumsum())


# --------------------------------------------------------------------------- max_staleness 0


def test_max_staleness_zero_reproduces_controlled_delay_zero(cache, tmp_path, controlled):
    out_c, weights_c = controlled
    trainer = Trainer(async_config(cache), tmp_path / "async", progress=False, log=lambda m: None)
    trainer.run()
    a, c = _metrics_without_perf(tmp_path / "async"), _metrics_without_perf(out_c)
    assert len(a) == STEPS + 2 and a == c
    df = pd_read(tmp_path / "async")
    assert (df["stale/staleness_max"].dropna() == 0).all() and (df["stale/dropped_total"].dropna() == 0).all()
    np.testing.assert_array_equal(flat_params(trainer.policy), weights_c)
    assert np.abs(weights_c - flat_params(load_pretrained(
        get_warm_start(async_config(cache), build_task(async_config(cache)), log=lambda m: None).path)[0])).max() > 1e-4


# --------------------------------------------------------------------------- faults


def _run_and_break(config, out, resume: bool, after_rows: int, sig: int) -> tuple[str, int]:
    """Run (or resume) until ``after_rows`` metrics rows exist, send ``sig`` to the rollout worker;
    return the error message and how many updates the learner finished after the signal (progress,
    not wall-clock time: at most the update in progress and the one batch the worker may have queued)."""
    trainer = Trainer(config, out, resume=resume, progress=False, log=lambda m: None)
    sent = {}
    metrics = Path(out) / "metrics.csv"

    def rows() -> int:
        return len(metrics.read_text().splitlines()) - 1 if metrics.exists() else 0

    def watcher():
        _wait_for(lambda: rows() >= after_rows and getattr(getattr(trainer, "source", None), "worker_pid", None),
                  "rows")
        sent["pid"], sent["rows"] = trainer.source.worker_pid, rows()
        os.kill(sent["pid"], sig)

    thread = threading.Thread(target=watcher, daemon=True)
    thread.start()
    with pytest.raises(RolloutSourceError) as info:
        trainer.run()
    thread.join(5)
    assert not _pid_alive(sent["pid"])  # a stopped (hung) worker is killed on the way out
    return str(info.value), rows() - sent["rows"]


def test_killed_or_hung_worker_stops_with_a_checkpoint_and_resume_completes(cache, tmp_path, controlled):
    config = async_config(cache, worker_timeout_s=60.0)  # it bounds the worker's start (spawn, imports) too
    out = tmp_path / "run"
    msg, after = _run_and_break(config, out, resume=False, after_rows=3, sig=signal.SIGKILL)
    assert "rollout worker" in msg and "died (exit code -9)" in msg and "--resume" in msg, msg
    assert after <= 2
    first = latest_checkpoint(out)
    stopped_at = int(first.name[5:])
    assert 3 <= stopped_at < STEPS and f"checkpoint saved at update {stopped_at}" in msg
    assert len(pd_read(out)) == stopped_at  # every finished update kept its row, nothing after it
    msg, after = _run_and_break(config, out, resume=True, after_rows=stopped_at + 2, sig=signal.SIGSTOP)
    assert "did nothing for 60 s (worker_timeout_s)" in msg and "hung" in msg, msg
    assert after <= 2
    assert int(latest_checkpoint(out).name[5:]) > stopped_at
    Trainer(config, out, resume=True, progress=False, log=lambda m: None).run()
    steps = [int(r[0]) for r in _metrics_without_perf(out)[1:]]
    assert steps == list(range(STEPS + 1))  # no row lost or duplicated
    assert _metrics_without_perf(out) == _metrics_without_perf(controlled[0])  # and exactly the delay-0 run


# --------------------------------------------------------------------------- start-up and leftovers


def test_a_worker_that_never_gets_ready_is_bounded_by_worker_timeout_s(cache):
    """The wait before the worker reports ready follows worker_timeout_s (no fixed 600 s)."""
    from types import SimpleNamespace

    source = AsyncRollout(async_config(cache, worker_timeout_s=3.0), None, None, 4)
    source._proc = SimpleNamespace(pid=12345, is_alive=lambda: True, exitcode=None)
    source._ch = SimpleNamespace(ready=SimpleNamespace(value=0), folder="/nonexistent")
    source._started_at = time.monotonic() - 2.0
    source._check_worker(0, time.monotonic(), "to deliver its batch")  # 2 s < 3 s: still waiting
    source._started_at = time.monotonic() - 3.5
    with pytest.raises(RolloutSourceError, match=r"did not start within 3 s \(worker_timeout_s\)"):
        source._check_worker(0, time.monotonic(), "to deliver its batch")


def test_batch_folders_of_a_killed_learner_are_removed_on_the_next_start(tmp_path):
    import subprocess
    import sys

    from llm_runs.async_rollout import FOLDER_PREFIX, remove_orphan_folders

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = tmp_path / f"{FOLDER_PREFIX}{dead.pid}-abc"
    live = tmp_path / f"{FOLDER_PREFIX}{os.getpid()}-def"
    unknown = tmp_path / f"{FOLDER_PREFIX}xyz"  # not this naming: never touched
    for folder in (orphan, live, unknown):
        folder.mkdir()
        (folder / "batch-000001.pt").write_bytes(b"x")
    assert remove_orphan_folders(str(tmp_path)) == [orphan]
    assert not orphan.exists() and live.exists() and unknown.exists()
