"""GRPO on a Qwen3-architecture model with a controlled rollout delay: the training loop.

    python -m llm_runs.train --preset tiny-cpu --estimator gmc --eps 0.2 --delay 8 \\
        --group-size 8 --steps 200 --seed 0 --out results/llm/<run>      [--resume]

Each update t: take the B prompts of step t, sample G completions of each from the
snapshot theta_{t-d_t} (recording log mu per token and the policy version), compute
leave-one-out advantages, one gradient step on ``estimators.losses.policy_loss``, write one
metrics row. Results: ``<out>/config.json`` (before step 0), ``<out>/metrics.csv``,
``<out>/checkpoints/step-NNNNNN/`` (``from_pretrained`` folders + trainer state),
``<out>/summary.json`` at the end.

How this differs from textbook GRPO (DeepSeekMath; TRL's ``GRPOTrainer``):

1. The importance ratio is per trajectory, w_i = exp(sum_t [log pi_theta - log mu]) over the
   completion, and the estimator's weight c_i(w_1..w_G) of THEORY §2 multiplies the whole
   trajectory's score; there is no per-token ratio or clip (except in the ``token_clip`` and
   ``gspo`` baselines).
2. Advantages are leave-one-out, A_i = r_i - mean_{j != i} r_j, with no division by the group
   std (``grpo`` and ``drgrpo`` are options).
3. No length normalisation: the loss is -(1/(B G)) sum_i c_i A_i w_i(theta)/sg(w_i), whose
   gradient is THEORY's g_hat = (1/G) sum_i c_i A_i grad log pi_theta(o_i|q) averaged over the
   B groups.
4. One optimiser step per batch: no PPO epochs or mini-batches over the same rollouts, so at
   delay 0 every ratio is 1 and every trajectory scheme gives the same update.
5. Off-policyness is a controlled parameter: the rollouts of update t come from the stored
   snapshot theta_{t-d_t} (d_t = d, or uniform in [0, d]), and the staleness t - version is
   recorded per sample.
6. The behaviour log-probs are the ones recorded while sampling, never recomputed, so the
   ratio is the true pi_theta / mu (sampler-vs-trainer numerical mismatch included; ~1e-6
   per token here).
7. Sampling is at temperature 1 with no top-k/top-p truncation by default, so the behaviour
   policy is exactly pi_{theta_{t-d}} (truncation is optional and warned about: it biases the
   ratio).
8. No KL penalty to a reference model and no entropy bonus.
9. Stop-gradients are placed as THEORY §2 says: GMC's lambda is detached; TIC-mask is the
   clamped surrogate (clamped trajectories get no gradient); TIC-trunc is detached truncation.
10. The gradient norm is recorded but not clipped by default: the estimator's own bound is
    what is being studied.
11. Randomness is per sample, from keys derived from (seed, step, prompt, sample), so a run
    resumed after SIGKILL reproduces an uninterrupted run exactly.
12. (Engineering, not statistics.) The training pass runs each group's shared prompt once and
    repeats its KV cache G times: the same log-probs and gradient as one pass per completion,
    for about 40% of the compute.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError

from schema.io import write_json
from schema.provenance import git_commit, package_versions
from schema.results import METRICS_FILE, PACKED_METRICS_FILE, legacy_fields, read_json, read_run, read_run_config
from schema.runlock import LOCK_NAME, RunLock, check_free, entries

from .config import TrainConfig, config_diff, config_fields, resolve_config
from .metrics import MetricsWriter, run_columns
from .optim import make_optimizer
from .presets import load_pretrained, save_pretrained
from .rollout import evaluate, warn_truncation
from .rollout_sources import ROLLOUT_SOURCES, RolloutSourceError
from .tasks import build_task
from .theory import DirectionTracker
from .update import policy_update, staleness_metrics
from .warmstart import default_max_new_tokens, get_warm_start

CHECKPOINT_FORMAT = 1
REPO = Path(__file__).resolve().parents[1]


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk): the message names the file and the free space."""


@dataclass
class RunResult:
    out: Path
    status: str  # "complete" | "interrupted"
    step: int  # updates done
    summary: dict


