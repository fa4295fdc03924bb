"""Step-size control: corrections that act on the step rather than on the gradient.

A normalising optimiser throws away a common scale of the gradient (THEORY §8.1): under signSGD a
correction that shrinks every weight of the batch by one factor, as GMC does with one group per
batch, leaves the path where IS's is; under Adam only a factor constant in time does (a factor that
varies from step to step, as GMC's lambda_t does, moves Adam's path, but not by the factor itself:
the step length stays Adam's). These controls move that factor to the learning rate, where no
optimiser can undo it:

* **ESS scaling** (VCPO, Huang et al. 2026, arXiv 2602.17616; mit-han-lab/vcpo
  ``verl/workers/actor/megatron_actor.py:_optimizer_step_with_buffer`` and
  ``recipe/fully_async_policy/staleness_utils.py:compute_ess_info``): over the update's
  sequences, ``rho_ess = (sum_i w_i)^2 / ((sum_i w_i^2 + 1e-8) N)`` and the step is
  ``eta * min(1, rho_ess / base)^(1/2)`` (``sqrt``, their rule for AdamW-style optimisers) or
  ``eta * min(1, rho_ess / base)`` (``linear``); ``w`` are the raw sequence ratios or, with
  ``use_clipped``, the estimator's weights (VCPO: ``min(w, 8)``).
* **GMC's step form** (THEORY §8): ``eta * s_t`` with ``s_t = (1/B) sum_g lambda_g``, the mean over
  the batch's B groups of GMC's factor ``lambda_g = min(1, (1+eps) / mean_i w_gi)`` on the raw ratios,
  whatever the estimator.
* **Zero-gradient skip**: an update whose gradient is exactly zero (every sequence masked) does not
  step the optimiser; Adam would otherwise keep moving on its momentum.
* **OPOB** (VCPO's off-policy optimal baseline, ``staleness_utils.py:compute_opob_baseline`` with
  ``scope=group, use_is_weights=True``): per group ``b* = sum_i W_i R_i / (sum_i W_i + 1e-8)``,
  ``W_i = w_i^2 ||grad log pi(tau_i)||^2``, and ``A_i = (R_i - b*) / std_g(R)`` (``norm_by_std``, when
  the group's std exceeds 1e-8; Bessel-corrected like the group's GRPO std), an advantage mode of
  the trainer (``advantage = "opob"``): it needs one backward pass per trajectory.

Every control is off by default (the committed runs replay byte for byte) and recorded in each
run's config; the ``step/`` columns log what each did per update. :func:`scaled_lr` is the one
place a scale meets an optimiser, for this trainer, the verl actor hook and the TRL callback.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass

import torch

ESS_RULES = ("none", "sqrt", "linear")
RECIPES = {
    "vcpo": {"estimator": "seq_tis", "seq_tis_cap": 8.0, "ess_scaling": "sqrt", "ess_base_ratio": 1.0,
             "ess_use_clipped": False, "advantage": "opob", "opob_norm_by_std": True, "max_grad_norm": 1.0},
}
"""Named recipes: settings that together make a published method. ``vcpo``: VCPO's scripts
(mit-han-lab/vcpo ``recipe/fully_async_policy/shell/vcpo/math/vcpo_k=10.sh``): sequence-level
truncated IS at 8 (``rollout_is="sequence"``, ``rollout_is_threshold=8.0``; PPO clipping off,
``clip_ratio_low=1.0, clip_ratio_high=1e9``), ESS sqrt scaling on the raw ratios with base 1.0,
OPOB per group on the IS weights with ``norm_by_std``, gradient clipping 1.0. Their optimiser
(AdamW, weight decay 0.1, lr 1e-6 with warm-up) is the run's own choice here."""
TRAINER_ADVANTAGES = ("opob",)
"""Advantage modes the trainer computes itself (they need the model, not only the rewards)."""
OPOB_EPS = 1e-8
ESS_EPS = 1e-8


