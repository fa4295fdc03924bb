"""GRPO on a Qwen3-architecture model with a controlled rollout delay: the training loop (:class:`Trainer`; the
command line is :mod:`llm_runs.train`).

    python -m llm_runs.train --preset tiny-cpu --estimator gmc --eps 0.2 --delay 8 --group-size 8 --steps 200 \\
        --seed 0 --out results/llm/<run>      [--resume]

Each update t: take the B prompts of step t, sample G completions of each from the snapshot theta_{t-d_t}
(recording log mu per token and the policy version), compute leave-one-out advantages, one gradient step on
``estimators.losses.policy_loss``, write one metrics row. Results: ``<out>/config.json`` (before step 0),
``<out>/metrics.csv``, ``<out>/checkpoints/step-NNNNNN/`` (``from_pretrained`` folders + trainer state),
``<out>/summary.json`` at the end.

How it differs from textbook GRPO (DeepSeekMath; TRL's ``GRPOTrainer``):

1. The importance ratio is per trajectory, w_i = exp(sum_t [log pi_theta - log mu]) over the completion, and the
   estimator's weight c_i(w_1..w_G) of THEORY §2 multiplies the whole trajectory's score; there is no per-token
   ratio or clip (except in the ``token_clip`` and ``gspo`` baselines).
2. Advantages are leave-one-out, A_i = r_i - mean_{j != i} r_j, with no division by the group std (``grpo`` and
   ``drgrpo`` are options).
3. No length normalisation: the loss is -(1/(B G)) sum_i c_i A_i w_i(theta)/sg(w_i), whose gradient is THEORY's
   g_hat = (1/G) sum_i c_i A_i grad log pi_theta(o_i|q) averaged over the B groups.
4. One optimiser step per batch: no PPO epochs or mini-batches over the same rollouts, so at delay 0 every ratio
   is 1 and every trajectory scheme gives the same update.
5. Off-policyness is a controlled parameter: the rollouts of update t come from the stored snapshot theta_{t-d_t}
   (d_t = d, or uniform in [0, d]), and the staleness t - version is recorded per sample.
6. The behaviour log-probs are the ones recorded while sampling, never recomputed, so the ratio is the true
   pi_theta / mu (sampler-vs-trainer numerical mismatch included; ~1e-6 per token here).
7. Sampling is at temperature 1 with no top-k/top-p truncation by default, so the behaviour policy is exactly
   pi_{theta_{t-d}} (truncation is optional and warned about: it biases the ratio).
8. No KL penalty to a reference model and no entropy bonus.
9. Stop-gradients are placed as THEORY §2 says: GMC's lambda is detached; TIC-mask is the clamped surrogate
   (clamped trajectories get no gradient); TIC-trunc is detached truncation.
10. The gradient norm is recorded but not clipped by default: the estimator's own bound is what is being studied.
11. Randomness is per sample, from keys derived from (seed, step, prompt, sample), so a run resumed after SIGKILL
    reproduces an uninterrupted run exactly.
12. (Engineering, not statistics.) The training pass runs each group's shared prompt once and repeats its KV cache
    G times: the same log-probs and gradient as one pass per completion, for about 40% of the compute.
"""
from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from schema.io import write_json
from schema.provenance import git_commit, package_versions
from schema.results import METRICS_FILE, read_json, read_run

from . import stepsize
from .checkpoints import (
    CHECKPOINT_FORMAT,
    check_checkpoint_config,
    intact_checkpoint,
    latest_checkpoint,
    write_checkpoint,
)
from .config import TrainConfig, config_fields
from .metrics import MetricsWriter, first_torn_row, run_columns
from .optim import make_optimizer
from .presets import load_pretrained, save_pretrained
from .rollout import evaluate, warn_truncation
from .rollout_sources import ROLLOUT_SOURCES, RolloutSourceError
from .run_folder import RunFolder, check_new_run_folder, check_resumable
from .tasks import build_task
from .theory import DirectionTracker
from .update import policy_update, staleness_metrics
from .warmstart import default_max_new_tokens, get_warm_start, machine, rounding_note
from .warmstart_cache import nonfinite_parameter
from .warning import monitor_for


@dataclass
class RunResult:
    out: Path
    status: str  # "complete" | "interrupted"
    step: int  # updates done
    summary: dict


class _Stop(Exception):
    """A SIGINT/SIGTERM arrived: the run stops after the current update with a checkpoint."""


