"""The local executor: child processes of the sweep, at most ``jobs`` at once; calls in this process
(``jobs == 1``) or in a process pool."""
from __future__ import annotations

import os
import signal
import subprocess
from concurrent.futures import Future, ProcessPoolExecutor

from .base import Executor, Job, _popen, die_with_parent_worker


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
            # workers die with this process (a killed sweep leaves none behind)
            self._pool = ProcessPoolExecutor(self.jobs, initializer=die_with_parent_worker, initargs=(os.getpid(),))
        return _LocalCall(self._pool.submit(fn, *args))

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
