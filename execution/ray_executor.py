"""The Ray executor: each command or call is one Ray task; a cancel reaches a command's process as
SIGTERM (the toolkit's runs checkpoint on it)."""
from __future__ import annotations

import os
import signal
import time

from .base import Executor, Job, _popen


def _ray_run_command(cmd, env, log_path, cwd):
    """The body of a command task on a Ray worker: run ``cmd``; on ``ray.cancel`` (a
    KeyboardInterrupt here, possibly more than one: the driver repeats the cancel until the task
    ends) pass SIGTERM on to it once and wait, so the run checkpoints. Every interrupt is absorbed,
    wherever it lands, so the exit status always reaches the driver."""
    _let_cancel_in()
    proc, fh = _popen(cmd, env, log_path, cwd, die_with_parent=True)
    stop_wanted = stop_sent = False
    rc = None
    try:
        while rc is None:
            try:  # short sleeps: Ray delivers the cancel between Python bytecodes, not inside a blocking wait
                if stop_wanted and not stop_sent and _exit_status(proc.pid) is None:
                    proc.send_signal(signal.SIGTERM)
                    stop_sent = True
                    fh.write("# stop requested: SIGTERM sent\n")
                    fh.flush()
                rc = _exit_status(proc.pid)
                if rc is None:
                    time.sleep(0.2)
            except KeyboardInterrupt:
                stop_wanted = True  # acted on at the top of the loop
        while True:
            try:
                fh.write(f"# exit status {rc}\n")
                fh.flush()
                proc.wait()  # reap; the status is already known
                return rc
            except KeyboardInterrupt:
                continue
    finally:
        fh.close()


def _let_cancel_in() -> None:
    """Ray delivers a cancel as a simulated SIGINT (``_thread.interrupt_main``), which does nothing
    when SIGINT is ignored. A worker inherits an ignored SIGINT from whatever started the cluster
    (a sweep started with ``&`` from a script ignores SIGINT, as POSIX asks of a shell's background
    commands), and every stop would then be lost. Restore Python's own handler in that case."""
    import threading

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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
