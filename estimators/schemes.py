"""Trajectory-level weighting schemes of THEORY.md §2, one pure function each.

Every scheme maps per-trajectory log-ratios ``log_ratio[g, i] = log pi_theta(o_i|q_g)
- log pi_b(o_i|q_g)``, shape ``(prompts_per_step, G)``, to the **log** of its weights
``c_i`` (``-inf`` where a weight is exactly 0). Working in log space keeps every
bounded scheme finite for log-ratios of +-1000; only ``exp`` of bounded
quantities is taken. :func:`weights` is the public entry point.

The functions are written against :mod:`estimators._backend` and so run
unchanged on numpy arrays and torch tensors.

=========  ===================================================  =====================
name       c_i                                                  in C_eps (THEORY §2)?
=========  ===================================================  =====================
is         w_i                                                  no
stale      1                                                    yes
tic_mask   w_i 1{w_i <= 1+eps}                                  yes
tic_trunc  min(w_i, 1+eps)                                      yes
tic_ppo    w_i 1{w_i <= 1+eps or A_i < 0}                       no (reference only)
gmc        lambda w_i, lambda = min(1, (1+eps) / mean_j w_j)    yes
snis       w_i / mean_j w_j                                     yes
=========  ===================================================  =====================

Published peers registered in the same table by :mod:`estimators.peers`: ``topr`` (in the
class), ``seq_tis_bn`` (batch-normalised; in the class only with one group per batch),
``seq_mis`` (in the class iff its upper bound hi <= 1+eps). Each scheme carries its exact
membership rule (:meth:`Scheme.member`), its surrogate kind (:data:`SURROGATES`) and whether
its weights couple the groups of a batch (``batch_coupled``); knobs live in
:data:`estimators.params.PARAMS`.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ._backend import log1p_scalar, ops_for, widen
from ._compat import renamed_keywords
from ._validate import (
    check_eps,
    check_finite,
    check_groups,
    check_same_shape,
    match_like,
)
from .records import Style, record

SURROGATES = ("detached", "clamp")
"""How :func:`estimators.losses.trajectory_loss` differentiates a scheme:

