"""What every executor is: a :class:`Job` (one command or call) and an :class:`Executor` (where
jobs run), and how a command's process is started so that it dies with whatever started it."""
from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1


def _signal_on_parent_death(sig: int, parent: int) -> None:
    """Send ``sig`` to this process when ``parent`` dies, however it dies (SIGKILL included): Linux's
    PR_SET_PDEATHSIG, elsewhere a watchdog thread (which needs a running interpreter)."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), sig)
        return
    import threading

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), sig)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def _die_with_parent(parent: int) -> None:  # pragma: no cover - runs in the child between fork and exec
    """A new session, and SIGTERM this process when its parent dies (Linux, PR_SET_PDEATHSIG), however
    the parent dies (SIGKILL included): no run outlives the sweep or Ray worker that started it, and
    SIGTERM makes the trainer checkpoint first, so the run folder is left resumable. (Ray 2.60 itself
    kills a dead worker's child processes, SIGKILL, through the raylet's subreaper, and usually comes
    first; this covers clusters where that is switched off. Elsewhere than Linux the trainer's own
    watchdog, ``GMC_PARENT_PID``, does it.)"""
    os.setsid()
    if sys.platform.startswith("linux"):
        _signal_on_parent_death(signal.SIGTERM, parent)


def die_with_parent_worker(parent: int) -> None:  # pragma: no cover - runs in each pool worker
    """A process pool's initializer: the worker is killed (SIGKILL: it holds nothing to save) when the
    process that made the pool dies, so no worker outlives a killed sweep."""
    _signal_on_parent_death(signal.SIGKILL, parent)


def _popen(cmd: Sequence[str], env: dict | None, log_path: str | os.PathLike, cwd: str | None,
           die_with_parent: bool) -> tuple[subprocess.Popen, Any]:
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(log_path, "a")  # noqa: SIM115 (the job owns it: closed when the command ends)
    fh.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(map(str, cmd))}\n")
    fh.flush()
    kwargs: dict[str, Any] = ({"preexec_fn": functools.partial(_die_with_parent, os.getpid())} if die_with_parent
                              else {"start_new_session": True})
    proc = subprocess.Popen(list(map(str, cmd)), env=env, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, **kwargs)
    return proc, fh


class Job:
    """One command or call handed to an executor."""

    def poll(self) -> Any | None:
        """None while it runs; then the exit status (a command) or True (a call: see :meth:`result`)."""
        raise NotImplementedError

    def result(self) -> Any:
        """A call's return value (raises what the call raised); a command's exit status. Blocks."""
        raise NotImplementedError

    def terminate(self) -> None:
        """Ask a running command to stop (SIGTERM reaches the process); a call not yet started is dropped."""
        raise NotImplementedError


class Executor:
    """Where runs execute; see the module docstring."""

    kind = ""

    @property
    def capacity(self) -> int:
        """How many jobs the sweep keeps in flight at once."""
        raise NotImplementedError

    def start_command(self, cmd: Sequence[str], *, env: dict | None = None, log_path: str | os.PathLike,
                      cwd: str | os.PathLike | None = None) -> Job:
        raise NotImplementedError

    def submit_call(self, fn: Callable, *args: Any) -> Job:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
