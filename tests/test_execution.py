"""Where sweeps run (:mod:`execution`): the local pool and a Ray cluster give the same folders,
the same resume and skip semantics, and a killed sweep leaves no run half-written or doubled."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import execution
from grids import sweep as llm_sweep
from simulators import sweep as sim_sweep

REPO = Path(__file__).resolve().parents[1]
TINY_MODEL = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
              "num_key_value_heads": 1, "head_dim": 16}


def test_executor_choice_is_checked():
    with pytest.raises(ValueError, match="unknown executor 'slurm'"):
        execution.make_executor("slurm")
    with pytest.raises(ValueError, match="needs --executor ray"):
        execution.make_executor("local", ray_address="auto")
    with pytest.raises(ValueError, match="jobs must be an integer >= 1, got 0"):
        execution.make_executor("local", jobs=0)
    import argparse

    p = argparse.ArgumentParser()
    execution.add_arguments(p)
    with pytest.raises(ValueError, match="need --executor ray"):
        execution.from_arguments(p.parse_args(["--gpus-per-run", "1"]))
    assert execution.from_arguments(p.parse_args([]), jobs=3).capacity == 3


def test_local_executor_runs_commands_and_calls(tmp_path):
    ex = execution.LocalExecutor(2)
    job = ex.start_command([sys.executable, "-c", "print('hello'); raise SystemExit(3)"], log_path=tmp_path / "a.log")
    assert job.result() == 3 and "hello" in (tmp_path / "a.log").read_text()
    assert ex.submit_call(divmod, 7, 2).result() == (3, 1)
    ex.close()


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray 'cluster' for the module; sweeps reach it by its address, as they would a real one."""
    import ray  # part of .venv (tests/test_environment.py asserts it), so its absence is a failure, not a skip
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _tiny_sim_sweep():
    def run(setting, seeds):
        return pd.DataFrame([{"seed": s, "scheme": "gmc", "value": setting["x"] * 10 + s, "pid": os.getpid()}
                             for s in seeds])

    return sim_sweep.Sweep("tiny", "test sweep", {"full": {"grid": {"x": [1, 2, 3]}, "seeds": [0, 1]},
                                                  "quick": {"grid": {"x": [1]}, "seeds": [0]}}, run, {})


@pytest.mark.slow
def test_simulator_sweep_on_ray_matches_local_and_skips_what_is_done(tmp_path, monkeypatch, ray_cluster, caplog):
    monkeypatch.setattr(sim_sweep, "registry", lambda: {"tiny": _tiny_sim_sweep()})
    local = pd.read_parquet(sim_sweep.run_sweep("tiny", out=tmp_path / "local", progress=False) / "results.parquet")
    with execution.make_executor("ray", ray_address=ray_cluster) as ex:
        out = sim_sweep.run_sweep("tiny", out=tmp_path / "ray", progress=False, executor=ex)
        ran = pd.read_parquet(out / "results.parquet")
        assert set(ran.pid) != {os.getpid()}  # the settings ran in Ray workers
        cols = [c for c in ran.columns if c != "pid"]
        pd.testing.assert_frame_equal(ran[cols], local[cols])
        parts = {p.name: p.stat().st_mtime_ns for p in (out / "parts").iterdir()}
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="simulators"):
            sim_sweep.run_sweep("tiny", out=out, progress=False, executor=ex)
        assert "3 of 3 settings already done" in caplog.text  # the library logs it; a command shows it
        assert {p.name: p.stat().st_mtime_ns for p in (out / "parts").iterdir()} == parts  # nothing rewritten


def test_ray_task_passes_a_stop_on_to_its_command(tmp_path, ray_cluster):
    """terminate() of a command on Ray (Ctrl-C or SIGTERM to the sweep) reaches the process as
    SIGTERM, and the job reports the exit status the process chose."""
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: (print('checkpointed', flush=True), sys.exit(143)))\n"
            "print('running', flush=True)\ntime.sleep(600)\n")
    log = tmp_path / "run.log"
    with execution.make_executor("ray", ray_address=ray_cluster, cpus_per_run=1) as ex:
        assert ex.capacity == 2  # num_cpus=2, one CPU per run
        job = ex.start_command([sys.executable, "-c", code], env=dict(os.environ), log_path=log, cwd=tmp_path)
        deadline = time.monotonic() + 180  # a loaded machine can take a minute to place the task
        while "running" not in (log.read_text().splitlines() if log.is_file() else []) and time.monotonic() < deadline:
            time.sleep(0.1)  # the line the command prints (the log's first line, the command, also says running)
        assert "running" in log.read_text().splitlines(), f"the command did not start within 180 s:\n{log.read_text()}"
        assert job.poll() is None
        t0 = time.monotonic()
        job.terminate()
        rc = job.result()
        assert rc == 143 and time.monotonic() - t0 < 30, (f"exit status {rc!r} ({getattr(job, 'error', None)!r}); "
                                                          f"the run's log:\n{log.read_text()}")
    text = log.read_text()
    assert "checkpointed" in text and text.count("# stop requested: SIGTERM sent") == 1
    assert text.rstrip().endswith("# exit status 143")


