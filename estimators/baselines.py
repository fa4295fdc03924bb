"""Per-group baselines of the policy gradient beside the group mean (:func:`estimators.advantages`), torch:

* **OPOB** (VCPO's off-policy optimal baseline, Huang et al. 2026, arXiv 2602.17616; mit-han-lab/vcpo
  ``recipe/fully_async_policy/staleness_utils.py:compute_opob_baseline``): one baseline per group,
  ``b* = sum_i W_i R_i / (sum_i W_i + 1e-8)``, ``W_i = w_i^2 ||grad log pi(tau_i)||^2``; advantages
  ``(prompts_per_step, G)``, one per trajectory (the trainer's ``advantage = "opob"``, :mod:`llm_runs.stepsize`).
* **OTB** (verl's Optimal Token Baseline, verl 0.9.1 ``verl/trainer/ppo/core_algos.py``:
  ``compute_optimal_token_baseline_advantage``): one baseline per group and token position,
  ``B_t = sum_i G_{i,t} W_{i,t} / (sum_i W_{i,t} + 1e-8)`` with ``G_{i,t}`` the return-to-go and ``W_{i,t}``
  the cumulative ``1 - 2 pi_t + sum_v pi_v^2`` (times the IS weight squared); advantages
  ``(prompts_per_step, G, T)``, one per token. The toolkit's losses take one advantage per trajectory, so OTB is
  no trainer advantage mode: :mod:`simulators.baselines` measures it exactly on E2.
"""
from __future__ import annotations

import math

import torch

from ._compat import renamed_keywords

OPOB_STDS = ("sample", "population")
OPOB_GUARD = 1e-8
"""VCPO's guard in OPOB's baseline denominator, ``sum_i W_i + 1e-8``."""
OTB_GUARD = 1e-8
"""OTB's baseline denominator guard, verl's ``epsilon`` default of ``compute_optimal_token_baseline_advantage``."""


def opob_advantages(rewards: torch.Tensor, seq_log_ratio: torch.Tensor, grad_sq_norms: torch.Tensor,
                    norm_by_std: bool = True, flat_zero: bool = True, std: str = "sample") -> torch.Tensor:
    """VCPO's OPOB advantages, shape (prompts_per_step, G): per group ``b* = sum_i W_i R_i / (sum_i W_i + 1e-8)``
    with ``W_i = w_i^2 ||grad log pi(tau_i)||^2`` (``grad_sq_norms``), then ``R_i - b*``, divided by the
    group's reward std where ``norm_by_std`` and that std exceeds 1e-8 (``std``: ``sample``, Bessel-corrected,
    or ``population``, VCPO's ``torch.std(unbiased=False)``).

    A group whose ``W`` overflows float64 (a large log-ratio: ``w^2`` is ``exp(2 log w)``) takes the same
    weighted mean in log space, ``W_i / max_j W_j``: a finite baseline, never NaN. With ``flat_zero`` a
    group whose rewards are all equal (no signal) gets advantages exactly 0 (VCPO's formula leaves
    ``R (1 - sum W / (sum W + 1e-8))`` there; runs made before this setting existed used that).
    Rewards, log-ratios or gradient norms that are NaN, negative norms, or an empty group or batch (a 0 in
    the shape) are refused (ValueError naming the index or the shape)."""
    _check_tensors("opob", rewards=rewards, seq_log_ratio=seq_log_ratio, grad_sq_norms=grad_sq_norms)
    _check_flags("opob", norm_by_std=norm_by_std, flat_zero=flat_zero)
    if std not in OPOB_STDS:
        raise ValueError(f"unknown opob std {std!r}; valid: {', '.join(OPOB_STDS)}")
    r = rewards.double()
    if r.ndim != 2 or seq_log_ratio.shape != r.shape or grad_sq_norms.shape != r.shape:
        raise ValueError(f"rewards, seq_log_ratio and grad_sq_norms must share one (prompts_per_step, G) shape, got "
                         f"{tuple(r.shape)}, {tuple(seq_log_ratio.shape)}, {tuple(grad_sq_norms.shape)}")
    _check_not_empty("opob", "rewards", r.shape, ("prompts_per_step", "G"))
    lr, g2 = seq_log_ratio.detach().double(), grad_sq_norms.detach().double()
    for name, x in (("rewards", r), ("seq_log_ratio", lr), ("grad_sq_norms", g2)):
        if bool(torch.isnan(x).any()):
            raise ValueError(f"opob: {name} holds NaN "
                             f"(first at index {tuple(torch.nonzero(torch.isnan(x))[0].tolist())})")
    if not bool(torch.isfinite(r).all()):
        i = _first(~torch.isfinite(r))
        raise ValueError(f"opob: rewards must be finite, got {float(r[i])} at index {i}")
    bad = (g2 < 0) | ~torch.isfinite(g2)
    if bool(bad.any()):
        i = _first(bad)
        raise ValueError(f"opob: grad_sq_norms must be finite and >= 0, got {float(g2[i])} at index {i}")
    W = torch.exp(2 * lr) * g2
    b = (W * r).sum(-1, keepdim=True) / (W.sum(-1, keepdim=True) + OPOB_GUARD)
    bad = ~torch.isfinite(b)
    if bool(bad.any()):  # W overflowed (or 0 * inf): the weighted mean in log space
        logw = torch.where(g2 > 0, 2 * lr + torch.log(torch.where(g2 > 0, g2, 1.0)), -math.inf)
        top = logw.max(-1, keepdim=True).values
        shift = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        Wn = torch.where(top == math.inf, (logw == math.inf).double(), torch.exp(logw - shift))
        tiny = torch.where(top == math.inf, torch.zeros_like(top), OPOB_GUARD * torch.exp(-shift))
        stable = (Wn * r).sum(-1, keepdim=True) / (Wn.sum(-1, keepdim=True) + tiny)
        b = torch.where(bad, stable, b)
    adv = r - b
    if norm_by_std:
        if std == "sample" and r.shape[-1] == 1:  # a group of one has no sample std: nothing to divide by
            std = torch.zeros_like(r)
        else:
            std = r.std(-1, correction=1 if std == "sample" else 0, keepdim=True)
        adv = torch.where(std > 1e-8, adv / torch.where(std > 1e-8, std, 1.0), adv)
    if flat_zero:
        flat = (r.max(-1, keepdim=True).values == r.min(-1, keepdim=True).values)
        adv = torch.where(flat, torch.zeros_like(adv), adv)
    return adv


