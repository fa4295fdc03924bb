"""The 2026 corrections: batch-adaptive control (p3o), prefix and cumulative ratios (ctpo, minpro),
trust-region masking of whole sequences (trm_k2, trm_k3), sign-decoupled clipping (dispo) and an
importance-weight-free regression (oapl). None is a trajectory scheme: each reads the per-token
ratios (or, for oapl, regresses on the sequence log-ratio), so none has a trajectory weight c_i and
none is a member of C_eps by definition (THEORY §2's class is a set of trajectory weightings); what
each bounds instead is in :data:`CORRECTIONS_2026`, derived and checked by bounds.mass.TOKEN_BOUNDS."""
from __future__ import annotations

import math

import torch

from .._validate import check_eps, check_groups
from ..params import Param, resolve
from ..records import Style
from .batch import (
    _check_batch,
    _frac,
    _masked_log_ratio,
    _seq_log_ratio,
    _seq_mean_token_mean,
    _token_mean,
    _zero,
    ppo_clip_objective,
)
from .registry import LossOutput, register_token_loss

CORRECTIONS_2026 = ("p3o", "ctpo", "minpro", "trm_k2", "trm_k3", "dispo", "oapl")
"""The 2026 corrections, in the order the docs list them."""
SEQUENCE_SUM_LOSSES = ("oapl",)
"""Token losses whose gradient sums over a completion's tokens (no ``1/|o|`` average): an exact
evaluation scales the others' estimates by the completion length, not these."""

P3O_ESS_GUARD = 1e-8
"""FeynRL's guard in the batch ESS, ``(sum r)^2 / (sum r^2 + 1e-8) / n``."""
P3O_KL_EXP_CLAMP = 10.0
"""FeynRL's ``compute_kl_distance`` clamps ``log(pi_b / pi_theta)`` to [-10, 10] before its exp."""
TRM_SAFETY_BOUND = 20.0
"""verl's ``SAFETY_BOUND``: the token log-ratio is clamped to [-20, 20] before k2 / k3 are formed."""


def batch_token_ess(log_r, keep) -> torch.Tensor:
    """P3O's batch ESS over every completion token of the batch passed, in (0, 1]:
    ``(sum_t r_t)^2 / ((sum_t r_t^2 + 1e-8) n)`` (FeynRL ``P3O.calculate_ess``), computed as
    ``exp(2 lse(l) - lse(2 l)) / n`` times ``sum r^2 / (sum r^2 + 1e-8)`` so that no ratio is formed
    (finite for any finite log-ratio; the guard's factor is taken in log space too). Detached."""
    ld = log_r.detach().double()
    sel = ld[keep]
    n = sel.numel()
    if n == 0:
        raise ValueError("p3o: the batch ESS needs at least one completion token; keep selects none")
    lse1 = torch.logsumexp(sel, 0)
    lse2 = torch.logsumexp(2 * sel, 0)
    guard = -torch.nn.functional.softplus(math.log(P3O_ESS_GUARD) - lse2)  # log(S2 / (S2 + 1e-8))
    return torch.clamp(torch.exp(2 * lse1 - lse2 + guard) / n, max=1.0)


@register_token_loss("p3o", batch_coupled=True,
                     label="P3O", style=Style("#4477AA", "x", 23))