DRIVER = """
import sys
from grids import sweep
import execution
spec = sweep.Sweep("ray-test", sys.argv[1], {base}, estimators=("gmc", "is"), delays=(1,), seeds=(0,))
with execution.make_executor("ray", ray_address=sys.argv[2]) as ex:
    o = sweep.run_sweep(spec, sys.argv[1], resume=True, progress=False, executor=ex)
print("RAN", sorted(o.ran), "SKIPPED", sorted(o.skipped), "FAILED", o.failed, "INTERRUPTED", sorted(o.interrupted))
"""


def _runs_of(out: Path) -> list[int]:
    """pids of processes whose command line names a run folder of ``out`` (Linux /proc)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "llm_runs.train" in cmd and str(out) in cmd:
                pids.append(int(proc.name))
    return pids


def _driver(out: Path, address: str, base: dict):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", DRIVER.format(base=repr(base)), str(out), address], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


@pytest.mark.slow
def test_llm_sweep_on_ray_killed_resumes_without_half_written_or_doubled_runs(tmp_path, ray_cluster):
    """The sweep's driver is SIGKILLed while both runs train on Ray workers: no handler runs. Ray
    ends the dead driver's tasks and kills the runs they started (Ray 2.60 reaps a dead worker's
    child processes); each run folder is left resumable, and resuming loses or repeats no update."""
    base = {"model_kwargs": TINY_MODEL, "warm_start_steps": 5, "warm_start_lr": 3e-3, "warm_start_batch": 16,
            "heldout_size": 8, "eval_train_size": 8, "prompts_per_step": 2, "group_size": 2, "steps": 400,
            "eval_every": 0, "checkpoint_every": 0, "cache_dir": str(tmp_path / "cache"), "threads": 1}
    # 400 updates: enough that no run can finish in the seconds Ray takes to reap a dead driver's runs on an
    # idle machine (with 30, both runs sometimes completed first and nothing was left to resume)
    out = tmp_path / "sweep"
    names = {c.name for c in llm_sweep.plan(llm_sweep.Sweep("ray-test", str(out), base, ("gmc", "is"), (1,), (0,)))}
    driver = _driver(out, ray_cluster, base)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until both runs are training (rows in their metrics)
        rows = [len((out / n / "metrics.csv").read_text().splitlines()) if (out / n / "metrics.csv").is_file() else 0
                for n in names]
        if min(rows) > 3:
            break
        assert driver.poll() is None, driver.stdout.read()
        time.sleep(0.2)
    else:
        driver.kill()
        pytest.fail("the runs did not start within 120 s")
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait(timeout=120)
    deadline = time.monotonic() + 60
    while _runs_of(out) and time.monotonic() < deadline:  # a Ray-run child outlives a SIGKILLed driver briefly
        time.sleep(0.2)
    assert not _runs_of(out), "a run kept going after its sweep was killed"

    # every run folder is one planned run, in a state the sweep can continue, never half-written
    assert {p.name for p in out.iterdir() if p.is_dir()} <= names | {"logs"}
    from llm_runs.config import resolve_config

    cells = {c.name: c for c in llm_sweep.plan(llm_sweep.Sweep("ray-test", str(out), base, ("gmc", "is"), (1,), (0,)))}
    states = {n: llm_sweep.run_state(out / n, resolve_config(cells[n].overrides).to_dict()) for n in names
              if (out / n).exists()}
    assert states and set(states.values()) <= {"interrupted", "complete"}, states
    assert "interrupted" in states.values(), states  # the runs stopped with their driver, not ran on orphaned
    # a checkpoint write the kill cut short may remain, only under its temporary name (never a checkpoint)
    assert all(p.parent.name == "checkpoints" and p.name.startswith("step-") for p in out.rglob("*.tmp"))

    spec = llm_sweep.Sweep("ray-test", str(out), base, ("gmc", "is"), (1,), (0,))
    with execution.make_executor("ray", ray_address=ray_cluster) as ex:  # this process, on the same cluster
        o = llm_sweep.run_sweep(spec, out, resume=True, progress=False, executor=ex, log=lambda m: None)
        assert not o.failed and sorted(o.ran + o.skipped) == sorted(names), o
        for n in names:
            assert json.loads((out / n / "summary.json").read_text())
            steps = pd.read_csv(out / n / "metrics.csv")["step"].tolist()
            assert steps == list(range(base["steps"] + 1)), (n, steps[:5], steps[-5:])  # no row lost or repeated
        o = llm_sweep.run_sweep(spec, out, progress=False, executor=ex, log=lambda m: None)
        assert o.ran == [] and sorted(o.skipped) == sorted(names)
    assert not list(out.rglob("*.tmp"))  # resuming removed any cut-short checkpoint write


def test_exit_status_reads_without_reaping_and_matches_popen():
    """A running child reads None; an exited or killed one reads as Popen.returncode would, and stays
    reapable (an interrupted check cannot lose the status)."""
    import subprocess
    for code, expected in (("import sys; sys.exit(143)", 143),
                           ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -9)):
        proc = subprocess.Popen([sys.executable, "-c", code])
        deadline = time.monotonic() + 30
        while (rc := execution.ray_executor._exit_status(proc.pid)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert rc == expected
        assert execution.ray_executor._exit_status(proc.pid) == expected  # not reaped by the first read
        assert proc.wait() == expected
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert execution.ray_executor._exit_status(proc.pid) is None
    finally:
        proc.kill()
        proc.wait()


class _FakeRay:
    """Ray's job surface: a task that ends once it has seen ``ends_after`` cancels (or ``waits`` waits)."""

    class exceptions:
        RayError = RuntimeError

    def __init__(self, ends_after=None, waits=None):
        self.cancels, self.waits, self.ends_after, self.max_waits = 0, 0, ends_after, waits

    def cancel(self, ref, force):
        assert force is False
        self.cancels += 1

    def wait(self, refs, timeout):
        self.waits += 1
        done = (self.ends_after is not None and self.cancels >= self.ends_after) or \
               (self.max_waits is not None and self.waits >= self.max_waits)
        return (refs, []) if done else ([], refs)

    def get(self, ref):
        return 143