# --------------------------------------------------------------------------- provenance


def _write_json(path: Path, obj) -> None:
    write_json(path, obj)


# --------------------------------------------------------------------------- checkpoints


def checkpoint_dirs(out: Path) -> list[Path]:
    """Completed checkpoints of a run, oldest first."""
    root = Path(out) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-") and p.name[5:].isdigit()
                  and (p / "trainer_state.pt").is_file())


def latest_checkpoint(out: Path) -> Path | None:
    dirs = checkpoint_dirs(out)
    return dirs[-1] if dirs else None


class CheckpointError(ValueError):
    """A checkpoint file that does not load (truncated, corrupt, wrong format)."""


def load_checkpoint(ckpt: Path, dtype: str = "float32", device: str = "cpu"):
    """``(trainer state, (policy, tokenizer))`` of one checkpoint folder; :class:`CheckpointError`
    naming the file that does not load."""
    path = ckpt / "trainer_state.pt"
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 (EOFError, UnpicklingError, RuntimeError ... from a truncated file)
        raise CheckpointError(f"checkpoint file {path} is unreadable ({type(exc).__name__}: {exc})") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"checkpoint file {path}: format {found!r} is not {CHECKPOINT_FORMAT}")
    try:
        loaded = load_pretrained(ckpt, dtype, device)
    except Exception as exc:  # noqa: BLE001 (SafetensorError, OSError, ValueError from a truncated model file)
        names = ", ".join(sorted(p.name for p in ckpt.glob("*.safetensors"))) or "model weights"
        raise CheckpointError(f"checkpoint {ckpt} ({names}) is unreadable ({type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:300]})") from None
    return state, loaded


def _fsync_tree(folder: Path) -> None:
    """Flush every file of ``folder`` and the folder itself to disk (before it is renamed into place)."""
    for p in [*folder.rglob("*"), folder]:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# --------------------------------------------------------------------------- the run folder


