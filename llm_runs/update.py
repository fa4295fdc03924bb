"""One policy-gradient update on a :class:`~llm_runs.rollout.RolloutBatch`.

The loss is :func:`estimators.losses.policy_loss` (the only definition of every scheme) and
the advantages :func:`estimators.advantages`; nothing here re-implements a weighting. With
``micro_batch_groups`` the batch is processed in chunks of whole groups (a group is never
split: GMC's lambda is a group statistic), each chunk's loss scaled by its share of the rows,
so the summed gradient is the full-batch gradient up to rounding.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

import estimators
from estimators.losses import is_batch_coupled, masked_token_log_ratio, policy_loss

from . import stepsize
from .mechanism import MechanismProbe
from .metrics import DIAGNOSTIC_COLUMNS
from .rollout import RolloutBatch, completion_logprobs
from .stepsize import TRAINER_ADVANTAGES
from .theory import drift_metrics, kl_per_token, ratio_mechanism, ratio_metrics


def group_advantages(batch: RolloutBatch, kind: str) -> torch.Tensor:
    """A_i of THEORY §1 per group, shape (prompts_per_step, G)."""
    return estimators.advantages(batch.rewards.view(batch.prompts_per_step, batch.group_size).double(), kind).float()


def policy_update(model, optimizer, batch: RolloutBatch, *, estimator: str, eps: float, advantage: str = "loo",
                  loss_options: dict | None = None, temperature: float = 1.0, max_grad_norm: float | None = None,
                  micro_batch_groups: int = 0, mechanism: bool = False, control=None) -> dict:
    """Compute the surrogate, backpropagate, step the optimiser; return ``train/`` and ``stale/`` metrics.

    ``loss_options`` are the estimator's knobs (``TrainConfig.loss_options()``). The ratio
    diagnostics are computed once, on the whole batch's log-ratios, after the backward passes.
    A non-finite gradient is not applied (``train/update_skipped = 1``) rather than written
    into the weights. ``mechanism`` adds the ``mech/`` columns (:mod:`llm_runs.mechanism`; one
    more backward pass) without changing the update. ``control`` (the run's config, or None) carries
    the step-size controls of :mod:`llm_runs.stepsize` (``ess_scaling``, ``gmc_step``,
    ``skip_zero_grad``, the ``opob`` advantage) and ``drift_diagnostics``; with every control off the
    update is exactly the uncontrolled one.

    The steps: advantages (:func:`update_advantages`), the loss and its gradient over chunks of whole
    groups (:func:`backward_chunks`), the gradient norm, the optimiser step (:func:`optimizer_step`),
    the metrics (:func:`update_metrics`).
    """
    model.train()
    adv, step_cols = update_advantages(model, batch, advantage, temperature, control)
    chunk = chunk_groups(estimator, micro_batch_groups, batch.prompts_per_step)
    optimizer.zero_grad(set_to_none=True)
    probe = MechanismProbe(model) if mechanism else None
    passed = backward_chunks(model, batch, adv, estimator=estimator, eps=eps, loss_options=loss_options,
                             temperature=temperature, chunk=chunk, probe=probe)
    params = [p for p in model.parameters() if p.grad is not None]
    grad_norm = float(torch.nn.utils.get_total_norm([p.grad for p in params]))
    mech = probe.finish(temperature) if probe is not None else None
    optimizer_step(model, optimizer, params, grad_norm, passed, max_grad_norm=max_grad_norm, control=control,
                   step_cols=step_cols)
    return update_metrics(batch, passed, estimator=estimator, eps=eps, grad_norm=grad_norm, mech=mech,
                          control=control, step_cols=step_cols)


def update_advantages(model, batch: RolloutBatch, advantage: str, temperature: float, control
                      ) -> tuple[torch.Tensor, dict]:
    """The advantages of ``batch``, ``(prompts_per_step, G)``: the group advantage ``advantage`` (or the
    trainer's ``opob``, with its cost column), divided by each completion's length under
    ``traj_agg = token-mean``; and the ``step/`` columns made so far."""
    step_cols: dict = {}
    if advantage in TRAINER_ADVANTAGES:
        adv, step_cols = _opob(model, batch, temperature, control)
    else:
        adv = group_advantages(batch, advantage)
    if getattr(control, "traj_agg", "sum") == "token-mean":  # VCPO's seq-mean-token-mean: c_i A_i / |o_i|
        lengths = batch.completion_mask.sum(-1).clamp(min=1)
        adv = adv / lengths.view(batch.prompts_per_step, batch.group_size).to(adv.dtype)
    return adv, step_cols


def chunk_groups(estimator: str, micro_batch_groups: int, prompts_per_step: int) -> int:
    """Groups per forward/backward chunk (0: the whole batch); a batch-coupled estimator is refused a split."""
    chunk = micro_batch_groups or prompts_per_step
    if chunk < prompts_per_step and is_batch_coupled(estimator):
        raise ValueError(f"estimator {estimator!r} uses a statistic of the whole batch: it cannot be split into "
                         f"micro-batches of {chunk} groups (set micro_batch_groups = 0)")
    return chunk


@dataclass
class BackwardPass:
    """What the chunks of one update leave behind besides the gradient."""

    loss: float = 0.0
    """the full-batch loss: each chunk's loss times its share of the rows."""
    seq_log_ratio: list = field(default_factory=list)
    """per chunk, the (groups, G) trajectory log-ratios."""
    token_log_ratio: list = field(default_factory=list)
    """per chunk, the (rows, T) token log-ratios."""
    weights: list = field(default_factory=list)
    """per chunk, the trajectory weights c (trajectory schemes only)."""
    clip_sums: dict = field(default_factory=dict)
    """``token_clip_frac`` / ``seq_clip_frac`` summed with weights (tokens / groups of the chunk)."""
    clip_weights: dict = field(default_factory=dict)

    def add_clip_fractions(self, metrics: dict, tokens: float, groups: int) -> None:
        for key in ("token_clip_frac", "seq_clip_frac"):
            if key in metrics:
                w = tokens if key == "token_clip_frac" else groups
                self.clip_sums[key] = self.clip_sums.get(key, 0.0) + metrics[key] * w
                self.clip_weights[key] = self.clip_weights.get(key, 0.0) + w


def backward_chunks(model, batch: RolloutBatch, adv, *, estimator: str, eps: float, loss_options: dict | None,
                    temperature: float, chunk: int, probe) -> BackwardPass:
    """For each chunk of ``chunk`` whole groups: the completions' log-probs, the estimator's loss
    (:func:`estimators.losses.policy_loss`), its backward pass scaled by the chunk's share of the
    rows (the summed gradient is the full batch's), and what the metrics need."""
    G, prompts_per_step = batch.group_size, batch.prompts_per_step
    kw = dict(loss_options or {})
    passed = BackwardPass()
    for g0 in range(0, prompts_per_step, chunk):
        g1 = min(g0 + chunk, prompts_per_step)
        part = batch.groups(g0, g1)
        logp = completion_logprobs(model, part.prompt_ids, part.prompt_mask, part.completion_ids, temperature, G)
        out = policy_loss(estimator, logp, part.behaviour_logp, part.completion_mask, adv[g0:g1], G, eps, **kw)
        share = (g1 - g0) / prompts_per_step
        (out.loss * share).backward(retain_graph=probe is not None)
        if probe is not None:
            probe.chunk(out.loss, logp, part, adv[g0:g1].reshape(-1), share)
        passed.loss += float(out.loss.detach()) * share
        passed.seq_log_ratio.append(out.seq_log_ratio)
        passed.token_log_ratio.append(masked_token_log_ratio(logp.detach(), part.behaviour_logp,
                                                             part.completion_mask))
        if out.weights is not None:
            passed.weights.append(out.weights)
        passed.add_clip_fractions(out.metrics, float(part.completion_mask.sum()), g1 - g0)
    return passed


def optimizer_step(model, optimizer, params, grad_norm: float, passed: BackwardPass, *,
                   max_grad_norm: float | None, control, step_cols: dict) -> None:
    """Step the optimiser on the accumulated gradient, scaled by the step-size control (its columns
    added to ``step_cols``), clipped at ``max_grad_norm``; a non-finite gradient (or, with
    ``skip_zero_grad``, a zero one) is dropped instead."""
    skipped = not math.isfinite(grad_norm)
    scale = 1.0
    if control is not None and stepsize.is_active(control):
        weights = torch.cat(passed.weights) if passed.weights else None
        step_cols.update(stepsize.step_scale(control, torch.cat(passed.seq_log_ratio), weights))
        scale = step_cols["step/lr_scale"]
    zero_skip = bool(control is not None and control.skip_zero_grad and grad_norm == 0.0)
    if control is not None and control.skip_zero_grad:
        step_cols["step/zero_grad_skipped"] = int(zero_skip)
    if skipped or zero_skip:
        optimizer.zero_grad(set_to_none=True)
        return
    if max_grad_norm is not None:
        torch.nn.utils.clip_grads_with_norm_(params, max_grad_norm, torch.tensor(grad_norm))
    with stepsize.scaled_lr(optimizer, scale):
        optimizer.step()
    _check_step(model, params, optimizer, grad_norm)


def update_metrics(batch: RolloutBatch, passed: BackwardPass, *, estimator: str, eps: float, grad_norm: float,
                   mech: dict | None, control, step_cols: dict) -> dict:
    """The update's row: ratio diagnostics of the whole batch, ``train/`` columns, the loss's clip
    fractions (``stale/``), the ratio metrics and, where asked, the ``mech/``, ``drift/`` and ``step/``
    columns."""
    lr_all = torch.cat(passed.seq_log_ratio)
    tok_lr = torch.cat(passed.token_log_ratio)
    weights = torch.cat(passed.weights) if passed.weights else None
    diag = estimators.diagnostics(lr_all, eps)
    rewards = batch.rewards.view(batch.prompts_per_step, batch.group_size)
    row = {DIAGNOSTIC_COLUMNS[k]: v for k, v in diag.items() if k in DIAGNOSTIC_COLUMNS}
    row.update({
        "train/reward_mean": float(batch.rewards.mean()),
        "train/loss": passed.loss,
        "train/grad_norm": grad_norm,
        "train/update_skipped": int(not math.isfinite(grad_norm)),
        "train/adv_zero_frac": float((rewards.max(-1).values == rewards.min(-1).values).float().mean()),
        "train/completion_len_mean": float(batch.completion_mask.sum(-1).mean()),
        "train/finished_frac": float(batch.finished.float().mean()),
    })
    if weights is not None:
        row.update({"train/weight_mean": float(weights.mean()), "train/weight_min": float(weights.min()),
                    "train/weight_max": float(weights.max())})
    for key, total in passed.clip_sums.items():
        row[f"stale/{key}"] = total / passed.clip_weights[key]
    row.update(ratio_metrics(lr_all, weights, tok_lr, batch.completion_mask, estimator, eps))
    if mech is not None:  # the mechanism probe ran
        row.update(mech)
        row.update(ratio_mechanism(lr_all, tok_lr, batch.completion_mask, eps))
    if control is not None and control.drift_diagnostics:
        row.update(drift_metrics(lr_all, tok_lr, batch.completion_mask))
    if control is not None and getattr(control, "early_warning", "off") != "off":  # the warning's statistic
        row["warn/kl"] = kl_per_token(tok_lr, batch.completion_mask)
    row.update(step_cols)
    return row


def _check_step(model, params, optimizer, grad_norm: float) -> None:
    """Refuse an optimiser step that made a parameter non-finite (the gradient was finite: the step
    itself overflowed), naming the optimiser, its settings and the parameter; the weights are not
    used further and no checkpoint is written from them."""
    if all(bool(torch.isfinite(p.detach()).all()) for p in params):
        return
    name = next(n for n, p in model.named_parameters() if not bool(torch.isfinite(p.detach()).all()))
    group = optimizer.param_groups[0]
    knobs = ", ".join(f"{k} {group[k]!r}" for k in ("lr", "weight_decay", "eps", "momentum") if k in group)
    raise ValueError(f"the optimiser step ({type(optimizer).__name__}: {knobs}) made parameter {name} non-finite from "
                     f"a finite gradient (norm {grad_norm:.4g}); the step is not kept and no checkpoint is written. "
                     "Lower the learning rate or the weight decay, or use float32 weights")


def _opob(model, batch: RolloutBatch, temperature: float, control) -> tuple[torch.Tensor, dict]:
    """VCPO's OPOB advantages of ``batch`` (:func:`llm_runs.stepsize.opob_advantages`) and the cost
    column ``perf/opob_s`` (seconds spent on the per-trajectory gradients)."""
    import time

    t0 = time.perf_counter()
    with torch.no_grad():
        logp = completion_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, temperature,
                                   batch.group_size)
    lr = (masked_token_log_ratio(logp, batch.behaviour_logp, batch.completion_mask)).sum(-1)
    norms = stepsize.trajectory_grad_sq_norms(model, batch, temperature)
    rewards = batch.rewards.view(batch.prompts_per_step, batch.group_size)
    if control is None:  # the defaults: the IS weight, normalised by the group's std, flat groups 0
        adv = stepsize.opob_recipe_advantages(rewards, lr.view_as(rewards), norms, "is", 0.0, {}, {})
    else:
        opob = {"opob_weight": getattr(control, "opob_weight", "is"), "opob_norm_by_std": control.opob_norm_by_std,
                "opob_flat_zero": getattr(control, "opob_flat_zero", True),
                "opob_std": getattr(control, "opob_std", "sample")}
        adv = stepsize.opob_recipe_advantages(rewards, lr.view_as(rewards), norms, control.estimator, control.eps,
                                              control.loss_options(), opob)
    return adv, {"perf/opob_s": time.perf_counter() - t0}


def staleness_metrics(batch: RolloutBatch, step: int) -> dict:
    s = (step - batch.versions).double()
    if bool((s < 0).any()):
        raise ValueError(f"a sample of version {int(batch.versions.max())} is newer than the learner at step {step}")
    return {"stale/staleness_mean": float(s.mean()), "stale/staleness_max": float(s.max())}


def flat_params(model) -> np.ndarray:
    """All parameters as one float64 vector (tests and diagnostics)."""
    return torch.cat([p.detach().double().flatten() for p in model.parameters()]).numpy()