* ``detached``: ``sg(c) * exp(l - sg(l)) * A``, value ``c A``, gradient ``c A grad l``;
* ``clamp``: ``exp(min(l, log(1+eps))) * A``, the clamped surrogate ``min(w, 1+eps) A``, whose
  gradient is ``w 1{w <= 1+eps} A grad l`` (TIC-mask: clamped trajectories get none)."""


@dataclass(frozen=True)
class Scheme:
    """A registered weighting scheme."""

    name: str
    log_weights: Callable  # (log_ratio, eps, advantages, ops, **params) -> log c
    in_class: bool  # member of C_eps (THEORY §2) for every eps > 0 at the default knobs, any batch
    needs_advantages: bool = False
    bounded: bool = True  # weights stay finite for any finite log-ratio
    doc: str = ""
    weights_fn: Callable | None = None  # optional faster direct form; must equal exp(log_weights)
    surrogate: str = "detached"  # one of SURROGATES: how the torch surrogate differentiates it
    batch_coupled: bool = False  # a group's weights depend on the other groups of the array passed
    sup_mass: Callable | None = None  # (eps, prompts_per_step, **params) -> sup_w of a group's mass (1/G) sum_i c_i
    family: str = "theory"  # one of FAMILIES: where the scheme comes from

    @renamed_keywords(num_groups="prompts_per_step")  # deprecated 2026-12-07, removed after 2027-06-01
    def group_mass_sup(self, eps: float, prompts_per_step: int = 1, **params) -> float:
        """The exact supremum over all ratios of one group's mass ``(1/G) sum_i c_i`` when the
        array passed holds ``prompts_per_step`` groups (THEORY §2: member of C_eps iff <= 1+eps)."""
        from .params import resolve

        return float(self.sup_mass(check_eps(eps), int(prompts_per_step), **resolve(self.name, params)))

    @renamed_keywords(num_groups="prompts_per_step")  # deprecated 2026-12-07, removed after 2027-06-01
    def member(self, eps: float, prompts_per_step: int = 1, **params) -> bool:
        """Exact membership in C_eps: the mass cap 1+eps holds for every ratio vector."""
        return self.group_mass_sup(eps, prompts_per_step, **params) <= 1 + check_eps(eps)


SCHEMES: dict[str, Scheme] = {}

FAMILIES = ("theory", "peer", "variant")
"""Where a scheme comes from: THEORY §2's family (a)-(f), a published or shipped peer
(:mod:`estimators.peers`, :mod:`estimators.peers_2025`), or a GMC variant of the mechanism study
(:mod:`estimators.variants`)."""


NAME_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"
"""A correction's name: letters, digits, ``_``, ``.``, ``-`` (no path separator; a report card's folder
is named after it)."""


def check_registration(name, **flags) -> None:
    """Refuse a registration whose name is not a plain name (:data:`NAME_PATTERN`, not ``.``/``..``) or
    whose declared flags are not booleans (``in_class="no"`` is a string, which is true): a ValueError
    naming the field and the value."""
    import re

    if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name) or name in (".", ".."):
        raise ValueError(f"a correction's name must be letters, digits, '_', '.' or '-' (no path parts), got "
                         f"{name!r}")
    for field_name, value in flags.items():
        if not isinstance(value, bool):
            raise ValueError(f"correction {name!r}: {field_name} must be True or False, got {value!r} "
                             f"({type(value).__name__})")


def register_scheme(name: str, *, family: str, in_class: bool, sup_mass: Callable, needs_advantages: bool = False,
                    bounded: bool = True, weights_fn: Callable | None = None, surrogate: str = "detached",
                    batch_coupled: bool = False, **record_fields):
    """Decorator registering ``fn`` under ``name`` in ``family`` (:data:`FAMILIES`); a taken name is refused.

    ``sup_mass(eps, prompts_per_step, **params)`` is the exact supremum of a group's mass (the
    membership rule of THEORY §2); ``fn`` takes the knobs of ``record_fields["params"]``, and the other
    ``record_fields`` (label, style, mass_bound, knob_check) are the estimator's record
    (:func:`estimators.records.record`)."""

    def deco(fn):
        if name in SCHEMES:
            raise ValueError(f"a scheme named {name!r} is already registered "
                             f"({SCHEMES[name].log_weights.__qualname__})")
        check_registration(name, in_class=in_class, needs_advantages=needs_advantages, bounded=bounded,
                           batch_coupled=batch_coupled)
        if not callable(sup_mass):
            raise ValueError(f"scheme {name!r}: sup_mass must be a function sup_mass(eps, prompts_per_step, **knobs), "
                             f"got {sup_mass!r}")
        if weights_fn is not None and not callable(weights_fn):
            raise ValueError(f"scheme {name!r}: weights_fn must be a function or None, got {weights_fn!r}")
        if not isinstance(surrogate, str) or surrogate not in SURROGATES:
            raise ValueError(f"unknown surrogate {surrogate!r}; valid: {', '.join(SURROGATES)}")
        if not isinstance(family, str) or family not in FAMILIES:
            raise ValueError(f"unknown scheme family {family!r}; valid: {', '.join(FAMILIES)}")
        record(name, **record_fields)
        SCHEMES[name] = Scheme(name, fn, in_class, needs_advantages, bounded, (fn.__doc__ or "").strip(), weights_fn,
                               surrogate, batch_coupled, sup_mass, family)
        return fn

    return deco


@renamed_keywords(name="estimator")  # deprecated 2026-12-07, removed after 2027-06-01
def get_scheme(estimator: str) -> Scheme:
    """The registered trajectory scheme named ``estimator``."""
    try:
        return SCHEMES[estimator]
    except (KeyError, TypeError):
        raise ValueError(f"unknown scheme {estimator!r}; valid schemes: {', '.join(sorted(SCHEMES))}") from None


def scheme_names(*, family: str | None = None, in_class: bool | None = None) -> list[str]:
    """Registered scheme names in registration order, optionally only those of ``family``
    (:data:`FAMILIES`) and only the members (``in_class=True``) or non-members of C_eps. Every
    scheme list of the toolkit is one such query."""
    if family is not None and family not in FAMILIES:
        raise ValueError(f"unknown scheme family {family!r}; valid: {', '.join(FAMILIES)}")
    return [n for n, s in SCHEMES.items() if (family is None or s.family == family)
            and (in_class is None or s.in_class == in_class)]


# --------------------------------------------------------------------------- schemes


@register_scheme("is", family="theory", in_class=False, bounded=False, sup_mass=lambda eps, B: math.inf,
                 label="IS", style=Style("#000000", "^", 3))
def is_log_weights(log_ratio, eps, advantages, ops):
    """(a) plain trajectory IS, c_i = w_i (THEORY §2). Unbiased (Lemma 1); mean weight unbounded."""
    return log_ratio


@register_scheme("stale", family="theory", in_class=True, sup_mass=lambda eps, B: 1.0,
                 label="stale ($c=1$)", style=Style("#999999", "v", 4),
                 mass_bound={"tight": "m_stale_bound", "theorem2": "m_stale_bound"})
def stale_log_weights(log_ratio, eps, advantages, ops):
    """(b) stale on-policy, c_i = 1: ignore the policy gap."""
    return ops.full_like(log_ratio, 0.0)


@register_scheme("tic_mask", family="theory", in_class=True, surrogate="clamp", sup_mass=lambda eps, B: 1.0 + eps,
                 label="TIC-mask", style=Style("#0072B2", "s", 1),
                 mass_bound={"tight": "m_mask_markov", "theorem2": "m_mask_markov"})
def tic_mask_log_weights(log_ratio, eps, advantages, ops):
    """(c1) TIC-mask, c_i = w_i 1{w_i <= 1+eps}: the gradient of the clamped surrogate min(w, 1+eps) A."""
    return ops.where(log_ratio <= log1p_scalar(eps), log_ratio, ops.full_like(log_ratio, -math.inf))


@register_scheme("tic_trunc", family="theory", in_class=True, sup_mass=lambda eps, B: 1.0 + eps,
                 label="TIC-trunc", style=Style("#56B4E9", "D", 2),
                 mass_bound={"tight": "m_trunc_scarf", "theorem2": "m_trunc_quadratic"})
def tic_trunc_log_weights(log_ratio, eps, advantages, ops):
    """(c2) TIC-trunc (truncated IS), c_i = min(w_i, 1+eps)."""
    return ops.clamp_max(log_ratio, log1p_scalar(eps))


@register_scheme("tic_ppo", family="theory", in_class=False, needs_advantages=True, bounded=False,
                 sup_mass=lambda eps, B: math.inf,
                 label="TIC-PPO", style=Style("#882255", "X", 6))
def tic_ppo_log_weights(log_ratio, eps, advantages, ops):
    """(c3) TIC-PPO, c_i = w_i 1{w_i <= 1+eps or A_i < 0}: literal PPO-min, upper-only clip (reference)."""
    keep = (log_ratio <= log1p_scalar(eps)) | (advantages < 0)
    return ops.where(keep, log_ratio, ops.full_like(log_ratio, -math.inf))


def _gmc_log_lambda_from_lse(lse, G: int, eps: float, ops):
    """log lambda = min(0, log(G(1+eps)) - log sum_j w_j), given lse = log sum_j w_j per group."""
    return ops.clamp_max(log1p_scalar(eps) + math.log(G) - lse, 0.0)


def _shifted_lse(log_ratio, ops):
    """``(m, s)`` per group with m = max_j log w_j and s = log sum_j exp(log w_j - m) in [0, log G]:
    log sum_j w_j = m + s without overflow, and l - m is formed before any large number is added."""
    m = ops.rowmax(log_ratio)
    return m, ops.log(ops.rowsum(ops.exp(log_ratio - m)))


def gmc_log_lambda(log_ratio, eps, ops):
    """log of GMC's group scale (THEORY §2 (d)), lambda = min(1, G(1+eps) / sum_j w_j); shape (prompts_per_step, 1)."""
    m, s = _shifted_lse(log_ratio, ops)
    return ops.clamp_max((log1p_scalar(eps) + math.log(log_ratio.shape[-1]) - s) - m, 0.0)


