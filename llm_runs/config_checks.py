"""The checks of :meth:`llm_runs.config.TrainConfig.validate`, one named function per group of settings,
run in the order of :data:`CHECKS`. Each refuses a bad value with a ``ValueError`` naming it; none touches
a file except the existence check of ``model_path``, and none downloads."""
from __future__ import annotations

import dataclasses
import json
import math

DELAY_MODES = ("fixed", "uniform")
TRAJ_AGGS = ("sum", "token-mean")
PARAM_DTYPES = ("float32", "bfloat16", "float16")


def need(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_real(v) -> bool:
    """A real number (an int or a float), never a bool or a string."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


INTEGER_FIELDS = ("threads", "digits", "terms", "heldout_size", "warm_start_steps", "warm_start_batch", "group_size",
                  "prompts_per_step", "steps", "micro_batch_groups", "delay", "top_k", "eval_every",
                  "eval_train_size", "eval_batch_size", "checkpoint_every", "keep_checkpoints", "seed", "task_seed",
                  "warm_start_seed")
"""Settings that must be integers (checked first: the other checks compare them)."""


def check_integers(c) -> None:
    for name in INTEGER_FIELDS:
        need(is_int(getattr(c, name)), f"{name} must be an integer, got {getattr(c, name)!r}")


def loss_dtype(c):
    """The dtype the run's loss computes in (its log-probs' dtype, half precision widened to float32:
    :func:`estimators.losses.registry.loss_dtype`): every threshold and knob must fit it."""
    import torch

    from estimators.losses.registry import loss_dtype as widened

    dtype = getattr(torch, c.dtype) if c.dtype in PARAM_DTYPES else torch.float32  # a bad one: check_precision
    return widened(torch.empty(0, dtype=dtype))


def check_estimator(c) -> None:
    """The group, the threshold, the delay and the estimator's name."""
    from estimators._validate import check_fits_dtype
    from estimators.losses import loss_names

    need(c.group_size >= 2, f"group_size G must be >= 2 (a group needs a baseline), got G = {c.group_size}")
    need(isinstance(c.eps, (int, float)) and not isinstance(c.eps, bool) and math.isfinite(c.eps) and c.eps > 0,
         f"eps must be a finite number > 0 (the threshold is 1+eps), got eps = {c.eps!r}")
    need(c.eps_high is None or (isinstance(c.eps_high, (int, float)) and not isinstance(c.eps_high, bool)
                                and math.isfinite(c.eps_high) and c.eps_high > 0),
         f"eps_high must be None or a finite number > 0, got {c.eps_high!r}")
    check_fits_dtype("the run's loss", {"eps": c.eps, "eps_high": c.eps_high}, loss_dtype(c))
    need(c.delay >= 0, f"delay d must be >= 0 policy versions, got d = {c.delay}")
    need(c.delay_mode in DELAY_MODES, f"unknown delay_mode {c.delay_mode!r}; valid: {', '.join(DELAY_MODES)}")
    need(c.estimator in loss_names(), f"unknown estimator {c.estimator!r}; valid: {', '.join(loss_names())}")


def check_knobs(c) -> None:
    """Every estimator's knobs (not only the chosen estimator's), and a batch-coupled estimator in one chunk."""
    from estimators._validate import check_fits_dtype
    from estimators.losses import is_batch_coupled
    from estimators.params import resolve

    knobs: dict[str, dict] = {}
    for f in dataclasses.fields(c):
        if "knob" in f.metadata:
            est, param = f.metadata["knob"]
            knobs.setdefault(est, {})[param] = getattr(c, f.name)
    for est, given in knobs.items():
        try:
            resolve(est, given)
            check_fits_dtype(repr(est), given, loss_dtype(c))
        except ValueError as exc:
            names = {f.metadata["knob"][1]: f.name for f in dataclasses.fields(c)
                     if f.metadata.get("knob", ("",))[0] == est}
            raise ValueError(f"{exc} (config fields {', '.join(names.values())})") from None
    if is_batch_coupled(c.estimator):
        need(c.micro_batch_groups == 0 or c.micro_batch_groups >= c.prompts_per_step,
             f"estimator {c.estimator!r} uses a statistic of the whole batch (not separable by group): "
             f"micro_batch_groups must be 0 (one chunk), got {c.micro_batch_groups}")