def test_a_dropped_cancel_is_repeated_until_the_task_ends(monkeypatch):
    """Ray can drop a cancel that races with the task's start: the job repeats it until the task ends."""
    monkeypatch.setattr(execution.ray_executor, "CANCEL_REPEAT_S", 0.0)
    ray = _FakeRay(ends_after=3)  # the first two cancels are lost
    job = execution.ray_executor._RayJob(ray, "ref")
    job.terminate()
    assert job.result() == 143 and ray.cancels == 3
    quiet = _FakeRay(waits=3)  # no stop requested: never cancelled
    job = execution.ray_executor._RayJob(quiet, "ref")
    assert job.poll() is None and job.result() == 143 and quiet.cancels == 0


def _in_a_fresh_interpreter(code: str) -> str:
    """Run ``code`` in its own interpreter (a simulated SIGINT there cannot reach pytest)."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                         cwd=Path(execution.__file__).resolve().parents[1], timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_ray_task_lets_cancels_in_when_sigint_was_inherited_ignored():
    """Ray's cancel is a simulated SIGINT; a worker started from a shell's background job inherits
    SIGINT ignored, where it would be lost. The task records it, and puts the ignoring back after."""
    code = ("import _thread, signal, time\n"
            "from execution.ray_executor import _StopRequests\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "with _StopRequests() as stop:\n"
            "    _thread.interrupt_main()\n"
            "    time.sleep(0.01)\n"
            "print(stop.wanted, signal.getsignal(signal.SIGINT) is signal.SIG_IGN)\n")
    assert _in_a_fresh_interpreter(code) == "True True"


def test_a_cancel_that_lands_while_the_command_starts_still_stops_it_cleanly(tmp_path):
    """A loaded worker can still be inside Popen when its command already runs, and a cancel sent
    then lands there. The task must not unwind (the run would be killed with its worker, unsaved,
    and the job report -1): the command gets SIGTERM once it exists, and its exit status comes back."""
    log = tmp_path / "run.log"
    child = ("import signal, sys, time\n"
             "signal.signal(signal.SIGTERM, lambda *a: (print('checkpointed', flush=True), sys.exit(143)))\n"
             "print('running', flush=True)\ntime.sleep(600)\n")
    code = ("import _thread, sys, time\nfrom pathlib import Path\n"
            "import execution.ray_executor as rx\n"
            "real = rx._popen\n"
            "def popen_then_cancel(*args, **kwargs):\n"
            "    out = real(*args, **kwargs)\n"
            f"    log = Path({str(log)!r})\n"
            "    while 'running' not in log.read_text().splitlines():  # the command line itself says running\n"
            "        time.sleep(0.05)\n"
            "    _thread.interrupt_main()  # what ray.cancel does, arriving before Popen has returned\n"
            "    return out\n"
            "rx._popen = popen_then_cancel\n"
            f"print(rx._ray_run_command([sys.executable, '-c', {child!r}], None, {str(log)!r}, None))\n")
    assert _in_a_fresh_interpreter(code) == "143"
    text = log.read_text()
    assert "checkpointed" in text and text.count("# stop requested: SIGTERM sent") == 1
    assert text.rstrip().endswith("# exit status 143")


def test_the_simulator_sweep_takes_jobs_and_names_a_bad_value(tmp_path, capsys):
    from simulators import sweep

    name = next(iter(sweep.registry()))
    with pytest.raises(SystemExit):
        sweep.main([name, "--quick", "--jobs", "0", "--out", str(tmp_path / "out")])
    assert "jobs must be an integer >= 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