# Direct path: while max log w + log G stays _DIRECT_MARGIN below log(largest float of the dtype),
# no sum of exponentials can overflow, so the group log-sum-exp needs no shift (shift 0) and
# w = exp(log w) is exact. Terms that underflow only occur in groups whose mass is far below
# 1+eps, where lambda = 1 anyway. (float64: 699.8; float32, where float64 is unavailable: 78.7.)
_DIRECT_MARGIN = 10.0


def _gmc_weights(log_ratio, eps, advantages, ops):
    """GMC weights in about four elementwise passes: w = exp(l), BLAS row sums, one in-place
    per-row rescale by lambda (exactly 1 for uncapped groups, so c = w bit for bit there).
    Falls back to the per-group shifted log-sum-exp of :func:`gmc_log_weights` when a sum of
    exponentials could overflow the dtype."""
    hi = ops.global_max(log_ratio)
    G = log_ratio.shape[-1]
    if not hi + math.log(G) < ops.log_max(log_ratio) - _DIRECT_MARGIN:
        return ops.exp(gmc_log_weights(log_ratio, eps, advantages, ops))
    w = ops.exp(log_ratio)
    log_lam = _gmc_log_lambda_from_lse(ops.log(ops.rowsum(w)), G, eps, ops)
    return ops.scale_(w, ops.exp(log_lam))  # lambda * w


@register_scheme("gmc", family="theory", in_class=True, weights_fn=_gmc_weights, sup_mass=lambda eps, B: 1.0 + eps,
                 label="GMC", style=Style("#D55E00", "o", 0),
                 mass_bound={"tight": "m_gmc_scarf", "theorem2": "m_gmc_quadratic"})
def gmc_log_weights(log_ratio, eps, advantages, ops):
    """(d) GMC, c_i = lambda w_i with lambda = min(1, (1+eps)/mean_j w_j); group mass min(mean w, 1+eps)."""
    m, s = _shifted_lse(log_ratio, ops)
    log_cap = log1p_scalar(eps) + math.log(log_ratio.shape[-1])  # log(G(1+eps))
    capped = (log_cap - s) - m < 0
    # capped groups: log c = (l - m) + (log(G(1+eps)) - s), free of the cancellation in l - lse
    return ops.where(capped, (log_ratio - m) + (log_cap - s), log_ratio)


