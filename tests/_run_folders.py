"""What the run-folder fault tests share (tests/test_run_robustness*.py): the checkout's root, the small
trainer's settings and their command-line flags, a subprocess environment, waiting on a process or a
condition, the check that metrics.csv holds each step once, another process holding a folder's run lock
(:func:`_lock_held`), and the ``cache`` fixture (a module's warm-start
cache; import ``cache_fixture`` to use it).

Every trainer here is a 1-layer, hidden-32 Qwen3 on 2 prompts x G = 2 (about 0.02 s per update).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest

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


def _steps_once(out: Path, n: int | None = None) -> list[int]:
    steps = pd.read_csv(out / "metrics.csv")["step"].tolist()
    assert steps == sorted(set(steps)), f"steps repeated or out of order: {steps}"
    assert steps == list(range(len(steps)))
    if n is not None:
        assert len(steps) == n
    return steps


@pytest.fixture(scope="module", name="cache")
def cache_fixture(tmp_path_factory):
    return tmp_path_factory.mktemp("robust-cache")


@contextmanager
def _lock_held(folder: Path):
    """Another Python process holding ``folder``'s run lock (it sleeps 60 s): yields its ``Popen`` (its pid is
    the one a refusal must name) once it says it holds the lock; it is killed on leaving."""
    code = (f"import sys, time; sys.path.insert(0, {str(REPO)!r}); from schema.runlock import RunLock; "
            f"RunLock({str(folder)!r}).acquire(); print('locked', flush=True); time.sleep(60)")
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout.readline().strip() == "locked"
            yield proc
        finally:
            proc.kill()