def p3o_loss(logp, old_logp, mask, advantages, group_size: int, eps: float | None = None) -> LossOutput:
    """P3O, "Trust the Batch" (arXiv 2605.12380): every token keeps a REINFORCE gradient whose detached
    weight is its ratio clipped at the batch's normalised ESS, and the step is held by a KL to the
    behaviour policy weighted by ``1 - ESS`` (no new knob; ``eps`` is not used):

        ESS = (sum_t r_t)^2 / ((sum_t r_t^2 + 1e-8) n)   over the n completion tokens of the batch
        J   = (1/n) sum_t [ sg(clip(r_t, 0, ESS)) A log pi_theta(o_t) - (1 - ESS) k_t ],
        k_t = log(pi_theta / pi_b) + pi_b / pi_theta - 1   (pi_b / pi_theta clamped at exp(+-10))

    Followed: FeynRL-project/FeynRL ``algs/P3O/p3o.py`` (``P3O.calculate_ess``,
    ``P3O.compute_policy_loss``) and ``algs/RL/common.py`` (``COMMON.compute_kl_distance``) at commit
    2dbc6bebea7dcc208b6bd891c2def1bfae551663, with ``normalize_loss`` (the sum divided by the
    batch's token count), no entropy bonus and no KL to a reference model. Differences: the ESS is
    formed in log space (FeynRL forms ``exp(l)`` and returns 1.0 when a sum overflows); the ESS is
    a statistic of the batch passed, so the loss is batch-coupled (FeynRL reduces it over every
    rank's micro-batch).

    What it is: the detached weight is at most ESS <= 1, so no token's gradient is scaled up; the
    trust region is the KL term, whose weight grows as the batch's ratios disperse. Not a
    trajectory weighting (THEORY §2's class does not contain it): its gradient on E1 (one token) is
    the weighting ``min(w_i, ESS)`` of the batch plus the KL gradient."""
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    keep, log_r = _masked_log_ratio(logp, old_logp, m)
    ess = batch_token_ess(log_r, keep).to(logp.dtype)
    ld = log_r.detach()
    rho = torch.exp(torch.clamp(ld, max=torch.log(ess)))  # clip(r, 0, ESS), never forming an overflowed r
    lp = torch.where(keep, logp, _zero(logp))
    inv = torch.exp(torch.clamp(-log_r, -P3O_KL_EXP_CLAMP, P3O_KL_EXP_CLAMP))
    kl = torch.where(keep, log_r + inv - 1.0, _zero(log_r))
    per_tok = torch.where(keep, rho * adv.reshape(B, 1) * lp - (1.0 - ess) * kl, _zero(log_r))
    loss = -_token_mean(per_tok, keep, m)
    metrics = {"token_clip_frac": _frac(ld > torch.log(ess), keep, m), "p3o_ess": float(ess)}
    return LossOutput(loss, _seq_log_ratio(log_r, B, group_size), None, metrics)


def prefix_log_ratio(log_r, keep):
    """``L_t = sum_{s <= t} log r_s`` over the completion tokens of each row (padding adds 0)."""
    return torch.cumsum(torch.where(keep, log_r, _zero(log_r)), -1)


def _detached_weight_surrogate(log_w, log_r, a, keep):
    """Per token ``sg(w_t) A exp(l_t - sg(l_t))``: value ``w_t A``, gradient ``w_t A grad log pi(o_t)``
    (``log_w`` detached; ``exp`` of a bounded log weight only)."""
    ld = log_r.detach()
    return torch.where(keep, torch.exp(log_w.detach()) * torch.exp(log_r - ld) * a, _zero(ld))


@register_token_loss("ctpo",
                     label="CTPO", style=Style("#228833", "^", 24),
                     params=(Param("delta", 0.2, "delta_CTPO", "ctpo: the prefix log-ratio L_t is clipped to [-delta "
                                   "sqrt(t), delta sqrt(t)] (this toolkit's default; the paper's code was not read)"),))
