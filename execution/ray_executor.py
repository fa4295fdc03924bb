"""The Ray executor: each command or call is one Ray task; a cancel reaches a command's process as
SIGTERM (the toolkit's runs checkpoint on it)."""
from __future__ import annotations

import os
import signal
import time

from .base import Executor, Job, _popen


def _ray_run_command(cmd, env, log_path, cwd):
    """The body of a command task on a Ray worker: run ``cmd``; on ``ray.cancel`` pass SIGTERM on
    to it once and wait, so the run checkpoints, and return the exit status it chose. A cancel is
    recorded, never raised (see :class:`_StopRequests`): one that arrives while the command is
    being started (a loaded worker can still be inside ``Popen`` when the command already runs)
    is acted on as soon as the process exists, instead of unwinding the task and leaving the run
    to be killed with its worker."""
    with _StopRequests() as stop:
        proc, fh = _popen(cmd, env, log_path, cwd, die_with_parent=True)
        try:
            stop_sent = False
            while (rc := _exit_status(proc.pid)) is None:
                if stop.wanted and not stop_sent:
                    proc.send_signal(signal.SIGTERM)
                    stop_sent = True
                    fh.write("# stop requested: SIGTERM sent\n")
                    fh.flush()
                time.sleep(0.2)
            fh.write(f"# exit status {rc}\n")
            fh.flush()
            proc.wait()  # reap; the status is already known
            return rc
        finally:
            fh.close()


class _StopRequests:
    """For the length of a task: Ray delivers ``ray.cancel`` as a simulated SIGINT
    (``_thread.interrupt_main``), which Python would raise as KeyboardInterrupt at whatever line the
    task is on (inside ``subprocess.Popen`` included). Here a handler records it instead
    (``wanted``), and the previous handler is put back after. This also lets a cancel in where
    SIGINT was inherited ignored (a worker started from a shell's background job, where POSIX
    ignores SIGINT), where it would be lost. A task that runs outside the main thread cannot take
    a handler and is not reached by Ray's cancel either; there this does nothing."""

    def __init__(self):
        self.wanted = False
        self._installed = False
        self._previous = None

    def _record(self, signum, frame):
        self.wanted = True

    def __enter__(self):
        import threading

        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._record)
            self._installed = True
        return self

    def __exit__(self, *exc):
        if self._installed:  # None: the previous handler was not set from Python, i.e. the default
            signal.signal(signal.SIGINT, signal.SIG_DFL if self._previous is None else self._previous)
        return False


def _exit_status(pid: int) -> int | None:
    """The exit status of child ``pid`` in ``Popen.returncode``'s convention (-N for signal N), or
    None while it runs. The child is not reaped (``WNOWAIT``): a cancel that interrupts this call
    loses nothing. (``Popen.poll`` reaps first and records the status after; an interrupt between
    the two loses the status, and the next poll then reports 0.)"""
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if info is None or info.si_pid == 0:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _ray_call(fn, args):
    return fn(*args)


CANCEL_REPEAT_S = 2.0
"""A stop request is repeated this often until the task ends: Ray can drop a cancel that races
with the task's start, and the task absorbs repeats (it signals its process once)."""


class _RayJob(Job):
    def __init__(self, ray, ref):
        self._ray, self.ref = ray, ref
        self._done = False
        self._stop_at: float | None = None  # when the last cancel was sent

    def _repeat_stop(self) -> None:
        if self._stop_at is not None and time.monotonic() - self._stop_at >= CANCEL_REPEAT_S:
            self._ray.cancel(self.ref, force=False)
            self._stop_at = time.monotonic()

    def poll(self):
        if not self._done:
            ready, _ = self._ray.wait([self.ref], timeout=0)
            self._done = bool(ready)
            if not self._done:
                self._repeat_stop()
        return self.result() if self._done else None

    def result(self):
        while not self._done:
            ready, _ = self._ray.wait([self.ref], timeout=0.5)
            self._done = bool(ready)
            if not self._done:
                self._repeat_stop()
        try:
            return self._ray.get(self.ref)
        except self._ray.exceptions.RayError as exc:  # the worker or its node died: the run did not finish
            self.error = exc
            return -1

    def terminate(self):
        if not self._done:
            self._ray.cancel(self.ref, force=False)  # KeyboardInterrupt in the task: SIGTERM to the run
            self._stop_at = time.monotonic()


class _RayCall(_RayJob):
    def result(self):
        return self._ray.get(self.ref)

    def poll(self):
        if not self._done:
            ready, _ = self._ray.wait([self.ref], timeout=0)
            self._done = bool(ready)
        return True if self._done else None


class RayExecutor(Executor):
    """Each job is one Ray task with ``cpus_per_run`` CPUs and ``gpus_per_run`` GPUs."""

    kind = "ray"

    def __init__(self, address: str | None = None, *, cpus_per_run: float = 1, gpus_per_run: float = 0,
                 max_in_flight: int | None = None, init_kwargs: dict | None = None):
        try:
            import ray
        except ModuleNotFoundError as exc:
            raise ImportError("the ray executor needs Ray: pip install -e '.[ray]'") from exc
        if not cpus_per_run > 0:
            raise ValueError(f"cpus_per_run must be > 0, got {cpus_per_run!r}")
        if gpus_per_run < 0:
            raise ValueError(f"gpus_per_run must be >= 0, got {gpus_per_run!r}")
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight!r}")
        self._ray = ray
        self._started_here = False
        if not ray.is_initialized():
            kwargs = {"include_dashboard": False, "log_to_driver": False, **(init_kwargs or {})}
            if address is not None:
                kwargs["address"] = address
            ray.init(**kwargs)
            self._started_here = True
        self.cpus_per_run, self.gpus_per_run = cpus_per_run, gpus_per_run
        self._max_in_flight = max_in_flight
        opts = {"num_cpus": cpus_per_run, "num_gpus": gpus_per_run, "max_retries": 0}
        self._command = ray.remote(_ray_run_command).options(**opts)
        self._call = ray.remote(_ray_call).options(**opts)

    @property
    def capacity(self) -> int:
        if self._max_in_flight is not None:
            return self._max_in_flight
        res = self._ray.cluster_resources()
        slots = int(res.get("CPU", 1) // self.cpus_per_run)
        if self.gpus_per_run:
            slots = min(slots, int(res.get("GPU", 0) // self.gpus_per_run))
        if slots < 1:
            raise ValueError(f"the Ray cluster ({res}) has no room for one run of {self.cpus_per_run} CPUs and "
                             f"{self.gpus_per_run} GPUs")
        return slots

    def start_command(self, cmd, *, env=None, log_path, cwd=None) -> Job:
        return _RayJob(self._ray, self._command.remote(list(map(str, cmd)), env, str(log_path),
                                                         None if cwd is None else str(cwd)))

    def submit_call(self, fn, *args) -> Job:
        return _RayCall(self._ray, self._call.remote(fn, args))

    def close(self):
        if self._started_here and self._ray.is_initialized():
            self._ray.shutdown()