def _check_tensors(what: str, **tensors) -> None:
    for name, x in tensors.items():
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{what}: {name} must be a torch tensor, got {type(x).__name__}")


def _check_flags(what: str, **flags) -> None:
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ValueError(f"{what}: {name} must be true or false, got {value!r}")


def _check_not_empty(what: str, name: str, shape, axes: tuple[str, ...]) -> None:
    """Every axis of ``shape`` (named ``axes``) holds at least one entry, else a ValueError naming the shape."""
    empty = [a for a, n in zip(axes, shape) if n < 1]
    if empty:
        raise ValueError(f"{what}: {name} has shape {tuple(shape)} ({', '.join(axes)}): {', '.join(empty)} is 0; "
                         "a baseline needs at least one group of at least one trajectory")


PROBABILITY_ROUNDING = 16
"""How far (in units of its dtype's machine epsilon) ``sum_pi_squared`` may pass its bound 1 by rounding
alone: a softmax's probabilities sum to 1 within a few units of its dtype, and their squares, summed
pairwise over a vocabulary of up to 2^20 entries, add at most about 20 units of rounding more (16 eps =
32 units of the unit roundoff eps / 2); past that the input is not a probability vector's squared norm."""


def _first(bad: torch.Tensor) -> tuple[int, ...]:
    return tuple(torch.nonzero(bad)[0].tolist())


def _check_finite(name: str, x: torch.Tensor, allow_neg_inf: bool = False) -> None:
    if bool(torch.isnan(x).any()):
        raise ValueError(f"otb: {name} holds NaN (first at index {tuple(torch.nonzero(torch.isnan(x))[0].tolist())})")
    bad = (x == math.inf) if allow_neg_inf else ~torch.isfinite(x)
    if bool(bad.any()):
        raise ValueError(f"otb: {name} must be finite, got {float(x[bad][0])} at index "
                         f"{tuple(torch.nonzero(bad)[0].tolist())}")