def ctpo_loss(logp, old_logp, mask, advantages, group_size: int, eps: float | None = None, *,
              delta: float = 0.2) -> LossOutput:
    """CTPO (arXiv 2605.07331), the cumulative prefix ratio clipped in log space with a bound that grows
    as sqrt(t): token t of a completion gets the detached weight

        rho_t = exp(clip(L_t, -delta sqrt(t), delta sqrt(t))),  L_t = sum_{s <= t} log r_s

    (t = 1, 2, ... counts completion tokens), and the surrogate is ``sg(rho_t) A log pi_theta(o_t)``,
    averaged per sequence then over sequences (``seq-mean-token-mean``). ``eps`` is not used.
    Unclipped (``delta`` large) this is per-decision importance sampling: term t is weighted by
    the ratio of the prefix up to t, not of the whole sequence (THEORY §5 claim 23 checks what that
    buys exactly).

    Reference: the paper's formula as stated (prefix product, log-space clip, sqrt(t) growth); its
    code was not available to read, and the default ``delta = 0.2`` is this toolkit's choice, not
    the paper's. Bounded: ``rho_t <= exp(delta sqrt(T))``."""
    delta = resolve("ctpo", {"delta": delta})["delta"]
    B, _T, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    keep, log_r = _masked_log_ratio(logp, old_logp, m)
    L = prefix_log_ratio(log_r.detach(), keep)
    t = torch.cumsum(keep.to(logp.dtype), -1).clamp(min=1.0)  # position among completion tokens
    bound = delta * torch.sqrt(t)
    log_rho = torch.maximum(torch.minimum(L, bound), -bound)
    per_tok = _detached_weight_surrogate(log_rho, log_r, adv.reshape(B, 1), keep)
    loss = -_seq_mean_token_mean(per_tok, keep, m)
    metrics = {"token_clip_frac": _frac(L.abs() > bound, keep, m)}
    return LossOutput(loss, _seq_log_ratio(log_r, B, group_size), None, metrics)


@register_token_loss("minpro", options=("eps_high",), bounded=False,
                     label="MinPRO", style=Style("#AA3377", "v", 25))
def minpro_loss(logp, old_logp, mask, advantages, group_size: int, eps: float, eps_high: float | None = None
                ) -> LossOutput:
    """MinPRO (arXiv 2601.22718), the minimum token ratio of the prefix in place of the token ratio:
    ``m_t = min_{s <= t} r_s``, used in PPO's clipped objective ``min(m_t A, clip(m_t, 1-eps,
    1+eps_high) A)`` per token, ``seq-mean-token-mean``. The gradient reaches the current token
    only (``m_t`` as ``sg(m_t / r_t) r_t``, the GSPO-token device): an unclipped term's gradient is
    ``m_t A grad log pi(o_t)``.

    Reference: the paper's formula as stated (the prefix minimum of the token ratios); its code was
    not available to read, so where the gradient flows (the current token) and the clip (PPO's, at
    the toolkit's ``eps``) are this toolkit's reading. Unbounded like ``token_clip``: with A < 0
    and every ratio of the prefix overflowing the loss is ``+inf`` (never NaN)."""
    eps = check_eps(eps)
    eps_high = eps if eps_high is None else check_eps(eps_high)
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    keep, log_r = _masked_log_ratio(logp, old_logp, m)
    ld = log_r.detach()
    masked = torch.where(keep, ld, torch.full_like(ld, math.inf))
    log_min = torch.cummin(masked, -1).values
    log_min = torch.where(keep, log_min, _zero(ld))
    log_m = (log_min - ld) + log_r  # value log m_t, gradient d log pi(o_t)
    a = adv.reshape(B, 1)
    per_tok = -ppo_clip_objective(torch.where(keep, log_m, _zero(ld)), a, 1 - eps, 1 + eps_high, keep=keep)
    loss = _seq_mean_token_mean(per_tok, keep, m)
    md = torch.exp(log_min)
    clipped = ((md > 1 + eps_high) & (a > 0)) | ((md < 1 - eps) & (a < 0))
    metrics = {"token_clip_frac": _frac(clipped, keep, m)}
    return LossOutput(loss, _seq_log_ratio(log_r, B, group_size), None, metrics)


def trm_token_divergence(log_r, kind: str):
    """verl's per-token divergences of ``compute_rollout_rejection_mask`` on the log-ratio clamped to
    [-20, 20]: ``k2 = (log r)^2 / 2``, ``k3 = r - 1 - log r``."""
    lr = torch.clamp(log_r, -TRM_SAFETY_BOUND, TRM_SAFETY_BOUND)
    if kind == "k2":
        return 0.5 * lr ** 2
    if kind == "k3":
        return torch.expm1(lr) - lr
    raise ValueError(f"unknown TRM divergence {kind!r}; valid: k2, k3")


