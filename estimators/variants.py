"""GMC variants that separate its two ingredients: the group-mass rescaling and how each sign of
the advantage is weighted. Registered in :data:`estimators.SCHEMES` like every scheme (one
log-space definition for numpy and torch), so the trainer, the simulators and the adapters get
them. They exist to test *why* GMC behaves as it does, by intervention:

===========  ==============================================================  ====================
name         c_i                                                             group mass sup
===========  ==============================================================  ====================
gmc_cap      min(lambda w_i, C), C = kappa (1+eps)                           (1+eps) min(1, kappa)
gmc_topr     A_i >= 0: lambda_+ w_i; A_i < 0: min(w_i, 1)                    1+eps
topr_gmc     A_i >= 0: 1;            A_i < 0: lambda_- w_i                   1+eps
===========  ==============================================================  ====================

``lambda`` is GMC's group scale (:func:`estimators.schemes.gmc_log_weights`). The one-sign
scales are GMC's rule applied to one sign's trajectories of the group only:
``lambda_s = min(1, (1+eps) / mean_{i in S} w_i)`` with ``S = {i : A_i >= 0}`` (``+``) or
``{i : A_i < 0}`` (``-``): the mean is over the ``|S|`` trajectories of that sign (not over all
G), so that sign's own mass is capped at 1+eps exactly as GMC caps a whole group's; an empty
``S`` leaves nothing to scale. The sign split is TOPR's (:func:`estimators.peers.topr_log_weights`:
``A_i >= 0`` counts as positive). Every group's mass stays at most 1+eps (each sign's part is at
most its share times 1+eps, and TOPR's parts at most their share times 1), so all three are
members of C_eps.
"""
from __future__ import annotations

import math

from ._backend import log1p_scalar
from .params import Param
from .records import Style
from .schemes import gmc_log_weights, register_scheme


def _subset_log_lambda(log_ratio, keep, eps, ops):
    """log of GMC's scale computed over the trajectories where ``keep`` holds, per group (shape
    (prompts_per_step, 1)): ``min(0, log(1+eps) - log mean_{keep} w)``; 0 for a group with none kept."""
    masked = ops.where(keep, log_ratio, ops.full_like(log_ratio, -math.inf))
    m = ops.rowmax(masked)
    empty = m == -math.inf
    m0 = ops.where(empty, ops.full_like(m, 0.0), m)
    n = ops.rowsum(ops.where(keep, ops.full_like(log_ratio, 1.0), ops.full_like(log_ratio, 0.0)))
    n1 = ops.where(empty, ops.full_like(n, 1.0), n)
    lse = m0 + ops.log(ops.rowsum(ops.exp(masked - m0)))  # log sum_{keep} w (-inf when none kept)
    log_mean = lse - ops.log(n1)
    return ops.where(empty, ops.full_like(m, 0.0), ops.clamp_max(log1p_scalar(eps) - log_mean, 0.0))


@register_scheme("gmc_cap", family="variant", in_class=True,
                 sup_mass=lambda eps, B, kappa: (1.0 + eps) * min(1.0, kappa),
                 label="GMC + trajectory cap", style=Style("#F0A070", "o", 15),
                 params=(Param("kappa", 1.0, "kappa", "gmc_cap: per-trajectory cap C = kappa (1+eps) applied after "
                               "GMC's group rescaling (1: no trajectory above 1+eps)"),))
def gmc_cap_log_weights(log_ratio, eps, advantages, ops, kappa):
    """GMC, then a per-trajectory cap: c_i = min(lambda w_i, C), C = kappa (1+eps). With
    kappa = 1 no single trajectory weighs more than 1+eps (GMC alone allows up to G(1+eps));
    the mass stays at most GMC's. ``kappa`` is the knob (:data:`estimators.params.PARAMS`)."""
    return ops.clamp_max(gmc_log_weights(log_ratio, eps, advantages, ops), math.log(kappa) + log1p_scalar(eps))


@register_scheme("gmc_topr", family="variant", in_class=True, needs_advantages=True, sup_mass=lambda eps, B: 1.0 + eps,
                 label="GMC(+) / TOPR(-)", style=Style("#B05000", "s", 16))
def gmc_topr_log_weights(log_ratio, eps, advantages, ops):
    """GMC's rescaling on the positive-advantage trajectories (A_i >= 0: c_i = lambda_+ w_i, the
    mean taken over those trajectories of the group), TOPR's truncation on the negative ones
    (A_i < 0: c_i = min(w_i, 1))."""
    pos = advantages >= 0
    lam = _subset_log_lambda(log_ratio, pos, eps, ops)
    return ops.where(pos, log_ratio + lam, ops.clamp_max(log_ratio, 0.0))


@register_scheme("topr_gmc", family="variant", in_class=True, needs_advantages=True, sup_mass=lambda eps, B: 1.0 + eps,
                 label="TOPR(+) / GMC(-)", style=Style("#2E7D6E", "D", 17))
def topr_gmc_log_weights(log_ratio, eps, advantages, ops):
    """TOPR's ``c = 1`` on the positive-advantage trajectories (A_i >= 0), GMC's rescaling on the
    negative ones (A_i < 0: c_i = lambda_- w_i, the mean taken over those trajectories)."""
    neg = advantages < 0
    lam = _subset_log_lambda(log_ratio, neg, eps, ops)
    return ops.where(neg, log_ratio + lam, ops.full_like(log_ratio, 0.0))
