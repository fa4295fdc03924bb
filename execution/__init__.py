"""Where the runs of a sweep execute: a local process pool or a Ray cluster.

Both sweeps (``python -m llm_runs.sweep``, ``python -m simulators.sweep``) hand their runs to
an executor made by :func:`make_executor` and keep every decision about *what* to run (the
plan, resume and skip, the folder layout, atomic writes) to themselves; the executor only
decides *where*. This package imports nothing from the toolkit and no torch, so it sits
below every producer.

Two kinds of work:

* :meth:`Executor.start_command`: a subprocess (a training run) with its environment, its
  working directory and a log file; :meth:`Job.terminate` asks it to stop with SIGTERM
  (the toolkit's runs checkpoint on it) and :meth:`Job.poll` gives its exit status.
* :meth:`Executor.submit_call`: a picklable module-level function called with arguments
  (one simulator setting); :meth:`Job.result` gives what it returned.

``local`` (:class:`LocalExecutor`): commands are child processes of the sweep, at most
``jobs`` at once; calls run in the sweep's own process (``jobs == 1``) or in a pool of
``jobs`` processes. ``ray`` (:class:`RayExecutor`): each command or call is one Ray task
asking for ``cpus_per_run`` CPUs and ``gpus_per_run`` GPUs, on the cluster at ``address``
(``None``: a local Ray started for this sweep; ``"auto"``: the cluster this machine belongs
to; ``"ray://host:10001"``: a remote cluster through Ray Client). A command's subprocess runs
on whichever node the task lands on, so ``cwd``, the log file and the run folder must be on
a file system every node sees.
"""
from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

EXECUTORS = ("local", "ray")
"""Valid values of ``--executor``."""

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int | None = None) -> None:  # pragma: no cover - runs in the child between fork and exec
    """A new session, and SIGTERM this process when its parent dies (Linux, PR_SET_PDEATHSIG), however
    the parent dies (SIGKILL included): no run outlives the sweep or Ray worker that started it, and
    SIGTERM makes the trainer checkpoint first, so the run folder is left resumable. (Ray 2.60 itself
    kills a dead worker's child processes, SIGKILL, through the raylet's subreaper, and usually comes
    first; this covers clusters where that is switched off.)"""
    os.setsid()
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if parent is not None and os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)


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


# --------------------------------------------------------------------------- local


class _LocalCommand(Job):
    def __init__(self, proc: subprocess.Popen, fh):
        self.proc, self._fh = proc, fh

    def poll(self):
        rc = self.proc.poll()
        if rc is not None and not self._fh.closed:
            self._fh.close()
        return rc

    def result(self):
        self.proc.wait()
        return self.poll()

    def terminate(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)


class _LocalCall(Job):
    def __init__(self, future: Future):
        self.future = future

    def poll(self):
        return True if self.future.done() else None

    def result(self):
        return self.future.result()

    def terminate(self):
        self.future.cancel()


class LocalExecutor(Executor):
    """Child processes of the sweep, at most ``jobs`` at once (the default executor)."""

    kind = "local"

    def __init__(self, jobs: int = 1):
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
            raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
        self.jobs = jobs
        self._pool: ProcessPoolExecutor | None = None

    @property
    def capacity(self) -> int:
        return self.jobs

    def start_command(self, cmd, *, env=None, log_path, cwd=None) -> Job:
        # its own session (Ctrl-C reaches the sweep, which stops runs cleanly), and it dies with the sweep
        proc, fh = _popen(cmd, env, log_path, None if cwd is None else str(cwd), die_with_parent=True)
        return _LocalCommand(proc, fh)

    def submit_call(self, fn, *args) -> Job:
        future: Future = Future()
        if self.jobs == 1:  # in this process, as a plain call
            try:
                future.set_result(fn(*args))
            except BaseException as exc:
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                future.set_exception(exc)
            return _LocalCall(future)
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.jobs)
        return _LocalCall(self._pool.submit(fn, *args))

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


# --------------------------------------------------------------------------- ray


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


def make_executor(kind: str = "local", *, jobs: int = 1, ray_address: str | None = None, cpus_per_run: float = 1,
                  gpus_per_run: float = 0, max_in_flight: int | None = None) -> Executor:
    """The executor ``kind`` (``local`` or ``ray``; see the module docstring)."""
    if kind == "local":
        if ray_address is not None:
            raise ValueError(f"--ray-address {ray_address!r} needs --executor ray")
        return LocalExecutor(jobs)
    if kind == "ray":
        return RayExecutor(ray_address, cpus_per_run=cpus_per_run, gpus_per_run=gpus_per_run,
                           max_in_flight=max_in_flight)
    raise ValueError(f"unknown executor {kind!r}; valid: {', '.join(EXECUTORS)}")


def add_arguments(parser, *, jobs_default: int | None = None) -> None:
    """``--executor``, ``--ray-address``, ``--cpus-per-run``, ``--gpus-per-run`` on an argparse parser."""
    parser.add_argument("--executor", choices=EXECUTORS, default="local",
                        help="local: child processes of this command (default); ray: one Ray task per run")
    parser.add_argument("--ray-address", default=None, metavar="ADDR",
                        help="Ray cluster to use with --executor ray: auto (this machine's cluster), "
                             "ray://HOST:10001 (Ray Client), HOST:6379; default: start a local Ray")
    parser.add_argument("--cpus-per-run", type=float, default=1, help="Ray resources per run (--executor ray)")
    parser.add_argument("--gpus-per-run", type=float, default=0, help="Ray GPUs per run (--executor ray)")


def from_arguments(args, *, jobs: int = 1) -> Executor:
    """The executor the parsed :func:`add_arguments` flags ask for."""
    if args.executor == "local" and (args.cpus_per_run != 1 or args.gpus_per_run != 0):
        raise ValueError("--cpus-per-run / --gpus-per-run need --executor ray")
    return make_executor(args.executor, jobs=jobs, ray_address=args.ray_address, cpus_per_run=args.cpus_per_run,
                         gpus_per_run=args.gpus_per_run)