def trm_keep_rows(log_r, keep, kind: str, delta: float):
    """Rows kept by Trust Region Masking: every completion token's divergence (``kind``) is <= delta
    (verl ``seq_max_k2`` / ``seq_max_k3``: the row's max, an empty row's max read as 0); ``delta`` is checked
    as the loss's knob (a NaN would drop every row)."""
    if kind not in ("k2", "k3"):
        raise ValueError(f"unknown TRM divergence {kind!r}; valid: k2, k3")
    delta = resolve(f"trm_{kind}", {"delta": delta})["delta"]
    div = torch.where(keep, trm_token_divergence(log_r.detach(), kind), torch.full_like(log_r, -math.inf))
    mx = div.max(-1).values
    mx = torch.where(mx == -math.inf, torch.zeros_like(mx), mx)
    return mx <= delta


def _trm_loss(kind, logp, old_logp, mask, advantages, group_size, eps, eps_high, delta):
    eps = check_eps(eps)
    eps_high = eps if eps_high is None else check_eps(eps_high)
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    keep, log_r = _masked_log_ratio(logp, old_logp, m)
    rows = trm_keep_rows(log_r, keep, kind, delta)
    a = adv.reshape(B, 1)
    per_tok = -ppo_clip_objective(log_r, a, 1 - eps, 1 + eps_high, keep=keep & rows[:, None])
    loss = _seq_mean_token_mean(per_tok, keep, m)
    metrics = {"seq_clip_frac": float((~rows).float().mean())}
    return LossOutput(loss, _seq_log_ratio(log_r, B, group_size), None, metrics)


_TRM_DOC = """Trust Region Masking, {kind} form (Li et al., arXiv 2512.23075): a whole sequence is masked
    when the largest per-token divergence of its completion tokens exceeds ``delta``, ``{formula}``;
    the kept sequences get the token-level PPO clip objective (``token_clip``: ``[1-eps,
    1+eps_high]``, ``seq-mean-token-mean``), the loss verl pairs its sequence masks with in bypass
    mode (``bypass_ppo_clip_k3_rs``). The paper's bounds on the surrogate's error, O(T^(3/2))
    (Pinsker-Marginal) and O(T) (Mixed) in the sequence length, read the largest exact token KL
    over every context, not k2 / k3 (``bounds.trust_region``; checked exactly by claim 25).

    Followed: verl ``verl/trainer/ppo/rollout_corr_helper.py`` (``compute_rollout_rejection_mask``,
    options ``seq_max_k2`` / ``seq_max_k3``: the log-ratio clamped to [-20, 20], an upper bound
    only) in verl 0.9.1 as installed in ``.venv-verl`` (the reference test calls it on fixed
    batches). verl has no default threshold for these options; ``delta = 0.05`` is this toolkit's
    choice. Unbounded like ``token_clip`` (a kept ratio is at most exp(sqrt(2 delta)) for k2, but
    with A < 0 PPO's lower clip does not bound r A).

    Kept sequences: every token has ``|log r_t| <= {token_bound}``, so the sequence ratio is within
    exp(+-T {token_bound}) (bounds.mass.trm_log_ratio_bound)."""


def trm_k2_loss(logp, old_logp, mask, advantages, group_size: int, eps: float, eps_high: float | None = None, *,
                delta: float = 0.05) -> LossOutput:
    delta = resolve("trm_k2", {"delta": delta})["delta"]
    return _trm_loss("k2", logp, old_logp, mask, advantages, group_size, eps, eps_high, delta)


def trm_k3_loss(logp, old_logp, mask, advantages, group_size: int, eps: float, eps_high: float | None = None, *,
                delta: float = 0.05) -> LossOutput:
    delta = resolve("trm_k3", {"delta": delta})["delta"]
    return _trm_loss("k3", logp, old_logp, mask, advantages, group_size, eps, eps_high, delta)


