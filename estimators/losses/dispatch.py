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
    if estimator in SCHEMES:
        out = trajectory_loss(estimator, logp, old_logp, mask, advantages, group_size, eps, **opts)
    else:
        logp, old_logp = _widen(logp, old_logp)
        out = TOKEN_LOSSES[estimator].fn(logp, old_logp, mask, advantages, group_size, eps, **opts)
    if is_bounded(estimator):
        _refuse_non_finite(estimator, out.loss, advantages, options)
    return out


def _refuse_non_finite(estimator: str, loss, advantages, knobs: dict) -> None:
    """A bounded loss is finite, or the call is refused naming what made it overflow: advantages
    or a knob too large for the loss's dtype (its gradient's per-token factors are bounded by the
    same weights, so a finite loss has a finite gradient)."""
    if bool(torch.isfinite(loss.detach())):
        return
    adv = advantages if isinstance(advantages, torch.Tensor) else torch.as_tensor(advantages)
    given = ", ".join(f"{k} = {v!r}" for k, v in knobs.items()) or "the defaults"
    raise ValueError(f"{estimator!r}: the loss overflows {loss.dtype} "
                     f"(largest finite {torch.finfo(loss.dtype).max:g}) with advantages up to "
                     f"{float(adv.detach().abs().max()):g} and knobs {given}: scale the advantages down or choose a "
                     f"milder knob")