def check_advantage(c) -> None:
    """The advantage, the step-size control and the aggregation of a trajectory's term."""
    from estimators import ADVANTAGE_KINDS, SCHEMES

    from .stepsize import TRAINER_ADVANTAGES, check_step_control

    kinds = (*ADVANTAGE_KINDS, *TRAINER_ADVANTAGES)
    need(c.advantage in kinds, f"unknown advantage {c.advantage!r}; valid: {', '.join(kinds)}")
    check_step_control(c)
    need(c.traj_agg in TRAJ_AGGS, f"unknown traj_agg {c.traj_agg!r}; valid: {', '.join(TRAJ_AGGS)}")
    need(c.traj_agg == "sum" or c.estimator in SCHEMES,
         f"traj_agg {c.traj_agg!r} divides a trajectory estimator's term by its length; estimator "
         f"{c.estimator!r} is a token-level loss with its own aggregation")


def check_precision(c) -> None:
    """The rollout source, the parameter dtype and mixed precision."""
    from .rollout_sources import ROLLOUT_SOURCES

    ROLLOUT_SOURCES.lookup(c.mode)  # unknown mode -> ValueError listing the valid ones
    need(c.dtype in PARAM_DTYPES, f"unknown dtype {c.dtype!r}; valid: {', '.join(PARAM_DTYPES)}")
    need(c.amp in ("none", "bfloat16"), f"unknown amp {c.amp!r}; valid: none, bfloat16")
    need(c.amp == "none" or c.dtype == "float32",
         f"amp {c.amp!r} keeps float32 master weights: use dtype float32, got dtype {c.dtype!r}")


def check_optimisation(c) -> None:
    """Steps, batch, learning rate, gradient clip and the optimiser with its decay."""
    from .optim import check_optimizer

    need(c.steps >= 1, f"steps T must be >= 1, got {c.steps}")
    need(c.prompts_per_step >= 1, f"prompts_per_step must be >= 1, got {c.prompts_per_step}")
    need(c.micro_batch_groups >= 0, f"micro_batch_groups must be >= 0, got {c.micro_batch_groups}")
    need(c.threads >= 1, f"threads must be >= 1, got {c.threads}")
    need(is_real(c.lr) and math.isfinite(c.lr) and c.lr > 0, f"lr eta must be a finite number > 0, got {c.lr!r}")
    need(c.max_grad_norm is None or (is_real(c.max_grad_norm) and c.max_grad_norm > 0),
         f"max_grad_norm must be None or a number > 0 (inf: never clip), got {c.max_grad_norm!r}")
    check_optimizer(c.optimizer, c.momentum, c.weight_decay)
    shrink = 1 - c.lr * c.weight_decay  # the factor the decay applies to the weights each step
    need(c.optimizer == "adam" or shrink > 0,
         f"weight_decay {c.weight_decay!r} at lr {c.lr!r}: optimizer {c.optimizer!r} multiplies the "
         f"weights by 1 - lr * weight_decay = {shrink:.6g} every step, which is no decay (it must be > 0)")
    need(not (c.dtype == "float16" and c.optimizer in ("adam", "adamw")),
         f"optimizer {c.optimizer!r} cannot step float16 weights: its state is float16 too, where Adam's eps "
         f"(1e-8) underflows to 0, so an update with a zero gradient steps by 0/0 = NaN. Use dtype float32 (or "
         f"amp bfloat16, float32 master weights and state), or optimizer 'sgd'")
    need(isinstance(c.mechanism_diagnostics, bool),
         f"mechanism_diagnostics must be true or false, got {c.mechanism_diagnostics!r}")


def check_sampling(c) -> None:
    """Temperature and top-k of the behaviour policy."""
    need(is_real(c.temperature) and math.isfinite(c.temperature) and c.temperature > 0,
         f"temperature must be a finite number > 0, got {c.temperature!r}")
    need(c.top_k >= 0, f"top_k must be >= 0 (0 disables it), got {c.top_k}")