@dataclass(frozen=True)
class StepControl:
    """The step-size controls outside this toolkit's trainer (the TRL callback, a verl actor, any loop),
    with the names the trainer's config uses: ``scale = step_scale(control, seq_log_ratio, weights)``,
    then ``with scaled_lr(optimizer, scale["step/lr_scale"]): optimizer.step()``."""

    estimator: str = "gmc"
    eps: float = 0.2
    ess_scaling: str = "none"
    ess_base_ratio: float = 1.0
    ess_use_clipped: bool = False
    gmc_step: bool = False
    skip_zero_grad: bool = False
    opob_norm_by_std: bool = True
    drift_diagnostics: bool = False

    def __post_init__(self):
        check_step_control(self)


def check_step_control(cfg) -> None:
    """Refuse a bad step-control setting (ValueError naming it)."""
    if cfg.ess_scaling not in ESS_RULES:
        raise ValueError(f"unknown ess_scaling {cfg.ess_scaling!r}; valid: {', '.join(ESS_RULES)}")
    base = cfg.ess_base_ratio
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not math.isfinite(base) or not 0 < base <= 1:
        raise ValueError(f"ess_base_ratio must be in (0, 1], got {base!r}")
    for name in ("ess_use_clipped", "gmc_step", "skip_zero_grad", "opob_norm_by_std", "drift_diagnostics"):
        if not isinstance(getattr(cfg, name), bool):
            raise ValueError(f"{name} must be true or false, got {getattr(cfg, name)!r}")
    if cfg.ess_use_clipped:
        from estimators import SCHEMES

        if cfg.estimator not in SCHEMES:
            raise ValueError(f"ess_use_clipped computes rho_ess on the estimator's trajectory weights; estimator "
                             f"{cfg.estimator!r} is a token-level loss and has none")


def ess_ratio(values: torch.Tensor) -> float:
    """VCPO's ``ess_ratio``: ``(sum w)^2 / ((sum w^2 + 1e-8) N)`` over every sequence of the update, in
    float64 as their code sums Python floats. Where ``sum w^2`` overflows float64 the same quantity is
    taken in log space (the 1e-8 is then negligible)."""
    w = values.detach().double().reshape(-1)
    n = w.numel()
    if n == 0:
        return 0.0
    s1, s2 = float(w.sum()), float((w * w).sum())
    if math.isfinite(s1) and math.isfinite(s2):
        return s1 * s1 / (s2 + ESS_EPS) / n
    lw = torch.log(w)
    return math.exp(float(2 * torch.logsumexp(lw, 0) - torch.logsumexp(2 * lw, 0))) / n


def ess_scale(rule: str, ratio: float, base: float = 1.0) -> float:
    """VCPO's learning-rate factor: ``min(1, ratio / max(base, 1e-8))``, square-rooted for ``sqrt``."""
    if rule not in ESS_RULES:
        raise ValueError(f"unknown ess_scaling {rule!r}; valid: {', '.join(ESS_RULES)}")
    if rule == "none":
        return 1.0
    s = min(1.0, float(ratio) / max(float(base), 1e-8))
    return s ** 0.5 if rule == "sqrt" else s


def gmc_step_scale(seq_log_ratio: torch.Tensor, eps: float) -> float:
    """GMC's step form: the mean over the batch's groups of ``lambda_g = min(1, (1+eps) / mean_i w_gi)``
    on the raw trajectory ratios (``seq_log_ratio`` of shape (num_groups, G))."""
    import estimators

    return float(estimators.gmc_lambda(seq_log_ratio.detach().double(), eps).mean())


def step_scale(cfg, seq_log_ratio: torch.Tensor, weights: torch.Tensor | None) -> dict[str, float]:
    """The step's factor under ``cfg``'s controls and what each part contributed: ``{"step/lr_scale": s,
    "step/ess_ratio": rho (ESS scaling), "step/gmc_scale": s_t (GMC's step form)}``; ``{}`` when none is on."""
    out: dict[str, float] = {}
    scale = 1.0
    if cfg.ess_scaling != "none":
        if cfg.ess_use_clipped:
            if weights is None:
                raise ValueError(f"ess_use_clipped: estimator {cfg.estimator!r} gave no trajectory weights")
            rho = ess_ratio(weights)
        else:
            rho = ess_ratio(torch.exp(seq_log_ratio.detach().double()))
        out["step/ess_ratio"] = rho
        scale *= ess_scale(cfg.ess_scaling, rho, cfg.ess_base_ratio)
    if cfg.gmc_step:
        g = gmc_step_scale(seq_log_ratio, cfg.eps)
        out["step/gmc_scale"] = g
        scale *= g
    if out:
        out["step/lr_scale"] = scale
    return out


