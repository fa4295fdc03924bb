"""Truly asynchronous rollouts (``--mode async``): a rollout worker process generates while
the learner trains (THEORY §1, "Asynchrony": d_t is set by timing instead of by a
parameter, and bounded by the maximum staleness d = ``max_staleness``).

The pieces:

1. **Worker**: its own process (``torch.multiprocessing``, spawn context) with its own copy of
   the policy and ``config.threads`` torch threads (1 by default: with 2 cores the worker and
   the learner get one each). It produces rollout batches in order of a *batch index*
   j = 0, 1, 2, ...: batch j holds the prompts ``prompts_at(config, j)`` with the per-sample
   keys ``sample_keys(seed, j, B, G)``, exactly the prompts and keys of the controlled mode's
   update j, sampled by the worker's current weights (version v, recorded per sample).
2. **Weight sync**: every ``sync_every`` updates (k) the learner copies theta_t into a
   shared-memory buffer and publishes version t; before each batch the worker loads the
   newest published version. (A resumed learner also publishes at its first update.)
3. **Bounded queue** of ``queue_size`` finished batches; the worker blocks while it is full.
4. **Staleness** of a sample of version v used by update t (the learner holds theta_t) is
   t - v, recorded per sample (``RolloutBatch.versions`` -> ``stale/staleness_mean``/``max``).
   The learner takes batches in index order; a batch whose t - v > max_staleness is **dropped**
   (its B*G samples are added to ``stale/dropped``, this update, and ``stale/dropped_total``,
   the run) and the next is taken. A sample that is used always has t - v <= max_staleness.
5. **Gate**: the worker starts batch j only when (a) j - taken <= max_staleness, where taken
   is the number of batches the learner has taken (used or dropped): it runs at most d
   batches ahead; and (b) c - v <= max_staleness, where c is the number of batches used so
   far: batch j will be used by an update >= c, so a batch failing (b) would surely be
   dropped. Otherwise it waits for the learner. Drops still happen: a batch started by old
   weights up to d batches ahead can reach the learner more than d versions later. Weights
   lag up to k - 1 versions between syncs, so k - 1 <= max_staleness is required (checked by
   ``TrainConfig.validate``), else the learner could wait for weights it cannot publish.
6. **Determinism at max_staleness 0** (then k = 1): the gate makes the worker wait until
   the learner has taken batch t - 1 and published theta_t before it starts batch t, so
   batch t is sampled by theta_t with the controlled mode's prompts and keys, nothing is
   dropped, and the run equals the controlled mode at delay 0 (same metrics except
   ``perf/``, same weights, also across a worker failure and --resume). Above 0, which
   version samples a batch depends on timing: the run is valid but not reproducible.
7. **Faults**: if the worker dies (any exit), raises (its traceback is forwarded) or delivers
   nothing for ``worker_timeout_s`` seconds (hung), the learner raises
   :class:`~llm_runs.sources.RolloutSourceError`; the trainer then saves a checkpoint at the
   update that could not start (every finished update's metrics row is kept) and stops.
   ``--resume`` starts a new worker at the first batch index not yet taken, from the
   checkpoint's weights. The worker ignores SIGINT/SIGTERM (the learner owns its lifetime)
   and exits when its parent disappears.
"""
from __future__ import annotations

import copy
import os
import queue as queue_lib
import shutil
import signal
import tempfile
import time
import traceback
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from schema.io import atomic

from .delay import prompts_at
from .rollout import RolloutBatch, sample_groups, sample_keys
from .sources import RolloutSourceError, register_rollout_source