def check_async(c) -> None:
    """The async rollout worker's staleness, syncs, queue and timeout; the delay settings it excludes."""
    for name in ("max_staleness", "sync_every", "queue_size"):
        need(is_int(getattr(c, name)), f"{name} must be an integer, got {getattr(c, name)!r}")
    need(c.max_staleness >= 0, f"max_staleness d must be >= 0, got {c.max_staleness}")
    need(c.sync_every >= 1, f"sync_every must be >= 1, got {c.sync_every}")
    need(c.queue_size >= 1, f"queue_size must be >= 1, got {c.queue_size}")
    need(is_real(c.worker_timeout_s) and math.isfinite(c.worker_timeout_s)
         and c.worker_timeout_s > 0,
         f"worker_timeout_s must be a finite number > 0, got {c.worker_timeout_s!r}")
    if c.mode == "async":
        need(c.delay == 0 and c.delay_mode == "fixed",
             f"delay = {c.delay}, delay_mode = {c.delay_mode!r} apply to the controlled mode only; async "
             f"staleness is set by timing, bounded by max_staleness (leave delay = 0, delay_mode = 'fixed')")
        need(c.sync_every - 1 <= c.max_staleness,
             f"sync_every = {c.sync_every} needs max_staleness >= sync_every - 1 = {c.sync_every - 1}, got "
             f"{c.max_staleness}: between syncs the worker's weights fall up to sync_every - 1 versions behind")


def check_completions(c) -> None:
    """Top-p and the completion length."""
    need(is_real(c.top_p) and 0 < c.top_p <= 1, f"top_p must be in (0, 1] (1 disables it), got {c.top_p!r}")
    need(c.max_new_tokens is None or (is_int(c.max_new_tokens) and c.max_new_tokens >= 1),
         f"max_new_tokens must be None or an integer >= 1, got {c.max_new_tokens!r}")


def check_schedule(c) -> None:
    """The warm start, the evaluations and the checkpoints."""
    need(c.warm_start_steps >= 0, f"warm_start_steps must be >= 0, got {c.warm_start_steps}")
    need(is_real(c.warm_start_lr) and math.isfinite(c.warm_start_lr) and c.warm_start_lr > 0,
         f"warm_start_lr must be a finite number > 0, got {c.warm_start_lr!r}")
    need(c.warm_start_batch >= 1, f"warm_start_batch must be >= 1, got {c.warm_start_batch}")
    need(c.eval_every >= 0, f"eval_every must be >= 0, got {c.eval_every}")
    need(c.eval_train_size >= 0, f"eval_train_size must be >= 0, got {c.eval_train_size}")
    need(c.eval_batch_size >= 1, f"eval_batch_size must be >= 1, got {c.eval_batch_size}")
    need(c.checkpoint_every >= 0, f"checkpoint_every must be >= 0, got {c.checkpoint_every}")
    need(c.keep_checkpoints >= 1, f"keep_checkpoints must be >= 1, got {c.keep_checkpoints}")


def check_model_and_task(c) -> None:
    """The preset (its model path exists, never a hub id), the device torch must see, and the task, built
    once per distinct task-relevant settings (:func:`check_task`)."""
    from .presets import check_device, get_preset

    need(isinstance(c.model_kwargs, dict), f"model_kwargs must be a dict, got {type(c.model_kwargs).__name__}")
    need(c.device == "cpu" or c.device.startswith(("cuda", "mps", "xpu")), f"unknown device {c.device!r}")
    preset = get_preset(c.preset)  # unknown preset -> ValueError listing the valid ones
    preset.check(c)  # model path exists (never a hub id), kwargs make sense
    check_device(c.device)  # a device torch cannot see is refused before any folder is made
    check_task(c)  # unknown task / bad knobs -> ValueError (builds the split once)


CHECKS = (check_integers, check_estimator, check_knobs, check_advantage, check_precision, check_optimisation,
          check_sampling, check_async, check_completions, check_schedule, check_model_and_task)
"""The checks :meth:`TrainConfig.validate` runs, in this order (the first failure is the one reported)."""

RUN_ONLY = ("seed", "estimator", "delay", "delay_mode", "eps", "eps_high", "lr", "steps", "eval_every",
            "checkpoint_every", "keep_checkpoints", "mode", "max_staleness", "sync_every", "queue_size", "advantage",
            "optimizer", "momentum", "weight_decay", "max_grad_norm", "mechanism_diagnostics")
"""Settings no task factory reads: configurations differing only in them share one task check."""
_TASK_CHECKED: set[str] = set()


def check_task(config) -> None:
    """Build the task once per distinct task-relevant settings in this process (a grid validates
    hundreds of configurations that differ only in the estimator, delay or seed)."""
    from .tasks import get_task_factory

    key = json.dumps({k: v for k, v in config.to_dict().items() if k not in RUN_ONLY}, sort_keys=True, default=str)
    if key not in _TASK_CHECKED:
        get_task_factory(config.task)(config)
        _TASK_CHECKED.add(key)
