"""The registry of token-level losses and what every loss returns (:class:`LossOutput`).

A token loss registers itself with :func:`register_token_loss`, which also files its record
(knobs, label, style: :func:`estimators.records.record`); :func:`loss_names`, :func:`is_bounded`
and :func:`is_batch_coupled` answer for trajectory schemes and token losses alike."""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .._compat import renamed_keywords
from .._validate import check_eps, check_fits_dtype
from ..params import resolve
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


AGGS = ("seq-mean-token-mean", "token-mean")
"""How ``token_clip`` aggregates its per-token terms (``agg``)."""


def _check_agg(value, name: str = "agg"):
    if not isinstance(value, str) or value not in AGGS:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(AGGS)}")
    return value


OPTION_CHECKS: dict[str, Callable] = {
    "eps_high": lambda value, name="eps_high": None if value is None else check_eps(value, name),
    "agg": _check_agg,
}
"""The options a token loss may take beyond its knobs of :data:`estimators.params.PARAMS` (``options=`` of
:func:`register_token_loss`), each with its check: ``eps_high`` (None: ``= eps``, else a finite number > 0)
and ``agg``. An option without a check here is refused at registration."""

LOSS_ARGS = 6
"""The arguments every loss takes first, by position: ``logp, old_logp, mask, advantages, group_size, eps``."""


def loss_dtype(logp) -> torch.dtype | None:
    """The dtype a loss computes in for log-probs ``logp``: float16 and bfloat16 are widened to float32
    (:func:`estimators.losses.batch._widen`); None for anything that is not a floating tensor."""
    if not isinstance(logp, torch.Tensor) or not torch.is_floating_point(logp):
        return None
    return torch.float32 if logp.dtype in (torch.float16, torch.bfloat16) else logp.dtype


@renamed_keywords(name="estimator")  # deprecated 2026-12-07, removed after 2027-06-01
def check_options(estimator: str, options: dict | None) -> dict:
    """The options ``estimator`` accepts, validated: knobs of :data:`estimators.params.PARAMS`
    (filled with their defaults) plus a token loss's own extra options (:data:`OPTION_CHECKS`); an
    option it does not take is refused by name."""
    options = dict(options or {})
    if estimator in SCHEMES:
        return resolve(estimator, options)
    if estimator not in TOKEN_LOSSES:
        raise ValueError(f"unknown loss {estimator!r}; valid: {', '.join(loss_names())}")
    extra = {k: options.pop(k) for k in TOKEN_LOSSES[estimator].options if k in options}
    for k, v in extra.items():
        try:
            OPTION_CHECKS[k](v, k)
        except ValueError as exc:
            raise ValueError(f"{estimator!r}: {exc}") from None
    return {**resolve(estimator, options), **extra}


def check_loss_call(estimator: str, eps, knobs: dict, logp) -> None:
    """What every loss checks of a call before its formula, whether or not it uses the value: ``eps``
    (unless None, which only a loss that does not use it accepts) is a finite number > 0; every knob
    passed is one ``estimator`` takes, in its range (:func:`check_options`); and ``eps`` and every knob
    fit the dtype the loss computes in (:func:`loss_dtype`), or the call is refused naming the knob and
    the dtype."""
    try:
        given = {} if eps is None else {"eps": check_eps(eps)}
    except ValueError as exc:
        raise ValueError(f"{estimator!r}: {exc}") from None
    check_options(estimator, knobs)
    given.update(knobs)
    dtype = loss_dtype(logp)
    if dtype is not None:
        check_fits_dtype(repr(estimator), given, dtype)


def _checked(name: str, fn: Callable) -> Callable:
    """``fn`` with :func:`check_loss_call` run on every call: the knobs passed are the arguments after the
    first :data:`LOSS_ARGS` (and any collected by ``**kwargs``)."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    first = positional[:LOSS_ARGS]
    varkw = next((p.name for p in params if p.kind is p.VAR_KEYWORD), None)

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        try:
            bound = sig.bind(*args, **kwargs).arguments
        except TypeError:
            check_options(name, {k: v for k, v in kwargs.items() if k not in sig.parameters})  # a knob it lacks
            return fn(*args, **kwargs)  # Python's own message for a call of another wrong form
        knobs = {k: v for k, v in bound.items() if k not in first and k != varkw}
        knobs.update(bound.get(varkw, {}) if varkw else {})
        eps = bound.get(first[5]) if len(first) == LOSS_ARGS else None
        check_loss_call(name, eps, knobs, bound.get(first[0]) if first else None)
        return fn(*args, **kwargs)

    return checked


def register_token_loss(name: str, *, options: tuple = (), batch_coupled: bool = False, bounded: bool = True,
                        **record_fields):
    """Register a token-level loss. ``bounded=False`` declares a loss whose value is unbounded for
    some finite input (PPO's one-sided clip with A < 0): it must give ``+inf`` there, never NaN.
    ``options`` are extra options it takes beyond its knobs, each one of :data:`OPTION_CHECKS`.
    ``record_fields`` (params, label, style, mass_bound, knob_check) are the estimator's record
    (:func:`estimators.records.record`). The function registered, and returned, checks every call
    (:func:`check_loss_call`): ``eps`` and every knob it is passed, used or not."""
    def deco(fn):
        from ..schemes import check_registration

        check_registration(name, batch_coupled=batch_coupled, bounded=bounded)
        if isinstance(options, str) or not all(isinstance(o, str) for o in tuple(options)):
            raise ValueError(f"token loss {name!r}: options must be a tuple of knob names, got {options!r}")
        unchecked = [o for o in options if o not in OPTION_CHECKS]
        if unchecked:
            raise ValueError(f"token loss {name!r}: option(s) {unchecked} have no check; an extra option is one of "
                             f"{', '.join(OPTION_CHECKS)} (a new knob is a Param of params=)")
        if name in TOKEN_LOSSES or name in SCHEMES:
            raise ValueError(f"a loss named {name!r} is already registered")
        record(name, **record_fields)
        checked = _checked(name, fn)
        TOKEN_LOSSES[name] = TokenLoss(name, checked, tuple(options), batch_coupled, (fn.__doc__ or "").strip(),
                                       bounded)
        return checked

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
