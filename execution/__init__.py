"""Where the runs of a sweep execute: a local process pool or a Ray cluster.

Both sweeps (``python -m grids.sweep``, ``python -m simulators.sweep``) hand their runs to
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

from .base import Executor, Job
from .local import LocalExecutor
from .ray_executor import RayExecutor

__all__ = ["EXECUTORS", "Executor", "Job", "LocalExecutor", "RayExecutor", "add_arguments", "from_arguments",
           "make_executor"]

EXECUTORS = ("local", "ray")
"""Valid values of ``--executor``."""


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


def add_arguments(parser) -> None:
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
