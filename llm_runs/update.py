"""One policy-gradient update on a :class:`~llm_runs.rollout.RolloutBatch`.

The loss is :func:`estimators.losses.policy_loss` (the only definition of every scheme) and
the advantages :func:`estimators.advantages`; nothing here re-implements a weighting. With
``micro_batch_groups`` the batch is processed in chunks of whole groups (a group is never
split: GMC's lambda is a group statistic), each chunk's loss scaled by its share of the rows,
so the summed gradient is the full-batch gradient up to rounding.
"""
from __future__ import annotations

import math

import numpy as np
import torch

import estimators
from estimators.losses import is_batch_coupled, masked_token_log_ratio, policy_loss

from . import stepsize
from .mechanism import MechanismProbe
from .metrics import DIAGNOSTIC_COLUMNS
from .rollout import RolloutBatch, completion_logprobs
from .stepsize import TRAINER_ADVANTAGES
from .theory import drift_metrics, ratio_mechanism, ratio_metrics


def group_advantages(batch: RolloutBatch, kind: str) -> torch.Tensor:
    """A_i of THEORY §1 per group, shape (num_groups, G)."""
    return estimators.advantages(batch.rewards.view(batch.num_groups, batch.group_size).double(), kind).float()


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
    """
    model.train()
    G, n_groups = batch.group_size, batch.num_groups
    step_cols: dict = {}
    if advantage in TRAINER_ADVANTAGES:
        adv, step_cols = _opob(model, batch, temperature, control)
    else:
        adv = group_advantages(batch, advantage)
    if getattr(control, "traj_agg", "sum") == "token-mean":  # VCPO's seq-mean-token-mean: c_i A_i / |o_i|
        adv = adv / batch.completion_mask.sum(-1).clamp(min=1).view(n_groups, G).to(adv.dtype)
    kw = dict(loss_options or {})
    chunk = micro_batch_groups or n_groups
    if chunk < n_groups and is_batch_coupled(estimator):
        raise ValueError(f"estimator {estimator!r} uses a statistic of the whole batch: it cannot be split into "
                         f"micro-batches of {chunk} groups (set micro_batch_groups = 0)")
    optimizer.zero_grad(set_to_none=True)
    probe = MechanismProbe(model) if mechanism else None
    loss_total, seq_lr, weights, extra, extra_w, tok_lr = 0.0, [], [], {}, {}, []
    for g0 in range(0, n_groups, chunk):
        g1 = min(g0 + chunk, n_groups)
        part = batch.groups(g0, g1)
        logp = completion_logprobs(model, part.prompt_ids, part.prompt_mask, part.completion_ids, temperature, G)
        out = policy_loss(estimator, logp, part.behaviour_logp, part.completion_mask, adv[g0:g1], G, eps, **kw)
        share = (g1 - g0) / n_groups
        (out.loss * share).backward(retain_graph=probe is not None)
        if probe is not None:
            probe.chunk(out.loss, logp, part, adv[g0:g1].reshape(-1), share)
        loss_total += float(out.loss.detach()) * share
        seq_lr.append(out.seq_log_ratio)
        tok_lr.append(masked_token_log_ratio(logp.detach(), part.behaviour_logp, part.completion_mask))
        if out.weights is not None:
            weights.append(out.weights)
        for key in ("token_clip_frac", "seq_clip_frac"):
            if key in out.metrics:
                w = float(part.completion_mask.sum()) if key == "token_clip_frac" else (g1 - g0)
                extra[key] = extra.get(key, 0.0) + out.metrics[key] * w
                extra_w[key] = extra_w.get(key, 0.0) + w
    params = [p for p in model.parameters() if p.grad is not None]
    grad_norm = float(torch.nn.utils.get_total_norm([p.grad for p in params]))
    skipped = not math.isfinite(grad_norm)
    mech = probe.finish(temperature) if probe is not None else {}
    lr_all = torch.cat(seq_lr)
    scale = 1.0
    if control is not None and stepsize.is_active(control):
        step_cols.update(stepsize.step_scale(control, lr_all, torch.cat(weights) if weights else None))
        scale = step_cols["step/lr_scale"]
    zero_skip = bool(control is not None and control.skip_zero_grad and grad_norm == 0.0)
    if control is not None and control.skip_zero_grad:
        step_cols["step/zero_grad_skipped"] = int(zero_skip)
    if skipped or zero_skip:
        optimizer.zero_grad(set_to_none=True)
    else:
        if max_grad_norm is not None:
            torch.nn.utils.clip_grads_with_norm_(params, max_grad_norm, torch.tensor(grad_norm))
        with stepsize.scaled_lr(optimizer, scale):
            optimizer.step()
        _check_step(model, params, optimizer, grad_norm)
    diag = estimators.diagnostics(lr_all, eps)
    rewards = batch.rewards.view(n_groups, G)
    row = {DIAGNOSTIC_COLUMNS[k]: v for k, v in diag.items() if k in DIAGNOSTIC_COLUMNS}
    row.update({
        "train/reward_mean": float(batch.rewards.mean()),
        "train/loss": loss_total,
        "train/grad_norm": grad_norm,
        "train/update_skipped": int(skipped),
        "train/adv_zero_frac": float((rewards.max(-1).values == rewards.min(-1).values).float().mean()),
        "train/completion_len_mean": float(batch.completion_mask.sum(-1).mean()),
        "train/finished_frac": float(batch.finished.float().mean()),
    })
    if weights:
        c = torch.cat(weights)
        row.update({"train/weight_mean": float(c.mean()), "train/weight_min": float(c.min()),
                    "train/weight_max": float(c.max())})
    for key, total in extra.items():
        row[f"stale/{key}"] = total / extra_w[key]
    row.update(ratio_metrics(lr_all, torch.cat(weights) if weights else None, torch.cat(tok_lr),
                             batch.completion_mask, estimator, eps))
    if probe is not None:
        row.update(mech)
        row.update(ratio_mechanism(lr_all, torch.cat(tok_lr), batch.completion_mask, eps))
    if control is not None and control.drift_diagnostics:
        row.update(drift_metrics(lr_all, torch.cat(tok_lr), batch.completion_mask))
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
    column ``step/opob_s`` (seconds spent on the per-trajectory gradients)."""
    import time

    t0 = time.perf_counter()
    with torch.no_grad():
        logp = completion_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, temperature,
                                   batch.group_size)
    lr = (masked_token_log_ratio(logp, batch.behaviour_logp, batch.completion_mask)).sum(-1)
    norms = stepsize.trajectory_grad_sq_norms(model, batch, temperature)
    rewards = batch.rewards.view(batch.num_groups, batch.group_size)
    norm_by_std = True if control is None else control.opob_norm_by_std
    flat_zero = True if control is None else getattr(control, "opob_flat_zero", True)
    if getattr(control, "opob_weight", "is") == "vcpo":  # VCPO's norm is that of c_i grad log pi(o_i)
        c = estimators.weights(control.estimator, lr.view_as(rewards).double(), control.eps, **control.loss_options())
        norms = norms * torch.as_tensor(c, dtype=norms.dtype) ** 2
    adv = stepsize.opob_advantages(rewards, lr.view_as(rewards), norms, norm_by_std, flat_zero,
                                   getattr(control, "opob_std", "sample")).float()
    return adv, {"perf/opob_s": time.perf_counter() - t0}


def staleness_metrics(batch: RolloutBatch, step: int) -> dict:
    s = (step - batch.versions).double()
    if bool((s < 0).any()):
        raise ValueError(f"a sample of version {int(batch.versions.max())} is newer than the learner at step {step}")
    return {"stale/staleness_mean": float(s.mean()), "stale/staleness_max": float(s.max())}


def flat_params(model) -> np.ndarray:
    """All parameters as one float64 vector (tests and diagnostics)."""
    return torch.cat([p.detach().double().flatten() for p in model.parameters()]).numpy()