@register_scheme("snis", family="theory", in_class=True, sup_mass=lambda eps, B: 1.0,
                 label="SNIS", style=Style("#CC79A7", "P", 5))
def snis_log_weights(log_ratio, eps, advantages, ops):
    """(e) self-normalised IS, c_i = w_i / mean_j w_j (group mass exactly 1)."""
    m, s = _shifted_lse(log_ratio, ops)
    return (log_ratio - m) + (math.log(log_ratio.shape[-1]) - s)


# --------------------------------------------------------------------------- public API


def _prepare(estimator: str, log_ratio, eps, advantages):
    spec = get_scheme(estimator)
    lr = check_groups(log_ratio, "log_ratio")
    eps = check_eps(eps)
    adv = None
    if spec.needs_advantages and advantages is None:
        raise ValueError(f"scheme {estimator!r} needs `advantages` (shape (prompts_per_step, G)), got None")
    if advantages is not None:
        adv = match_like(lr, advantages, "advantages")
        check_same_shape(lr, adv, "log_ratio", "advantages")
        check_finite(adv, "advantages")
    return spec, lr, eps, adv


def _apply(fn, estimator: str, log_ratio, eps, advantages, params=None):
    """Validate, then ``fn(spec, lr, eps, adv, ops, params)`` in float64 (see
    :func:`estimators._backend.widen`); the result has the input's dtype: the float64 answer rounded once."""
    from .params import resolve

    spec, lr, eps, adv = _prepare(estimator, log_ratio, eps, advantages)
    p = resolve(estimator, params)
    wide, back = widen(lr)
    if adv is not None:
        adv = adv.to(wide.dtype) if hasattr(adv, "to") else adv.astype(wide.dtype)
    return back(fn(spec, wide, eps, adv, ops_for(lr), p))


def _call(spec, lr, eps, adv, ops, p):
    return spec.log_weights(lr, eps, adv, ops, **p) if p else spec.log_weights(lr, eps, adv, ops)


@renamed_keywords(scheme="estimator")  # deprecated 2026-12-07, removed after 2027-06-01
def log_weights(estimator: str, log_ratio, eps: float, advantages=None, **params):
    """log c for ``estimator`` (``-inf`` where c = 0); same shape and array type as ``log_ratio``."""
    return _apply(_call, estimator, log_ratio, eps, advantages, params)


@renamed_keywords(scheme="estimator")  # deprecated 2026-12-07, removed after 2027-06-01
def weights(estimator: str, log_ratio, eps: float, advantages=None, **params):
    """Weights c of THEORY §2 for trajectory log-ratios.

    Args:
        estimator: a trajectory scheme's name (see :data:`SCHEMES`): ``is``, ``stale``,
            ``tic_mask``, ``tic_trunc``, ``tic_ppo``, ``gmc``, ``snis``.
        log_ratio: ``(prompts_per_step, G)`` array of log pi_theta(o|q) - log pi_b(o|q),
            numpy or torch; must be finite.
        eps: the threshold eps > 0 of the cap 1+eps.
        advantages: ``(prompts_per_step, G)``, required by ``tic_ppo`` and ``topr``.
        **params: the estimator's knobs (:data:`estimators.params.PARAMS`; defaults otherwise),
            e.g. ``C`` of ``seq_tis_bn``, ``lo``/``hi`` of ``seq_mis``.

    Returns:
        ``c`` with the shape, array type, dtype and device of ``log_ratio``. Finite for
        every bounded scheme; ``is`` and ``tic_ppo`` can return ``inf`` when the true
        weight exceeds the float range (never NaN).

    >>> import numpy as np
    >>> weights("gmc", np.log([[3.0, 1.0, 1.0, 1.0]]), 0.2).round(12).tolist()
    [[2.4, 0.8, 0.8, 0.8]]
    """
    def direct(spec, lr, e, adv, ops, p):
        if spec.weights_fn is not None and not p:
            return spec.weights_fn(lr, e, adv, ops)
        return ops.exp(_call(spec, lr, e, adv, ops, p))

    return _apply(direct, estimator, log_ratio, eps, advantages, params)


def gmc_lambda(log_ratio, eps: float):
    """GMC's per-group scale lambda in (0, 1], shape (prompts_per_step, 1)."""
    lr = check_groups(log_ratio, "log_ratio")
    eps = check_eps(eps)
    ops = ops_for(lr)
    wide, back = widen(lr)
    return back(ops.exp(gmc_log_lambda(wide, eps, ops)))