_POLL_S = 0.2  # how often a waiting side re-checks stop / liveness
FOLDER_PREFIX = "gmc-rollouts-"
"""Batch files go to ``<tmp>/gmc-rollouts-<learner pid>-<random>/``, removed by :meth:`AsyncRollout.close`;
one a killed learner left behind is removed by the next learner's start (:func:`remove_orphan_folders`)."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_orphan_folders(tmp: str | None = None) -> list[Path]:
    """Remove the batch folders whose learner (the pid in the name) is no longer running: what a
    SIGKILLed learner left behind. Returns the folders removed."""
    removed = []
    for folder in Path(tmp or tempfile.gettempdir()).glob(FOLDER_PREFIX + "*"):
        pid = folder.name[len(FOLDER_PREFIX):].split("-", 1)[0]
        if not folder.is_dir() or not pid.isdigit() or _pid_alive(int(pid)):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


@dataclass
class _Channels:
    """What the learner and the worker share (created by the learner, passed at spawn).

    Nothing here can block the learner on a dead or stopped worker: the learner never takes a
    lock without a timeout, flags are lock-free shared integers, the wake-up is a semaphore
    (``release`` never blocks), and a batch travels as a file with only a short message in the
    queue (a pipe write of a short message is atomic, so a killed worker leaves no half message).
    """

    queue: Any  # (batch index, version, path of the batch file)
    folder: str  # where batch files (and a worker's traceback) are written
    weights: dict[str, torch.Tensor]  # shared-memory copy of the published state_dict
    lock: Any  # guards ``weights`` + ``published`` (the learner acquires it with a timeout)
    published: Any  # Value: version of ``weights``
    progress: Any  # Value: taken << 32 | used; batches the learner has taken (used or dropped) and used
    wake: Any  # Semaphore: released when the learner publishes or takes a batch
    stop: Any  # Value: 1 when the learner asks the worker to exit
    ready: Any  # Value: 1 once the worker has started (worker_timeout_s counts from then)


@dataclass
class _WorkerSpec:
    config: Any
    task: Any
    tokenizer: Any
    model: Any  # a CPU copy of the policy (structure, dtype, buffers)
    max_new_tokens: int
    start_index: int
    parent_pid: int


def _save_batch(batch: RolloutBatch, path: str) -> None:
    arrays = {f.name: getattr(batch, f.name).cpu().numpy() for f in fields(batch)
              if isinstance(getattr(batch, f.name), torch.Tensor)}
    def write(tmp):
        with open(tmp, "wb") as fh:
            np.savez(fh, group_size=np.int64(batch.group_size), **arrays)

    atomic(path, write)


def _load_batch(path: str, device) -> RolloutBatch:
    with np.load(path) as data:
        fields_ = {k: torch.from_numpy(data[k]).to(device) for k in data.files if k != "group_size"}
        return RolloutBatch(group_size=int(data["group_size"]), **fields_)


def _worker_main(spec: _WorkerSpec, ch: _Channels) -> None:
    """Rollout worker process: generate batch j, j+1, ... until asked to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    cfg, task = spec.config, spec.task
    d = cfg.max_staleness
    try:
        torch.set_num_threads(cfg.threads)
        model = spec.model.to(cfg.device).eval()  # requires_grad kept as in the learner: it changes kernels
        version, j = -1, spec.start_index
        ch.ready.value = 1

        def alive() -> bool:
            return not ch.stop.value and os.getppid() == spec.parent_pid

        while alive():
            while ch.wake.acquire(False):  # drained before the checks, so a later release is never missed
                pass
            with ch.lock:
                if ch.published.value > version:
                    model.load_state_dict(ch.weights)
                    version = ch.published.value
            progress = ch.progress.value
            taken, used = progress >> 32, progress & 0xFFFFFFFF
            if j - taken > d or used - version > d:  # the gate
                ch.wake.acquire(timeout=_POLL_S)
                continue
            idx = prompts_at(cfg, j, len(task.train))
            keys = sample_keys(cfg.seed, j, len(idx), cfg.group_size)
            batch = sample_groups(model, spec.tokenizer, task, [task.train[i] for i in idx], idx, cfg.group_size, keys,
                                  version, spec.max_new_tokens, cfg.temperature, cfg.top_k, cfg.top_p)
            path = os.path.join(ch.folder, f"batch-{j:08d}.npz")
            _save_batch(batch, path)
            while alive():
                try:
                    ch.queue.put((j, version, path), timeout=_POLL_S)
                    break
                except queue_lib.Full:
                    pass
            j += 1
    except BaseException:  # leave the traceback for the learner's error message, then die
        with open(os.path.join(ch.folder, "worker-error.txt"), "w") as fh:
            fh.write(traceback.format_exc())
        raise
    finally:
        ch.queue.cancel_join_thread()  # never block exit on undelivered messages