def check_new_run_folder(out: Path) -> None:
    """Refuse, before anything is created, an ``out`` that is a file, a non-empty folder, or that cannot be
    created (no writable ancestor)."""
    if out.exists():
        if not out.is_dir():
            raise ValueError(f"output folder {out} is a file, not a folder: choose another --out")
        if entries(out):
            check_free(out)  # a live trainer in it: name its pid
            raise ValueError(f"output folder {out} already exists and is not empty: refusing to overwrite it "
                             f"(use --resume to continue that run, or choose another --out)")
        if not os.access(out, os.W_OK | os.X_OK):
            raise ValueError(f"output folder {out} is not writable")
        return
    parent = next(p for p in out.absolute().parents if p.exists())
    if not parent.is_dir():
        raise ValueError(f"cannot create the output folder {out}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"cannot create the output folder {out}: {parent} is not writable")


# --------------------------------------------------------------------------- the trainer


class Trainer:
    """One run: ``Trainer(config, out).run()``; ``resume=True`` continues from the last checkpoint.

    Refuses (``ValueError``) an existing non-empty ``out`` without ``resume``, a ``resume`` of
    a folder that holds no run, or a resume whose config differs from the stored one.
    """

    def __init__(self, config: TrainConfig, out: str | os.PathLike, *, resume: bool = False, progress: bool = True,
                 log=None):
        self.config = config.validate()
        self.out = Path(out)
        self.resume = resume
        self.progress = progress
        self.log = log or (lambda msg: print(msg, flush=True))
        self._stop_signal: int | None = None
        self._in_checkpoint = False  # a checkpoint is being written: a second signal waits for it
        self._hard_stop = False  # a second signal arrived during a checkpoint write
        if resume:
            stored = self.out / "config.json"
            if self.out.is_dir():
                check_free(self.out)  # a live trainer in it: name its pid
            if not stored.is_file():
                raise ValueError(f"--resume: {self.out} holds no run (no config.json)")
            if (self.out / PACKED_METRICS_FILE).exists():
                raise ValueError(f"--resume: {self.out} is a finished run whose metrics are packed "
                                 f"({PACKED_METRICS_FILE}): there is nothing to resume")
            diff = config_diff(read_run_config(self.out), config.to_dict())
            if diff:
                raise ValueError(f"--resume: settings differ from {stored}: "
                                 + ", ".join(f"{k}: stored {a!r} vs given {b!r}" for k, (a, b) in diff.items()))
        else:
            check_new_run_folder(self.out)
        self._lock: RunLock | None = None
        self._created: list[Path] = []  # what a fresh run made, removed again if it fails before step 0
        self._owns = False  # a fresh run that locked an empty folder
        self._started = False  # a metrics row or a checkpoint exists: from here on a failure keeps the folder

    # ------------------------------------------------------------------ setup
    def _open_folder(self) -> None:
        """Create ``out`` (a fresh run) and take its lock: one process per run folder, for the life of the run."""
        if not self.resume:
            missing = [p for p in (self.out, *self.out.parents) if not p.exists()]
            try:
                self.out.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ValueError(f"cannot create the output folder {self.out}: {exc.strerror or exc}") from None
            self._created = missing[::-1]
        self._lock = RunLock(self.out).acquire()  # RunLocked (a ValueError) names the holder's pid
        if not self.resume and entries(self.out):  # another process made a run here between the check and now
            raise ValueError(f"output folder {self.out} already exists and is not empty: refusing to overwrite it "
                             f"(use --resume to continue that run, or choose another --out)")
        self._owns = not self.resume  # everything in the folder from here on is this fresh run's

    def _close_folder(self, failed: bool) -> None:
        """Release the lock; a fresh run that failed before step 0 leaves nothing behind."""
        if failed and self._owns and not self._started:
            for name in ("config.json", "config.tmp", METRICS_FILE, "checkpoints", LOCK_NAME):
                target = self.out / name
                if target.is_dir():
                    shutil.rmtree(target, ignore_errors=True)
                elif target.exists():
                    target.unlink()
            for folder in reversed(self._created):  # only folders this run created, and only if now empty
                try:
                    folder.rmdir()
                except OSError:
                    break
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _intact_checkpoint(self):
        """``(folder, trainer state, (policy, tokenizer))`` of the newest checkpoint that loads, or
        ``(None, None, None)`` if the run has none. A checkpoint that does not load (a truncated
        ``model.safetensors`` or ``trainer_state.pt``) is moved aside to ``<name>.corrupt-<time>``
        (never deleted), saying so, and the next older one is tried; if none loads, ValueError naming
        the files."""
        cfg, bad = self.config, []
        root = self.out / "checkpoints"
        for unfinished in sorted(root.glob("step-*.tmp")) if root.is_dir() else []:  # a write cut short: never a checkpoint
            shutil.rmtree(unfinished, ignore_errors=True)
            self.log(f"removed {unfinished.name}, a checkpoint whose writing was cut short (it was never complete)")
        for ckpt in reversed(checkpoint_dirs(self.out)):
            try:
                state, loaded = load_checkpoint(ckpt, cfg.dtype, cfg.device)
            except CheckpointError as exc:
                bad.append(exc)
                aside = ckpt.with_name(f"{ckpt.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
                os.replace(ckpt, aside)
                self.log(f"warning: {exc}; moved it to {aside.name} and trying the previous checkpoint")
                continue
            if bad:
                self.log(f"resuming from {ckpt.name}, the newest intact checkpoint (updates after it are redone)")
            return ckpt, state, loaded
        if bad:
            raise ValueError(f"--resume: no intact checkpoint in {self.out / 'checkpoints'}: "
                             + "; ".join(str(e) for e in bad) + " (the unreadable ones were moved aside, not deleted)")
        return None, None, None

    def _check_checkpoint_config(self, ckpt: Path, state: dict) -> None:
        """The settings a checkpoint was trained with (``trainer_state.pt`` stores them) are the
        truth: a ``config.json`` edited since, or other flags, are refused, naming the fields."""
        saved = state.get("config")
        if not isinstance(saved, dict):
            return
        saved = {**saved, **{k: v for k, v in legacy_fields(saved).items() if v is not None}}
        diff = config_diff(saved, self.config.to_dict())
        if diff:
            raise ValueError(f"--resume: the settings of {self.out / 'config.json'} differ from those checkpoint "
                             f"{ckpt.name} was trained with: "
                             + ", ".join(f"{k}: checkpoint {a!r} vs now {b!r}" for k, (a, b) in diff.items())
                             + " (restore them; a run continues with the settings it was made with)")

    def _setup(self) -> int:
        cfg = self.config
        self.info = {"config": cfg.to_dict(), "out": str(self.out), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                     "command": sys.argv, **git_commit(), "versions": package_versions(),
                     "symbols": {f.name: f.metadata["symbol"] for f in config_fields()},
                     "metric_columns": run_columns(cfg)}
        if not self.resume:
            _write_json(self.out / "config.json", self.info)
        else:
            self.info = {**read_json(self.out / "config.json"), "resumed": self.info["created"]}
        if cfg.top_k or cfg.top_p < 1.0:
            warn_truncation(cfg.top_k, cfg.top_p)
        self.task = build_task(cfg)
        self.max_new_tokens = default_max_new_tokens(cfg, self.task)
        ckpt, state = None, None
        if self.resume:
            ckpt, state, loaded = self._intact_checkpoint()
            if ckpt is not None:
                self._check_checkpoint_config(ckpt, state)
        if ckpt is None:
            ws = get_warm_start(cfg, self.task, self.log)
            self.info["warm_start"] = {"path": str(ws.path), **ws.info}
            self.policy, self.tokenizer = load_pretrained(ws.path, cfg.dtype, cfg.device)
        else:
            self.policy, self.tokenizer = loaded
        self.policy.train()
        self.optimizer = make_optimizer(self.policy.parameters(), cfg)
        self.source = ROLLOUT_SOURCES[cfg.mode](cfg, self.task, self.tokenizer, self.max_new_tokens)
        self.writer = MetricsWriter(self.out / METRICS_FILE, run_columns(cfg))
        self.directions = DirectionTracker()
        start, self.complete = 0, False
        if ckpt is not None:
            start, self.complete = state["step"], state["complete"]
            if not self.complete:  # a final checkpoint keeps only the weights
                self.optimizer.load_state_dict(state["optimizer"])
                self.source.load_state_dict(state["source"])
                torch.set_rng_state(state["rng"]["torch"])
                np.random.set_state(state["rng"]["numpy"])
                random.setstate(state["rng"]["python"])
                if "directions" in state:
                    self.directions.load_state_dict(state["directions"])
            self.elapsed = state["elapsed_s"]
            self.log(f"resuming {self.out} from {ckpt.name} (update {start} of {cfg.steps})")
        else:
            self.elapsed = 0.0
        kept = self.writer.truncate_before(start + 1 if self.complete else start)
        if kept != start + int(self.complete):
            raise ValueError(f"{self.out}/metrics.csv has {kept} rows before step {start}: rows were lost")
        self.info["model"] = {"parameters": sum(p.numel() for p in self.policy.parameters()),
                              "model_config": self.policy.config.to_dict()}
        self.info["task"] = {"train_size": len(self.task.train), "heldout_size": len(self.task.heldout),
                             "max_new_tokens": self.max_new_tokens}
        _write_json(self.out / "config.json", self.info)
        return start

    # ------------------------------------------------------------------ pieces
    def autocast(self):
        """bf16 autocast around every forward pass when ``amp = bfloat16`` (master weights stay float32)."""
        cfg = self.config
        return torch.autocast(device_type=torch.device(cfg.device).type, dtype=torch.bfloat16,
                              enabled=cfg.amp == "bfloat16")

    def evaluate(self) -> dict:
        with self.autocast():
            return self._evaluate()

    def _evaluate(self) -> dict:
        cfg, t0 = self.config, time.perf_counter()
        held = evaluate(self.policy, self.tokenizer, self.task, self.task.heldout, self.max_new_tokens,
                        cfg.eval_batch_size)
        train = evaluate(self.policy, self.tokenizer, self.task, self.task.train[:cfg.eval_train_size],
                         self.max_new_tokens, cfg.eval_batch_size)
        return {"eval/heldout_acc": held["acc"], "eval/heldout_pc": held["pc"], "eval/train_acc": train["acc"],
                "eval/train_pc": train["pc"], "perf/eval_s": time.perf_counter() - t0}

    def _eval_due(self, step: int) -> bool:
        every = self.config.eval_every
        return step == 0 or step == self.config.steps or (every > 0 and step % every == 0)

    def train_step(self, step: int) -> dict:
        """Rollouts for update ``step`` and the update; the metrics row (eval columns excluded)."""
        cfg = self.config
        t0 = time.perf_counter()
        with self.autocast():
            batch = self.source.batch(step, self.policy)
            t1 = time.perf_counter()
            self.directions.before(self.policy)
            row = policy_update(self.policy, self.optimizer, batch, estimator=cfg.estimator, eps=cfg.eps,
                                advantage=cfg.advantage, loss_options=cfg.loss_options(), temperature=cfg.temperature,
                                max_grad_norm=cfg.max_grad_norm, micro_batch_groups=cfg.micro_batch_groups,
                                mechanism=cfg.mechanism_diagnostics)
        t2 = time.perf_counter()
        row.update(self.directions.after(self.policy, bool(row["train/update_skipped"]), cfg.mechanism_diagnostics))
        row.update(staleness_metrics(batch, step))
        row.update(self.source.step_metrics())
        self.last_batch = batch
        row.update({"perf/step_s": t2 - t0, "perf/rollout_s": t1 - t0, "perf/update_s": t2 - t1,
                    "perf/tokens_per_s": float(batch.completion_mask.sum()) / (t2 - t0),
                    "perf/samples_per_s": batch.rewards.numel() / (t2 - t0)})
        return row

    def save_checkpoint(self, step: int, complete: bool = False) -> Path:
        """Write the checkpoint of ``step`` (a second SIGINT/SIGTERM waits until it is written). A
        write that fails (a full disk) removes its unfinished folder and raises
        :class:`CheckpointWriteError` naming the file and the free space; earlier checkpoints stay."""
        self._in_checkpoint = True
        try:
            return self._write_checkpoint(step, complete)
        finally:
            self._in_checkpoint = False
            if self._hard_stop:
                raise KeyboardInterrupt

    def _write_checkpoint(self, step: int, complete: bool) -> Path:
        self._started = True
        self.writer.sync()
        root = self.out / "checkpoints"
        final = root / f"step-{step:06d}"
        tmp = root / f"step-{step:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir(parents=True)
            self._write_checkpoint_files(tmp, step, complete)
        except (OSError, RuntimeError, SafetensorError) as exc:  # how a full disk surfaces, by writer
            shutil.rmtree(tmp, ignore_errors=True)
            free = shutil.disk_usage(self.out).free
            raise CheckpointWriteError(
                f"could not write the checkpoint of update {step} to {tmp}: {exc}; {free / 2**20:.0f} MiB free "
                f"there. The earlier checkpoints are intact: free space, then --resume") from None
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        for old in checkpoint_dirs(self.out)[:-1 if complete else -self.config.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def _write_checkpoint_files(self, tmp: Path, step: int, complete: bool) -> None:
        save_pretrained(self.policy, self.tokenizer, tmp)
        state = {"format": CHECKPOINT_FORMAT, "step": step, "complete": complete, "elapsed_s": self.elapsed,
                 "config": self.config.to_dict()}
        if not complete:  # what an exact resume needs (the final checkpoint keeps only the weights)
            state.update({"optimizer": self.optimizer.state_dict(), "source": self.source.state_dict(),
                          "directions": self.directions.state_dict(),
                          "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                                  "python": random.getstate()}})
        torch.save(state, tmp / "trainer_state.pt")
        _fsync_tree(tmp)  # complete on disk before it gets the name that says "complete"

    # ------------------------------------------------------------------ loop
    def run(self) -> RunResult:
        from tqdm.auto import tqdm

        cfg = self.config
        prev_threads = torch.get_num_threads()
        torch.set_num_threads(cfg.threads)
        handlers = self._install_signal_handlers()
        failed = True
        try:
            self._open_folder()
            start = self._setup()
            if self.complete:
                self.log(f"{self.out}: already complete ({cfg.steps} updates)")
                summary = self._summary()
                if not (self.out / "summary.json").exists():  # killed between final checkpoint and summary
                    _write_json(self.out / "summary.json", summary)
                failed = False
                return RunResult(self.out, "complete", cfg.steps, summary)
            bar = tqdm(total=cfg.steps, initial=start, desc=self.out.name, disable=not self.progress,
                       dynamic_ncols=True, file=sys.stderr)
            t_start = time.perf_counter() - self.elapsed
            step = start
            for step in range(start, cfg.steps):
                row = {"step": step}
                if self._eval_due(step):
                    row.update(self.evaluate())
                try:
                    row.update(self.train_step(step))
                except RolloutSourceError as exc:  # rows 0..step-1 are written; --resume redoes update `step`
                    ckpt = self.save_checkpoint(step)
                    bar.close()
                    raise RolloutSourceError(f"{exc}\ncheckpoint saved at update {step} ({ckpt}); continue with "
                                             f"--resume") from exc
                self.writer.write(row)
                self._started = True
                self.elapsed = time.perf_counter() - t_start
                post = {"r": f"{row['train/reward_mean']:.3f}", "stale": int(row["stale/staleness_max"])}
                if "eval/heldout_acc" in row:
                    post["heldout"] = f"{row['eval/heldout_acc']:.3f}"
                bar.set_postfix(post, refresh=False)
                bar.update(1)
                done = step + 1
                if self._stop_signal is not None:
                    self.save_checkpoint(done)
                    bar.close()
                    name = signal.Signals(self._stop_signal).name
                    self.log(f"{name}: checkpoint saved after update {done}; continue with --resume")
                    failed = False
                    return RunResult(self.out, "interrupted", done, {"signal": name})
                if cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and done < cfg.steps:
                    self.save_checkpoint(done)
            bar.close()
            final = {"step": cfg.steps, **self.evaluate()}
            self.writer.write(final)
            self.elapsed = time.perf_counter() - t_start
            self.save_checkpoint(cfg.steps, complete=True)
            summary = self._summary()
            _write_json(self.out / "summary.json", summary)
            failed = False
            return RunResult(self.out, "complete", cfg.steps, summary)
        finally:
            if hasattr(self, "writer"):
                self.writer.close()
            if hasattr(self, "source"):
                self.source.close()
            self._close_folder(failed)
            self._restore_signal_handlers(handlers)
            torch.set_num_threads(prev_threads)

    def _summary(self) -> dict:
        _, df = read_run(self.out)
        ev = df.dropna(subset=["eval/heldout_acc"])
        first, last = ev.iloc[0], ev.iloc[-1]
        return {"steps": int(self.config.steps), "wall_s": self.elapsed,
                "heldout_acc_start": float(first["eval/heldout_acc"]), "heldout_acc_end": float(last["eval/heldout_acc"]),
                "heldout_pc_start": float(first["eval/heldout_pc"]), "heldout_pc_end": float(last["eval/heldout_pc"]),
                "train_acc_start": float(first["eval/train_acc"]), "train_acc_end": float(last["eval/train_acc"]),
                "train_pc_start": float(first["eval/train_pc"]), "train_pc_end": float(last["eval/train_pc"]),
                "step_s_median": float(df["perf/step_s"].median())}

    # ------------------------------------------------------------------ signals
    def _install_signal_handlers(self):
        if threading.current_thread() is not threading.main_thread():
            return None

        def handler(signum, frame):
            if self._stop_signal is not None:  # a second signal: stop now, but never inside a checkpoint write
                if self._in_checkpoint:
                    self._hard_stop = True
                    return
                raise KeyboardInterrupt
            self._stop_signal = signum  # acted on after the current update (no I/O inside a signal handler)

        return {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}

    @staticmethod
    def _restore_signal_handlers(handlers) -> None:
        for s, h in (handlers or {}).items():
            signal.signal(s, h)


def run_config(out: str | os.PathLike, resume: bool, overrides: dict) -> TrainConfig:
    """The config of a run: the stored one when resuming (explicit values must agree with it,
    which :class:`Trainer` checks), else defaults < preset defaults < ``overrides``."""
    if resume:
        from .config import load_run_config

        if not (Path(out) / "config.json").is_file():
            raise ValueError(f"--resume: {out} holds no run (no config.json)")
        return dataclasses.replace(load_run_config(out), **overrides)
    return resolve_config(overrides)


def train(config: TrainConfig | None = None, out: str | os.PathLike | None = None, *, resume: bool = False,
          progress: bool = True, **overrides) -> RunResult:
    """Run (or resume) one training run programmatically; returns a :class:`RunResult`.

    ``train(out="results/llm/demo", estimator="gmc", delay=4, steps=50)`` or
    ``train(out="results/llm/demo", resume=True)``. A pre-built ``config`` may be given instead of
    ``overrides``. SIGINT/SIGTERM end it with ``status == "interrupted"`` and a checkpoint.
    """
    if out is None:
        raise ValueError("out (the run folder) is required")
    if config is None:
        config = run_config(out, resume, overrides)
    elif overrides:
        config = dataclasses.replace(config, **overrides)
    return Trainer(config, out, resume=resume, progress=progress).run()


# --------------------------------------------------------------------------- CLI


def _parse_value(field: dataclasses.Field, text: str):
    kind = str(field.type)
    if text.lower() == "none" and "None" in kind:
        return None
    if kind.startswith("dict"):
        value = json.loads(text)
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f"--{field.name.replace('_', '-')} needs a JSON object, got {text!r}")
        return value
    if kind.startswith("bool"):
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise argparse.ArgumentTypeError(f"--{field.name.replace('_', '-')}: {text!r} is not true or false")
    for typ in ("int", "float"):
        if kind.startswith(typ):
            try:
                return {"int": int, "float": float}[typ](text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"--{field.name.replace('_', '-')}: {text!r} is not {typ}") from None
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m llm_runs.train",
        description="GRPO with a controlled rollout delay on a Qwen3-architecture model. Each flag names its "
                    "symbol in THEORY.md in brackets ('-': an engineering setting). The defaults are a regime that "
                    "learns on 2 CPU cores: sums of three one-digit operands, a 1M-parameter Qwen3, 32 prompts x G=8, "
                    "Adam lr 1e-4.")
    parser.add_argument("--out", required=True, help="run folder, e.g. results/llm/<run> (never overwritten)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    for f in config_fields():
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        parser.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, default=argparse.SUPPRESS,
                            type=lambda text, f=f: _parse_value(f, text), metavar=f.name.upper(),
                            help=f"[{f.metadata['symbol']}] {f.metadata['help']} (default: {default!r})")
    return parser


def _parent_watchdog() -> None:
    """Started by a sweep (``GMC_PARENT_PID``) on a system without PR_SET_PDEATHSIG: SIGTERM ourselves
    (checkpoint after the current update) once the sweep is gone, so no trainer outlives its sweep."""
    parent = os.environ.get("GMC_PARENT_PID", "")
    if sys.platform.startswith("linux") or not parent.isdigit():
        return  # Linux: the sweep set PR_SET_PDEATHSIG (a second SIGTERM would stop without a checkpoint)

    def watch():
        while os.getppid() == int(parent):
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    _parent_watchdog()
    args = vars(build_parser().parse_args(argv))
    out, resume, progress = args.pop("out"), args.pop("resume"), not args.pop("no_progress")
    try:
        result = train(out=out, resume=resume, progress=progress, **args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RolloutSourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except OSError as exc:  # a disk or permission fault mid-run: one line, never a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a second SIGINT/SIGTERM: stopped without a new checkpoint (any write finished)
        print(f"stopped by a second signal: {out} continues from its last checkpoint with --resume", file=sys.stderr)
        return 130
    if result.status == "interrupted":
        return 128 + int(signal.Signals[result.summary["signal"]])
    s = result.summary
    print(f"done: {result.out}  held-out greedy accuracy {s['heldout_acc_start']:.3f} -> {s['heldout_acc_end']:.3f}, "
          f"pc {s['heldout_pc_start']:.3f} -> {s['heldout_pc_end']:.3f}, {s['step_s_median']:.3f} s/update")
    return 0


if __name__ == "__main__":
    sys.exit(main())