trm_k2_loss.__doc__ = _TRM_DOC.format(kind="k2", formula="k2(r) = (log r)^2 / 2", token_bound="sqrt(2 delta)")
trm_k3_loss.__doc__ = _TRM_DOC.format(kind="k3", formula="k3(r) = r - 1 - log r",
                                      token_bound="the roots of r - 1 - log r = delta")
trm_k2_loss = register_token_loss(
    "trm_k2", options=("eps_high",), bounded=False, label="TRM (k2)", style=Style("#777777", "<", 26),
    params=(Param("delta", 0.05, "delta_TRM", "trm_k2: mask a sequence whose largest token (log r)^2 / 2 exceeds "
                  "delta (verl seq_max_k2; no default there)"),))(trm_k2_loss)
trm_k3_loss = register_token_loss(
    "trm_k3", options=("eps_high",), bounded=False, label="TRM (k3)", style=Style("#444444", ">", 27),
    params=(Param("delta", 0.05, "delta_TRM3", "trm_k3: mask a sequence whose largest token r - 1 - log r exceeds "
                  "delta (verl seq_max_k3; no default there)"),))(trm_k3_loss)


@register_token_loss("dispo",
                     label="DISPO", style=Style("#CCBB44", "P", 28),
                     params=(Param("pos_low", 0.2, "eps_low^+", "dispo: lower clip 1 - pos_low of the detached token "
                                   "ratio of a correct response (A > 0; >= 1: no lower bound)"),
                             Param("pos_high", 0.28, "eps_high^+", "dispo: upper clip 1 + pos_high, correct "
                                   "responses"),
                             Param("neg_low", 0.2, "eps_low^-", "dispo: lower clip 1 - neg_low, incorrect responses "
                                   "(A <= 0)"),
                             Param("neg_high", 0.2, "eps_high^-", "dispo: upper clip 1 + neg_high, incorrect "
                                   "responses")))
def dispo_loss(logp, old_logp, mask, advantages, group_size: int, eps: float | None = None, *,
               pos_low: float = 0.2, pos_high: float = 0.28, neg_low: float = 0.2, neg_high: float = 0.2
               ) -> LossOutput:
    """DISPO (arXiv 2602.00983), up- and down-clipping decoupled for correct and incorrect responses
    (four regimes): every token keeps a gradient whose detached weight is its ratio clipped at a
    range chosen by the response's sign, ``[1 - pos_low, 1 + pos_high]`` when ``A > 0`` (a correct
    response) and ``[1 - neg_low, 1 + neg_high]`` otherwise; ``J = (1/sum_i |o_i|) sum_{i,t}
    sg(clip(r_t, lo_i, hi_i)) A_i log pi_theta(o_t)`` (token mean over the batch, CISPO's form).
    ``eps`` is not used.

    Reference: the paper's four-regime rule as stated; its code was not available to read, so the
    weight form (CISPO's detached clipped ratio, so that all four bounds act) and the defaults
    (0.2 / 0.28 for correct responses, DAPO's clip-higher; 0.2 / 0.2 for incorrect ones) are this
    toolkit's reading. Bounded: every weight is at most ``1 + max(pos_high, neg_high)``."""
    p = resolve("dispo", {"pos_low": pos_low, "pos_high": pos_high, "neg_low": neg_low, "neg_high": neg_high})
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    keep, log_r = _masked_log_ratio(logp, old_logp, m)
    a = adv.reshape(B, 1)
    ld = log_r.detach()
    pos = a > 0
    lo = torch.where(pos, torch.full_like(ld, 1 - p["pos_low"]), torch.full_like(ld, 1 - p["neg_low"]))
    hi = torch.where(pos, torch.full_like(ld, 1 + p["pos_high"]), torch.full_like(ld, 1 + p["neg_high"]))
    log_lo = torch.log(torch.clamp(lo, min=0.0))  # a lower end of 0 (low >= 1): no lower bound
    log_w = torch.minimum(torch.maximum(ld, log_lo), torch.log(hi))
    w = torch.exp(log_w)
    per_tok = torch.where(keep, w * a * torch.where(keep, logp, _zero(ld)), _zero(ld))
    loss = -_token_mean(per_tok, keep, m)
    metrics = {"token_clip_frac": _frac(log_w != ld, keep, m)}
    return LossOutput(loss, _seq_log_ratio(log_r, B, group_size), None, metrics)


