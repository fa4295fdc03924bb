"""One entry for every estimator: :func:`policy_loss` dispatches by name to a trajectory scheme's
surrogate or a registered token loss, its knobs checked by :func:`check_options` (and, with ``eps``, against
the dtype the loss computes in: :func:`estimators.losses.registry.check_loss_call`)."""
from __future__ import annotations

import torch

from .._compat import renamed_keywords
from .._validate import check_group_size
from ..schemes import SCHEMES
from .batch import _widen
from .registry import TOKEN_LOSSES, LossOutput, check_options, is_bounded
from .trajectory import trajectory_loss


@renamed_keywords(name="estimator")  # deprecated 2026-12-07, removed after 2027-06-01
def policy_loss(estimator: str, logp, old_logp, mask, advantages, group_size: int, eps: float,
                **options) -> LossOutput:
    """Dispatch by estimator name: any trajectory scheme of :data:`estimators.SCHEMES` or token-level loss of
    :data:`TOKEN_LOSSES`; ``options`` are its knobs (unknown ones refused with a ValueError)."""
    opts = check_options(estimator, options)
    group_size = check_group_size(group_size)

    def run(adv):  # a token loss gets copies of what it must not change (a scheme's: trajectory_loss)
        if estimator in SCHEMES:
            return trajectory_loss(estimator, logp, old_logp, mask, adv, group_size, eps, **opts)
        lp, old = _widen(logp, old_logp)
        return TOKEN_LOSSES[estimator].fn(lp.clone(), old.clone(), _copy(mask), _copy(adv), group_size, eps, **opts)

    out = run(advantages)
    if is_bounded(estimator):
        _refuse_non_finite(estimator, out, advantages, options, group_size, run)
    return out


def _copy(x):
    return x.clone() if isinstance(x, torch.Tensor) else x


class NonFiniteLoss(ValueError):
    """A loss declared bounded (:func:`is_bounded`) came out NaN or infinite: policy_loss's refusal of it, which
    names what made it so (not a refusal of an input outside the loss's domain)."""


def _refuse_non_finite(estimator: str, out: LossOutput, advantages, knobs: dict, G: int, run) -> None:
    """A bounded loss is finite, or the call is refused (:class:`NonFiniteLoss`) naming the cause: a weight the
    correction itself makes NaN or infinite at this group size G; the advantages' scale (the loss is finite with
    them scaled to at most 1); else the knobs given, or the correction's own computation at this G (its
    gradient's per-token factors are bounded by the same weights, so a finite loss has a finite gradient)."""
    loss = out.loss.detach()
    if bool(torch.isfinite(loss)):
        return
    what = "NaN" if bool(torch.isnan(loss)) else f"{float(loss):g}"
    adv = (advantages if isinstance(advantages, torch.Tensor) else torch.as_tensor(advantages)).detach()
    top = float(adv.abs().max()) if adv.numel() else 0.0
    given = ", ".join(f"{k} = {v!r}" for k, v in knobs.items()) or "the defaults"
    at = f"at G = {G} ({out.seq_log_ratio.shape[0]} group(s) of {G})"
    w = out.weights
    if w is not None and not bool(torch.isfinite(w).all()):
        g, i = (int(v) for v in torch.nonzero(~torch.isfinite(w))[0])
        kind = "a NaN" if bool(torch.isnan(w[g, i])) else "an infinite"
        raise NonFiniteLoss(f"{estimator!r} is declared bounded but gives {kind} weight {at}: group {g}, completion "
                            f"{i}, trajectory log-ratios {[round(float(v), 6) for v in out.seq_log_ratio[g]]}; the "
                            f"correction's own weights with the knobs {given}, not the advantages' scale (up to "
                            f"{top:g})")
    tried = 1.0 < top < float("inf")
    try:  # the same call with the advantages scaled to at most 1: finite there, their scale is the cause
        scaled_ok = tried and bool(torch.isfinite(run(adv / top).loss.detach()))
    except ValueError:
        scaled_ok = False
    if scaled_ok:
        raise NonFiniteLoss(f"{estimator!r}: the loss overflows {loss.dtype} (largest finite "
                            f"{torch.finfo(loss.dtype).max:g}) {at} with advantages up to {top:g}, and is finite "
                            f"with them scaled to at most 1 (knobs {given}): scale the advantages down")
    cause = (f"the knobs {given} or the correction's own computation" if knobs else
             "the correction's own computation (default knobs)")
    raise NonFiniteLoss(f"{estimator!r} is declared bounded but its loss is {what} {at} with advantages up to "
                        f"{top:g}{' (and scaled to at most 1)' if tried else ''}: not the advantages' "
                        f"scale; {cause} at this group size")
