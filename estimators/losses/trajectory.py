"""The surrogate of a trajectory-level scheme (:mod:`estimators.schemes`): its autograd gradient is
THEORY §2's estimator, with the stop-gradients the scheme's ``surrogate`` names (``clamp`` or
``detached``; see :mod:`estimators.losses`)."""
from __future__ import annotations

import math

import torch

from .._compat import renamed_keywords
from .._validate import check_eps
from ..schemes import get_scheme, weights
from .batch import _check_batch, _widen, trajectory_log_ratio
from .registry import LossOutput, check_loss_call


@renamed_keywords(scheme="estimator")  # deprecated 2026-12-07, removed after 2027-06-01
def trajectory_loss(estimator: str, logp, old_logp, mask, advantages, group_size: int, eps: float,
                    **params) -> LossOutput:
    """Surrogate for a trajectory-level estimator (see module docstring).

    Args:
        logp: (B, T) per-token log-probs under pi_theta (requires grad).
        old_logp: (B, T) behaviour log-probs log pi_b, recorded at sampling time.
        mask: (B, T) 1 on completion tokens.
        advantages: (B,) or (B // G, G).
        group_size: G; B must be a multiple of G.
        eps: the cap threshold.
        **params: the estimator's knobs (:data:`estimators.params.PARAMS`).
    """
    spec = get_scheme(estimator)
    eps = check_eps(eps)
    check_loss_call(estimator, eps, params, logp)  # every knob in range and held by the loss's dtype
    in_dtype = logp.dtype if isinstance(logp, torch.Tensor) else None
    logp, old_logp = _widen(logp, old_logp)
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    lr = trajectory_log_ratio(logp, old_logp.detach(), m).reshape(B // group_size, group_size)
    lr_d = lr.detach()
    # the scheme gets copies: one that writes into its input never changes seq_log_ratio, the surrogate or the caller's
    c = weights(estimator, lr_d.clone(), eps, adv.clone() if spec.needs_advantages else None, **params)
    # A = 0 contributes nothing, whatever its weight: an overflowed c never meets 0 (inf * 0)
    c_used = torch.where(adv == 0, torch.zeros((), dtype=c.dtype, device=c.device), c)
    if spec.surrogate == "clamp":
        factor = torch.exp(torch.clamp(lr, max=math.log1p(eps)))
    else:
        factor = c_used * torch.exp(lr - lr_d)
    loss = -(factor * adv).mean()
    if not spec.bounded:
        _refuse_overflow(estimator, loss, c_used, adv, lr_d, in_dtype)
    return LossOutput(loss, lr_d, c, {})


def _refuse_overflow(estimator: str, loss, c, adv, lr_d, in_dtype) -> None:
    """An unbounded scheme (``is``, ``tic_ppo``) whose surrogate or gradient overflows is refused:
    weights of +inf with advantages of both signs have no value (``inf - inf``), and a term
    ``c A`` beyond the log-probs' dtype is an infinite gradient there."""
    bad = ~torch.isfinite((c * adv).to(in_dtype))
    if bool(torch.isfinite(loss.detach())) and not bool(bad.any()):
        return
    where = ""
    if bool(bad.any()):
        g, i = (int(v) for v in torch.nonzero(bad)[0])
        where = f" (group {g}, completion {i}: trajectory log-ratio {float(lr_d[g, i]):.6g})"
    wider = "" if in_dtype == torch.float64 else " or float64 log-probs"
    raise ValueError(f"scheme {estimator!r} is unbounded and its surrogate overflows {in_dtype}{where}; "
                     f"use a bounded scheme (gmc, tic_trunc, ...){wider}")