class Trainer:
    """One run: ``Trainer(config, out).run()``; ``resume=True`` continues from the last checkpoint. Refuses
    (``ValueError``) an existing non-empty ``out`` without ``resume``, a ``resume`` of a folder that holds no run, or
    a resume whose config differs from the stored one."""

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
            check_resumable(self.out, config.to_dict())
        else:
            check_new_run_folder(self.out)
        self.folder = RunFolder(self.out, resume)

    def _setup(self) -> int:
        cfg = self.config
        self.info = {"config": cfg.to_dict(), "out": str(self.out), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                     "command": sys.argv, **git_commit(), "versions": package_versions(),
                     "symbols": {f.name: f.metadata["symbol"] for f in config_fields()},
                     "metric_columns": run_columns(cfg), "machine": machine()}
        if not self.resume:
            write_json(self.out / "config.json", self.info)
        else:
            stored = read_json(self.out / "config.json")
            here = self.info["machine"]
            self.info = {**stored, "resumed": self.info["created"]}
            if stored.get("machine") not in (None, here):  # the updates from here on round as this CPU does
                self.info["resumed_machine"] = here
                self.log(f"warning: {self.out} was started on another machine ({stored['machine']}); it continues "
                         f"here ({here}), where float rounding may differ")
        if cfg.top_k or cfg.top_p < 1.0:
            warn_truncation(cfg.top_k, cfg.top_p)
        self.task = build_task(cfg)
        self.max_new_tokens = default_max_new_tokens(cfg, self.task)
        ckpt, state = None, None
        if self.resume:
            torn = (first_torn_row(self.out / METRICS_FILE, len(run_columns(cfg)))
                    if (self.out / METRICS_FILE).is_file() else None)
            newest = latest_checkpoint(self.out)
            if torn is not None and newest is not None and int(newest.name[5:]) > torn:
                self.log(f"{METRICS_FILE}: the row of update {torn} is torn (a write cut short) and lies before the "
                         f"last checkpoint ({newest.name}): resuming from the newest checkpoint at or before update "
                         f"{torn} (or the start) and rewriting the rows from there")
            else:
                torn = None
            ckpt, state, loaded = intact_checkpoint(self.out, cfg.dtype, cfg.device, self.log, at_most=torn)
            if ckpt is not None:
                check_checkpoint_config(self.out, ckpt, state, cfg.to_dict())
        if ckpt is None:
            ws = get_warm_start(cfg, self.task, self.log)
            self.info["warm_start"] = {"path": str(ws.path), **ws.info}
            if ws.info.get("source") == "committed":
                self.info["warm_start"]["rounding"] = rounding_note(cfg, self.task, ws.info, self.log)
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
        self.warning = monitor_for(cfg, self.out / METRICS_FILE, self.out.name)  # None: off (the default)
        self.info["model"] = {"parameters": sum(p.numel() for p in self.policy.parameters()),
                              "model_config": self.policy.config.to_dict()}
        self.info["task"] = {"train_size": len(self.task.train), "heldout_size": len(self.task.heldout),
                             "max_new_tokens": self.max_new_tokens}
        write_json(self.out / "config.json", self.info)
        return start

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
            with stepsize.scaled_lr(self.optimizer, self.warning.step_scale() if self.warning else 1.0):
                row = policy_update(self.policy, self.optimizer, batch, estimator=cfg.estimator, eps=cfg.eps,
                                    advantage=cfg.advantage, loss_options=cfg.loss_options(),
                                    temperature=cfg.temperature, max_grad_norm=cfg.max_grad_norm,
                                    micro_batch_groups=cfg.micro_batch_groups, mechanism=cfg.mechanism_diagnostics,
                                    control=cfg)
        t2 = time.perf_counter()
        if self.warning is not None:
            row.update(self.warning.observe(row["warn/kl"], step))
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
        bad = nonfinite_parameter(self.policy)
        if bad is not None:
            raise ValueError(f"not writing the checkpoint of update {step} in {self.out}: parameter {bad} is not "
                             "finite (a checkpoint never holds a NaN or inf weight)")
        self.folder.started = True
        self.writer.sync()
        keep = 1 if complete else self.config.keep_checkpoints
        return write_checkpoint(self.out, step, keep, lambda tmp: self._write_checkpoint_files(tmp, step, complete))

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

    def run(self) -> RunResult:
        """Open the folder, set up (fresh or from the last checkpoint), train update by update (evaluating when
        due), stop cleanly on SIGINT/SIGTERM, finish with an evaluation, a final checkpoint and ``summary.json``."""
        prev_threads = torch.get_num_threads()
        torch.set_num_threads(self.config.threads)
        handlers = self._install_signal_handlers()
        failed = True
        try:
            self.folder.open()
            start = self._setup()
            if self.complete:
                result = self._already_complete()
            else:
                try:
                    self._train_from(start)
                    result = self._finish()
                except _Stop as stop:
                    result = RunResult(self.out, "interrupted", stop.args[0], {"signal": stop.args[1]})
            failed = False
            return result
        finally:
            if hasattr(self, "writer"):
                self.writer.close()
            if hasattr(self, "source"):
                self.source.close()
            self.folder.close(failed)
            self._restore_signal_handlers(handlers)
            torch.set_num_threads(prev_threads)

    def _train_from(self, start: int) -> None:
        """Updates ``start .. steps-1``, one metrics row each; raises :class:`_Stop` after the update
        during which a signal arrived (its checkpoint written)."""
        from tqdm.auto import tqdm

        cfg = self.config
        bar = tqdm(total=cfg.steps, initial=start, desc=self.out.name, disable=not self.progress,
                   dynamic_ncols=True, file=sys.stderr)
        t_start = self._t_start = time.perf_counter() - self.elapsed
        try:
            for step in range(start, cfg.steps):
                row = self._update_row(step)
                self.writer.write(row)
                self.folder.started = True
                self.elapsed = time.perf_counter() - t_start
                _show_progress(bar, row)
                done = step + 1
                if self._stop_signal is not None:
                    self.save_checkpoint(done)
                    name = signal.Signals(self._stop_signal).name
                    self.log(f"{name}: checkpoint saved after update {done}; continue with --resume")
                    raise _Stop(done, name)
                if self.warning is not None and self.warning.should_stop() and done < cfg.steps:
                    self.save_checkpoint(done)
                    self.log(f"early warning: checkpoint saved after update {done}; the run stops (early_warning=stop)")
                    raise _Stop(done, "early_warning")
                if cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and done < cfg.steps:
                    self.save_checkpoint(done)
        finally:
            bar.close()

    def _update_row(self, step: int) -> dict:
        """The metrics row of update ``step``: the evaluation when due, then the rollouts and the update.
        A rollout source that fails leaves rows 0..step-1 written and a checkpoint at ``step``."""
        row = {"step": step}
        if self._eval_due(step):
            row.update(self.evaluate())
        try:
            row.update(self.train_step(step))
        except RolloutSourceError as exc:  # --resume redoes update `step`
            ckpt = self.save_checkpoint(step)
            raise RolloutSourceError(f"{exc}\ncheckpoint saved at update {step} ({ckpt}); continue with "
                                     f"--resume") from exc
        return row

    def _finish(self) -> RunResult:
        """The final evaluation row, the final checkpoint (weights only) and ``summary.json``."""
        final = {"step": self.config.steps, **self.evaluate()}
        self.writer.write(final)
        self.elapsed = time.perf_counter() - self._t_start
        self.save_checkpoint(self.config.steps, complete=True)
        summary = self._summary()
        write_json(self.out / "summary.json", summary)
        return RunResult(self.out, "complete", self.config.steps, summary)

    def _already_complete(self) -> RunResult:
        """A resume of a finished run: its summary (written now if the run was killed between its
        final checkpoint and the summary)."""
        self.log(f"{self.out}: already complete ({self.config.steps} updates)")
        summary = self._summary()
        if not (self.out / "summary.json").exists():
            write_json(self.out / "summary.json", summary)
        return RunResult(self.out, "complete", self.config.steps, summary)

    def _summary(self) -> dict:
        _, df = read_run(self.out)
        ev = df.dropna(subset=["eval/heldout_acc"])
        first, last = ev.iloc[0], ev.iloc[-1]
        return {"steps": int(self.config.steps), "wall_s": self.elapsed,
                "heldout_acc_start": float(first["eval/heldout_acc"]),
                "heldout_acc_end": float(last["eval/heldout_acc"]),
                "heldout_pc_start": float(first["eval/heldout_pc"]), "heldout_pc_end": float(last["eval/heldout_pc"]),
                "train_acc_start": float(first["eval/train_acc"]), "train_acc_end": float(last["eval/train_acc"]),
                "train_pc_start": float(first["eval/train_pc"]), "train_pc_end": float(last["eval/train_pc"]),
                "step_s_median": float(df["perf/step_s"].median())}

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


def _show_progress(bar, row: dict) -> None:
    post = {"r": f"{row['train/reward_mean']:.3f}", "stale": int(row["stale/staleness_max"])}
    if "eval/heldout_acc" in row:
        post["heldout"] = f"{row['eval/heldout_acc']:.3f}"
    bar.set_postfix(post, refresh=False)
    bar.update(1)