def is_active(cfg) -> bool:
    """Whether ``cfg`` scales its steps (the ``step/`` scale columns are logged)."""
    return cfg.ess_scaling != "none" or bool(cfg.gmc_step)


def scale_lrs(optimizer: torch.optim.Optimizer, scale: float) -> list[float]:
    """Multiply every parameter group's ``lr`` by ``scale``; the rates before, for :func:`restore_lrs`."""
    if not (isinstance(scale, float) and math.isfinite(scale) and scale >= 0):
        raise ValueError(f"a step scale must be a finite float >= 0, got {scale!r}")
    base = [pg["lr"] for pg in optimizer.param_groups]
    for pg, lr in zip(optimizer.param_groups, base):
        pg["lr"] = lr * scale
    return base


def restore_lrs(optimizer: torch.optim.Optimizer, base: list[float]) -> None:
    for pg, lr in zip(optimizer.param_groups, base):
        pg["lr"] = lr


@contextmanager
def scaled_lr(optimizer: torch.optim.Optimizer, scale: float):
    """Every parameter group's ``lr`` multiplied by ``scale`` inside the block, restored after it
    (VCPO sets and restores ``pg["lr"]`` around ``optimizer.step()`` the same way). ``scale == 1`` leaves
    the optimiser untouched."""
    if scale == 1.0:
        yield
        return
    base = scale_lrs(optimizer, scale)
    try:
        yield
    finally:
        restore_lrs(optimizer, base)


def opob_advantages(rewards: torch.Tensor, seq_log_ratio: torch.Tensor, grad_sq_norms: torch.Tensor,
                    norm_by_std: bool = True) -> torch.Tensor:
    """VCPO's OPOB advantages, shape (num_groups, G): per group ``b* = sum_i W_i R_i / (sum_i W_i + 1e-8)``
    with ``W_i = w_i^2 ||grad log pi(tau_i)||^2`` (``grad_sq_norms``), then ``R_i - b*``, divided by the
    group's reward std (Bessel-corrected) where ``norm_by_std`` and that std exceeds 1e-8."""
    r = rewards.double()
    if r.ndim != 2 or seq_log_ratio.shape != r.shape or grad_sq_norms.shape != r.shape:
        raise ValueError(f"rewards, seq_log_ratio and grad_sq_norms must share one (num_groups, G) shape, got "
                         f"{tuple(r.shape)}, {tuple(seq_log_ratio.shape)}, {tuple(grad_sq_norms.shape)}")
    W = torch.exp(2 * seq_log_ratio.detach().double()) * grad_sq_norms.double()
    b = (W * r).sum(-1, keepdim=True) / (W.sum(-1, keepdim=True) + OPOB_EPS)
    adv = r - b
    if norm_by_std:
        std = r.std(-1, correction=1, keepdim=True)
        adv = torch.where(std > 1e-8, adv / torch.where(std > 1e-8, std, 1.0), adv)
    return adv


def trajectory_grad_sq_norms(model, batch, temperature: float = 1.0) -> torch.Tensor:
    """``||grad_theta sum_t log pi_theta(o_t | q, o_<t)||^2`` of every trajectory of ``batch``, shape
    (num_groups, G): one forward and backward pass per trajectory (the parameters' ``.grad`` are left
    as they were)."""
    from .rollout import completion_logprobs

    params = [p for p in model.parameters() if p.requires_grad]
    out = torch.zeros(batch.rewards.numel(), dtype=torch.float64)
    for i in range(batch.rewards.numel()):
        sl = slice(i, i + 1)
        logp = completion_logprobs(model, batch.prompt_ids[sl], batch.prompt_mask[sl], batch.completion_ids[sl],
                                   temperature, 1)
        total = (logp * batch.completion_mask[sl]).sum()
        grads = torch.autograd.grad(total, params, allow_unused=True)
        out[i] = sum(float((g.double() ** 2).sum()) for g in grads if g is not None)
    return out.view(batch.num_groups, batch.group_size)