def oapl_optimal_advantages(adv, beta: float):
    """OAPL's optimal advantage of each completion from its group's centred rewards ``a`` (prompts_per_step, G):
    ``A*_i = a_i - V*``, ``V* = beta log mean_j exp(a_j / beta)`` (the KL-regularised optimal value
    of the group under the behaviour policy, estimated from its G samples). Invariant to a common
    shift of the rewards, so any centred advantage (``drgrpo``, ``loo`` = G/(G-1) times it) gives it
    up to that scale. ``beta`` is checked as the loss's knob; ``adv`` must be a finite (prompts_per_step, G)
    tensor with G >= 1 (ValueError naming the shape or the index)."""
    beta = resolve("oapl", {"beta": beta})["beta"]
    if not isinstance(adv, torch.Tensor):
        raise ValueError(f"oapl: advantages must be a torch tensor (prompts_per_step, G), got {type(adv).__name__}")
    check_groups(adv, "advantages")
    lse = torch.logsumexp(adv / beta, -1, keepdim=True) - math.log(adv.shape[-1])
    return adv - beta * lse


@register_token_loss("oapl",
                     label="OAPL", style=Style("#66CCEE", "X", 29),
                     params=(Param("beta", 1.0, "beta_OAPL", "oapl: KL-regularisation strength of the "
                                   "optimal-advantage regression, V* = beta log mean exp(a / beta)"),))
def oapl_loss(logp, old_logp, mask, advantages, group_size: int, eps: float | None = None, *,
              beta: float = 1.0) -> LossOutput:
    """OAPL (arXiv 2602.19362), KL-regularised optimal-advantage regression with no importance weight:
    with the sequence log-ratio ``l_i = sum_t log(pi_theta / pi_b)(o_t)`` the policy's implied
    advantage is ``beta l_i``, regressed onto the closed-form optimal advantage
    ``A*_i = a_i - beta log mean_j exp(a_j / beta)`` (:func:`oapl_optimal_advantages`, ``a`` the
    advantages passed, read as the group's centred rewards):

        loss = (1/(prompts_per_step G)) sum_i (beta l_i - A*_i)^2 / (2 beta)

    Its gradient is ``-(1/N) sum_i (A*_i - beta l_i) grad l_i``: a policy gradient whose advantage
    is ``A*_i - beta l_i``, with no ratio anywhere. What it optimises: the minimiser in ``pi_theta``
    is ``pi_b exp(A*/beta)`` on the sampled completions, the KL-regularised optimum
    ``argmax E[r] - beta KL(pi || pi_b)`` relative to the behaviour policy; it is not an estimate
    of grad J(theta) (its bias against grad J on E1/E2 is what the toolkit measures, not a defect).
    ``eps`` is not used.

    Why a loss and not a trajectory scheme: a scheme's gradient is ``c_i A_i grad l_i`` with the
    weight ``c_i`` a function of the ratios only; OAPL's factor ``A*_i - beta l_i`` is additive in
    ``l_i`` and depends on the whole group's advantages through ``V*``, so it has no weight form.
    Reference: the paper's closed form as stated; its release was not available to read, and
    ``beta = 1`` is this toolkit's choice. Bounded: the gradient factor is linear in ``l_i``."""
    beta = resolve("oapl", {"beta": beta})["beta"]
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    _keep, log_r = _masked_log_ratio(logp, old_logp, m)
    l = log_r.sum(-1).reshape(B // group_size, group_size)
    a_star = oapl_optimal_advantages(adv.to(torch.float64), beta).to(l.dtype)
    loss = ((beta * l - a_star) ** 2).mean() / (2 * beta)
    return LossOutput(loss, _seq_log_ratio(log_r, B, group_size), None, {})