@renamed_keywords(eps="denominator_guard")  # deprecated 2026-12-07, removed after 2027-06-01
def otb_advantages(token_rewards: torch.Tensor, mask: torch.Tensor, old_log_probs: torch.Tensor,
                   sum_pi_squared: torch.Tensor, is_weights: torch.Tensor | None = None,
                   handle_zero_tail: bool = True,
                   denominator_guard: float = OTB_GUARD) -> torch.Tensor:
    """verl's Optimal Token Baseline advantages, shape ``(prompts_per_step, G, T)``: a transcription of verl 0.9.1
    ``verl/trainer/ppo/core_algos.py:compute_optimal_token_baseline_advantage`` for groups laid out on the
    first axis (verl's ``index``: one prompt per group).

    Per token, ``G_t = sum_{s >= t} r_s`` (return-to-go of the masked ``token_rewards``),
    ``w_t = 1 - 2 pi_t + sum_v pi_v^2`` with ``pi_t = exp(old_log_probs)`` the sampled token's probability
    and ``sum_pi_squared`` the vocabulary's ``sum_v pi_v^2`` (``||e_{o_t} - pi||^2``, the squared norm of
    the logits' score), times ``is_weights^2`` when given (verl's ``rollout_is_weights``: the sequence
    ratio broadcast over the tokens under sequence-level rollout IS), ``W_t = sum_{s <= t} w_s mask_s``;
    per group ``B_t = sum_i G_{i,t} W_{i,t} mask_{i,t} / (sum_i W_{i,t} mask_{i,t} + denominator_guard)`` and the
    advantage ``(G_t - B_t) mask_t``. A group of one trajectory has no baseline (advantage = return).
    ``handle_zero_tail`` (verl's default): in a group whose longest trajectory (length = its mask's sum)
    is unique, that trajectory's baseline is 0 from the second-longest length on (there the baseline
    would be its own return).

    Bad shapes (an empty axis included), NaN anywhere, non-finite rewards, IS weights or ``sum_pi_squared``,
    negative IS weights or ``sum_pi_squared``, a log-probability above 0 or a ``sum_pi_squared`` above 1
    (beyond :data:`PROBABILITY_ROUNDING` of rounding) on a completion token, a mask other than 0/1, a
    ``denominator_guard`` that is not > 0, or a ``W`` that overflows float64 are refused (ValueError naming
    the index). Computed in float64."""
    _check_tensors("otb", token_rewards=token_rewards, mask=mask, old_log_probs=old_log_probs,
                   sum_pi_squared=sum_pi_squared, **({} if is_weights is None else {"is_weights": is_weights}))
    _check_flags("otb", handle_zero_tail=handle_zero_tail)
    r = token_rewards.detach().double()
    if r.ndim != 3:
        raise ValueError(f"otb: token_rewards must have shape (prompts_per_step, G, T), got {tuple(r.shape)}")
    named = {"mask": mask, "old_log_probs": old_log_probs, "sum_pi_squared": sum_pi_squared}
    if is_weights is not None:
        named["is_weights"] = is_weights
    for name, x in named.items():
        if tuple(x.shape) != tuple(r.shape):
            raise ValueError(f"otb: {name} must have token_rewards' shape {tuple(r.shape)}, got {tuple(x.shape)}")
    _check_not_empty("otb", "token_rewards", r.shape, ("prompts_per_step", "G", "T"))
    m = mask.detach().double()
    lp, s2 = old_log_probs.detach().double(), sum_pi_squared.detach().double()
    _check_finite("token_rewards", r)
    _check_finite("mask", m)
    _check_finite("old_log_probs", lp, allow_neg_inf=True)
    _check_finite("sum_pi_squared", s2)
    if not bool(((m == 0) | (m == 1)).all()):
        raise ValueError(f"otb: mask must hold 0 and 1 only, got {float(m[(m != 0) & (m != 1)][0])}")
    if bool((s2 < 0).any()):
        raise ValueError(f"otb: sum_pi_squared must be >= 0, got {float(s2[s2 < 0][0])}")
    # on completion tokens (padding may hold anything finite): exp(lp) is read as a probability, as dppo_tv
    # and icepop read it, and sum_pi_squared as a probability vector's squared norm
    tok = m == 1
    if bool((tok & (lp > 0)).any()):
        i = _first(tok & (lp > 0))
        raise ValueError(f"otb: old_log_probs holds a log-probability above 0 ({float(lp[i])}) at completion token "
                         f"{i}: the sampled token's probability exp(old_log_probs) would exceed 1")
    dt = sum_pi_squared.dtype if torch.is_floating_point(sum_pi_squared) else torch.float64
    slack = PROBABILITY_ROUNDING * torch.finfo(dt).eps
    above = tok & (s2 > 1 + slack)
    if bool(above.any()):
        i = _first(above)
        raise ValueError(f"otb: sum_pi_squared holds {float(s2[i])} at completion token {i}: a sum of squared "
                         f"probabilities is at most 1")
    guard = denominator_guard
    if isinstance(guard, bool) or not isinstance(guard, (int, float)) or not math.isfinite(guard) or guard <= 0:
        raise ValueError(f"otb: denominator_guard must be a finite number > 0, got {guard!r}")
    w = 1 - 2 * torch.exp(lp) + s2
    if is_weights is not None:
        rho = is_weights.detach().double()
        _check_finite("is_weights", rho)
        if bool((rho < 0).any()):
            raise ValueError(f"otb: is_weights must be >= 0, got {float(rho[rho < 0][0])}")
        w = w * rho**2
    returns = (r * m).flip(-1).cumsum(-1).flip(-1)
    W = (w * m).cumsum(-1)
    if not bool(torch.isfinite(W).all()):
        raise ValueError("otb: the cumulative weight W overflows float64 (is_weights too large)")
    n, G, T = r.shape
    if G == 1:
        return returns * m
    num = (returns * W * m).sum(1, keepdim=True)
    den = (W * m).sum(1, keepdim=True) + guard
    baseline = (num / den).expand(n, G, T).clone()
    if handle_zero_tail:
        lengths = m.sum(-1)  # (n, G)
        top2 = torch.sort(lengths, dim=-1).values[:, -2:]
        longest, second = top2[:, 1], top2[:, 0]
        unique = ((lengths == longest[:, None]).sum(-1) == 1) & (longest > second)
        row = torch.argmax(lengths, dim=-1)
        tail = torch.arange(T, dtype=torch.float64)[None, :] >= second[:, None]  # (n, T)
        zero = torch.zeros(n, G, T, dtype=torch.bool)
        zero[torch.arange(n), row] = tail & unique[:, None]
        baseline = torch.where(zero, torch.zeros_like(baseline), baseline)
    return (returns - baseline) * m
