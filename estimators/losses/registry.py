"""The registry of token-level losses and what every loss returns (:class:`LossOutput`).

A token loss registers itself with :func:`register_token_loss`, which also files its record
(knobs, label, style: :func:`estimators.records.record`); :func:`loss_names`, :func:`is_bounded`
and :func:`is_batch_coupled` answer for trajectory schemes and token losses alike."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .._compat import renamed_keywords
from ..records import record
from ..schemes import SCHEMES


@dataclass
class LossOutput:
    loss: torch.Tensor
    """scalar surrogate; minimise it."""
    seq_log_ratio: torch.Tensor
    """(prompts_per_step, G) detached trajectory log-ratios sum_t (log pi_theta - log pi_b)."""
    weights: torch.Tensor | None
    """(prompts_per_step, G) detached weights c (trajectory schemes only)."""
    metrics: dict
    """loss-specific statistics (e.g. ``token_clip_frac``); never the ratio diagnostics."""


@dataclass(frozen=True)
class TokenLoss:
    """A registered token-level loss: ``fn(logp, old_logp, mask, advantages, group_size, eps, **options)``."""

    name: str
    fn: Callable
    options: tuple  # option names beyond the knobs of estimators.params.PARAMS[name]
    batch_coupled: bool  # depends on a statistic of the whole batch passed (not separable by group)
    doc: str
    bounded: bool = True  # finite value and gradient for every finite input (else: +inf, never NaN)


TOKEN_LOSSES: dict[str, TokenLoss] = {}


def register_token_loss(name: str, *, options: tuple = (), batch_coupled: bool = False, bounded: bool = True,
                        **record_fields):
    """Register a token-level loss. ``bounded=False`` declares a loss whose value is unbounded for
    some finite input (PPO's one-sided clip with A < 0): it must give ``+inf`` there, never NaN.
    ``record_fields`` (params, label, style, mass_bound, knob_check) are the estimator's record
    (:func:`estimators.records.record`)."""
    def deco(fn):
        from ..schemes import check_registration

        check_registration(name, batch_coupled=batch_coupled, bounded=bounded)
        if isinstance(options, str) or not all(isinstance(o, str) for o in tuple(options)):
            raise ValueError(f"token loss {name!r}: options must be a tuple of knob names, got {options!r}")
        if name in TOKEN_LOSSES or name in SCHEMES:
            raise ValueError(f"a loss named {name!r} is already registered")
        record(name, **record_fields)
        TOKEN_LOSSES[name] = TokenLoss(name, fn, tuple(options), batch_coupled, (fn.__doc__ or "").strip(), bounded)
        return fn

    return deco


@renamed_keywords(name="estimator")  # deprecated 2026-12-07, removed after 2027-06-01
def is_bounded(estimator: str) -> bool:
    """True when ``estimator``'s loss and gradient are finite for every finite input in every dtype.
    Unbounded: the schemes ``is`` and ``tic_ppo`` (an overflowing surrogate is a ValueError) and
    the token losses with PPO's one-sided clip (``token_clip``, ``gspo``, ``opsm``: ``+inf`` where
    A < 0 and a ratio overflows, never NaN)."""
    if estimator in SCHEMES:
        return SCHEMES[estimator].bounded
    if estimator in TOKEN_LOSSES:
        return TOKEN_LOSSES[estimator].bounded
    raise ValueError(f"unknown loss {estimator!r}; valid: {', '.join(loss_names())}")


def loss_names() -> list[str]:
    """Every name :func:`policy_loss` accepts: trajectory schemes, then token-level losses."""
    return list(SCHEMES) + list(TOKEN_LOSSES)


@renamed_keywords(name="estimator")  # deprecated 2026-12-07, removed after 2027-06-01
def is_batch_coupled(estimator: str) -> bool:
    """True when ``estimator``'s loss on a batch is not the mean of its losses on the batch's groups."""
    if estimator in SCHEMES:
        return SCHEMES[estimator].batch_coupled
    if estimator in TOKEN_LOSSES:
        return TOKEN_LOSSES[estimator].batch_coupled
    raise ValueError(f"unknown loss {estimator!r}; valid: {', '.join(loss_names())}")