class AsyncRollout:
    """Rollout source of ``mode = "async"`` (see the module docstring)."""

    def __init__(self, config, task, tokenizer, max_new_tokens: int):
        self.config, self.task, self.tokenizer, self.max_new_tokens = config, task, tokenizer, max_new_tokens
        self.next_index = 0  # first batch index not yet taken (dropped or used) by the learner
        self.dropped_total = 0  # samples dropped for staleness so far in the run
        self.dropped_last = 0  # samples dropped while fetching the last update's batch
        self._proc = None
        self._ch: _Channels | None = None
        self._published = -1
        self._started_at = 0.0
        self._ready_at: float | None = None

    # ------------------------------------------------------------------ worker lifetime
    @property
    def worker_pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _start(self, step: int, policy) -> None:
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        remove_orphan_folders()
        folder = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-")
        self._ch = _Channels(
            queue=ctx.Queue(maxsize=self.config.queue_size), folder=folder,
            weights={k: v.detach().to("cpu", copy=True).share_memory_() for k, v in policy.state_dict().items()},
            lock=ctx.Lock(), published=ctx.Value("q", step, lock=False), progress=ctx.Value("q", 0, lock=False),
            wake=ctx.Semaphore(0), stop=ctx.Value("b", 0, lock=False), ready=ctx.Value("b", 0, lock=False))
        self._set_progress(used=step)
        self._published = step
        model = copy.deepcopy(policy).to("cpu")
        for p in model.parameters():
            p.grad = None
        spec = _WorkerSpec(self.config, self.task, self.tokenizer, model, self.max_new_tokens, self.next_index,
                           os.getpid())
        self._proc = ctx.Process(target=_worker_main, args=(spec, self._ch), name="rollout-worker", daemon=True)
        self._proc.start()
        self._started_at = time.monotonic()

    def _set_progress(self, used: int) -> None:
        """Tell the worker's gate how many batches were taken and used (one 64-bit store: never torn)."""
        self._ch.progress.value = (self.next_index << 32) | used
        self._ch.wake.release()

    def _publish(self, step: int, policy) -> None:
        ch = self._ch
        since = time.monotonic()
        while not ch.lock.acquire(timeout=_POLL_S):  # a worker killed while loading weights never releases it
            self._check_worker(step, since, "to release the weights")
        try:
            with torch.no_grad():
                for k, v in policy.state_dict().items():
                    ch.weights[k].copy_(v)
            ch.published.value = step
        finally:
            ch.lock.release()
        self._published = step
        ch.wake.release()

    def _check_worker(self, step: int, since: float, waiting_for: str) -> None:
        """RolloutSourceError if the worker has died, or has shown no progress since ``since``
        for ``worker_timeout_s`` (counted from the spawn while it is not ready)."""
        pid, now = self._proc.pid, time.monotonic()
        if not self._proc.is_alive():
            error = Path(self._ch.folder) / "worker-error.txt"
            detail = error.read_text() if error.exists() else ""
            raise RolloutSourceError(f"the rollout worker (pid {pid}) died (exit code {self._proc.exitcode}) while "
                                     f"update {step} waited for it {waiting_for}" + (f":\n{detail}" if detail else ""))
        timeout = self.config.worker_timeout_s
        if not self._ch.ready.value:
            if now - self._started_at > timeout:
                raise RolloutSourceError(f"the rollout worker (pid {pid}) did not start within {timeout:g} s "
                                         "(worker_timeout_s)")
            return
        if self._ready_at is None:  # the wait for the first batch counts from here at the earliest
            self._ready_at = now
        if now - max(since, self._ready_at) > timeout:
            raise RolloutSourceError(
                f"the rollout worker (pid {pid}) did nothing for {timeout:g} s (worker_timeout_s) while update {step} "
                f"waited for it {waiting_for}: it is hung or far too slow")

    def _receive(self, step: int) -> tuple[int, int, str]:
        """The next (batch index, version, file); RolloutSourceError if the worker died or stayed silent too long."""
        since = time.monotonic()
        while True:
            try:
                return self._ch.queue.get(timeout=_POLL_S)
            except queue_lib.Empty:
                self._check_worker(step, since, "to deliver its batch")

    # ------------------------------------------------------------------ the source protocol
    def batch(self, step: int, policy) -> RolloutBatch:
        cfg = self.config
        if self._proc is None:
            self._start(step, policy)
        elif step % cfg.sync_every == 0 and step > self._published:
            self._publish(step, policy)
        dropped = 0
        while True:
            index, version, path = self._receive(step)
            if index != self.next_index:
                raise RuntimeError(f"rollout batch {index} arrived where batch {self.next_index} was expected")
            self.next_index = index + 1
            use = step - version <= cfg.max_staleness
            self._set_progress(used=step + use)
            if use:
                break
            dropped += cfg.prompts_per_step * cfg.group_size  # too stale: never used, counted
            os.unlink(path)
        batch = _load_batch(path, cfg.device)
        os.unlink(path)
        self.dropped_last = dropped
        self.dropped_total += dropped
        return batch

    def step_metrics(self) -> dict:
        return {"stale/dropped": self.dropped_last, "stale/dropped_total": self.dropped_total}

    def state_dict(self) -> dict:
        return {"next_index": self.next_index, "dropped_total": self.dropped_total}

    def load_state_dict(self, state: dict) -> None:
        self.next_index, self.dropped_total = state["next_index"], state["dropped_total"]

    def close(self) -> None:
        """Stop the worker: ask, give it 2 s, then kill it (a hung or stopped one too)."""
        proc, ch = self._proc, self._ch
        if proc is None:
            return
        self._proc = None
        ch.stop.value = 1
        ch.wake.release()
        proc.join(2)
        if proc.is_alive():
            proc.kill()
            proc.join(10)
        ch.queue.cancel_join_thread()
        ch.queue.close()
        shutil.rmtree(ch.folder, ignore_errors=True)


register_rollout_source("async", AsyncRollout)
