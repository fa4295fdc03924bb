"""The optimiser of the RL updates, one of :data:`OPTIMIZERS`, built from the run's config.

``adam`` with no weight decay is exactly the optimiser every committed run used
(``torch.optim.Adam(params, lr)``), so those runs replay byte for byte. ``sgd`` with momentum 0
is THEORY §4's setting: theta_{t+1} = theta_t - eta g_hat_t with a fixed step eta. ``adamw`` with
weight decay 0.01 and ``max_grad_norm = 1.0`` is verl's actor default (TRL's default decay is 0).
Gradient-norm clipping is not the optimiser's business: :func:`llm_runs.update.policy_update`
applies ``max_grad_norm`` before the step, whatever the optimiser.
"""
from __future__ import annotations

import math

import torch

OPTIMIZERS = ("adam", "adamw", "sgd")


def check_optimizer(name, momentum, weight_decay) -> None:
    """Refuse an unknown optimiser or a knob it does not take (ValueError naming the value)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; valid: {', '.join(OPTIMIZERS)}")
    for knob, value in (("momentum", momentum), ("weight_decay", weight_decay)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{knob} must be a finite number >= 0, got {value!r}")
    if momentum >= 1:
        raise ValueError(f"momentum must be < 1, got {momentum!r}")
    if momentum and name != "sgd":
        raise ValueError(f"momentum = {momentum!r} applies to optimizer 'sgd' only (got optimizer {name!r}; "
                         f"Adam's moments are its betas)")


def make_optimizer(params, config) -> torch.optim.Optimizer:
    """The optimiser named by ``config.optimizer`` over ``params`` with ``config.lr`` (eta)."""
    check_optimizer(config.optimizer, config.momentum, config.weight_decay)
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
    if config.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    return torch.optim.SGD(params, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
