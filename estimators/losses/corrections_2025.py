"""Token-level stale-rollout corrections that verl, TRL and prime-rl ship since late 2025 (knobs in
their registrations; eps is not used by any of them): icepop (token masked IS), sapo (SAPO's
soft gate in place of the clip), dppo_tv (DPPO's binary total-variation mask, truncated IS on the
rest). Masked positions never reach a value: the token log-ratio is where(mask, logp - old, 0) and
every per-token term is selected with torch.where, so padding holding -inf or NaN is harmless, and
no exp of an unbounded log-ratio reaches the loss or its gradient."""
from __future__ import annotations

import math

import torch

from ..params import Param, resolve
from ..records import Style, interval_check
from .batch import _check_batch, _frac, _masked_log_ratio, _seq_log_ratio, _seq_mean_token_mean, _token_mean, _zero
from .registry import LossOutput, register_token_loss

LOGPROB_LOSSES = ("icepop", "dppo_tv")
"""Token losses that refuse a log-probability above 0 on a completion token (a probability above 1: the
input is not log-probabilities, and the loss would treat it as one)."""


def _refuse_positive_logp(loss: str, logp, old_logp, keep, why: str) -> None:
    for name, t in (("logp", logp), ("old_logp", old_logp)):
        above = keep & (t.detach() > 0)
        if bool(above.any()):
            idx = tuple(int(i) for i in torch.nonzero(above)[0])
            raise ValueError(f"{loss}: {name} holds a log-probability above 0 ({float(t.detach()[idx])}) at completion "
                             f"token {idx}: {why.format(name=name)}")


@register_token_loss("icepop",
                     label="IcePop", style=Style("#33BBEE", "4", 20), knob_check=interval_check(),
                     params=(Param("lo", 0.5, "alpha", "icepop: keep a token's ratio r_t when alpha <= r_t <= beta "
                                   "(zero elsewhere)"),
                             Param("hi", 5.0, "beta", "icepop: upper end of the kept token-ratio interval")))
def icepop_loss(logp, old_logp, mask, advantages, group_size: int, eps: float | None = None, *,
                lo: float = 0.5, hi: float = 5.0) -> LossOutput:
    """IcePop (Ling team, arXiv 2510.18855), token-level masked importance sampling: a token's
    ratio ``r_t = pi_theta / pi_b`` is kept where ``alpha <= r_t <= beta`` and zeroed elsewhere;
    the surrogate is ``r_t A`` on the kept tokens (gradient ``r_t A grad log pi``), averaged per
    sequence then over sequences (``seq-mean-token-mean``, the GRPO objective IcePop masks).
    The boundaries are kept (``>=``, ``<=``), compared on ``log r_t``.

    Followed: verl-project/verl ``verl/trainer/ppo/rollout_corr_helper.py``
    (``compute_rollout_correction_weights``, a ``"lower_upper"`` threshold: zero weights outside
    ``[lower, upper]``) and ``verl/trainer/config/algorithm.py`` (``bypass_pg_token_icepop``:
    REINFORCE with the masked token weight, 0.5 and 5.0) at commit
    1dda039b9c6311889a9c9a26040677e1254814f9; TRL's ``vllm_importance_sampling_mode="token_mask"``
    (huggingface/trl ``trl/trainer/grpo_trainer.py`` at f2cd57710ae345ea6428ae95363267fcf38a3dc8)
    is the same mask. Unlike verl, no ratio is clamped at exp(+-20) first."""
    p = resolve("icepop", {"lo": lo, "hi": hi})
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    keep, log_r = _masked_log_ratio(logp, old_logp, m)
    _refuse_positive_logp("icepop", logp, old_logp, keep,
                          "IcePop compares the probabilities pi_theta and pi_b, which are at most 1")
    ld = log_r.detach()
    inside = keep & (ld >= math.log(p["lo"])) & (ld <= math.log(p["hi"]))
    r = torch.exp(torch.where(inside, log_r, _zero(log_r)))  # kept tokens: r_t <= beta
    per_tok = torch.where(inside, r * adv.reshape(B, 1), _zero(r))
    loss = -_seq_mean_token_mean(per_tok, keep, m)
    metrics = {"token_clip_frac": _frac(~inside, keep, m)}  # tokens masked
    return LossOutput(loss, _seq_log_ratio(log_r, B, group_size), None, metrics)


@register_token_loss("sapo",
                     label="SAPO", style=Style("#0077BB", "*", 21),
                     params=(Param("tau_pos", 1.0, "tau_pos", "sapo: gate temperature of tokens with A > 0 (at most "
                                   "1e30: the loss computes in float32 at least)", hi=1e+30, hi_open=False),
                             Param("tau_neg", 1.05, "tau_neg", "sapo: gate temperature of tokens with A <= 0 (at "
                                   "most 1e30)", hi=1e+30, hi_open=False)))
def sapo_loss(logp, old_logp, mask, advantages, group_size: int, eps: float | None = None, *,
              tau_pos: float = 1.0, tau_neg: float = 1.05) -> LossOutput:
    """SAPO (Qwen team, arXiv 2511.20347), the soft gate in place of the clip: per token
    ``f(r_t) A`` with ``f(r) = (4 / tau) sigmoid(tau (r - 1))``, ``tau = tau_pos`` when ``A > 0``
    and ``tau_neg`` otherwise; ``seq-mean-token-mean``. Its gradient is
    ``4 sigmoid(x) sigmoid(-x) r_t A grad log pi`` with ``x = tau (r_t - 1)`` (= ``r_t A grad log pi``
    at ``r_t = 1``), computed in log space (``log 4 + logsigmoid(x) + logsigmoid(-x) + log r_t``)
    and applied as ``sg(f) A + sg(f') (l - sg(l)) A``: same value and gradient as the plain
    formula, but finite where ``r_t`` overflows (the plain formula's gradient is ``0 * inf``).

    Followed: verl-project/verl ``verl/trainer/ppo/core_algos.py`` (``compute_policy_loss_sapo``)
    and ``verl/workers/config/actor.py`` (tau_pos 1.0, tau_neg 1.05) at commit
    1dda039b9c6311889a9c9a26040677e1254814f9; huggingface/trl ``trl/trainer/grpo_trainer.py``
    (``loss_type="sapo"``) at f2cd57710ae345ea6428ae95363267fcf38a3dc8; inclusionAI/AReaL
    ``areal/utils/functional/functional.py`` (``sapo_loss_fn``, token mean) at
    4aef98d8d818af55b43621aaadba047ae10f4e77. Unlike verl, no ratio is clamped at exp(+-20)."""
    p = resolve("sapo", {"tau_pos": tau_pos, "tau_neg": tau_neg})
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    keep, log_r = _masked_log_ratio(logp, old_logp, m)
    a = adv.reshape(B, 1)
    ld = log_r.detach()
    tau = torch.where(a > 0, torch.full_like(ld, p["tau_pos"]), torch.full_like(ld, p["tau_neg"]))
    x = tau * torch.expm1(ld)  # tau (r - 1), exact near r = 1
    gate = torch.sigmoid(x) * (4.0 / tau)
    slope = torch.exp(math.log(4.0) + torch.nn.functional.logsigmoid(x) + torch.nn.functional.logsigmoid(-x) + ld)
    per_tok = torch.where(keep, (gate + slope * (log_r - ld)) * a, _zero(ld))
    loss = -_seq_mean_token_mean(per_tok, keep, m)
    return LossOutput(loss, _seq_log_ratio(log_r, B, group_size), None, {})


@register_token_loss("dppo_tv",
                     label="DPPO-TV", style=Style("#EE7733", "+", 22),
                     params=(Param("delta", 0.15, "delta_TV", "dppo_tv: drop a token when pi - mu > delta (A > 0) or "
                                   "pi - mu < -delta (A <= 0)"),
                             Param("C", 10000.0, "C_DPPO", "dppo_tv: truncation of the detached token ratio, min(r, "
                                   "C)")))
def dppo_tv_loss(logp, old_logp, mask, advantages, group_size: int, eps: float | None = None, *,
                 delta: float = 0.15, C: float = 1e4) -> LossOutput:
    """DPPO-Binary-TV (Qi et al., arXiv 2602.04879): a token is dropped when its probability moved
    too far in the direction its advantage pushes, ``pi_t - mu_t > delta`` with ``A > 0`` or
    ``pi_t - mu_t < -delta`` with ``A <= 0`` (``pi_t = exp(logp)``, ``mu_t = exp(old_logp)``: the
    probabilities of the sampled token; the boundaries are kept); the others get the truncated
    IS policy gradient ``J = sg(min(r_t, C)) A log pi_theta(o_t)``, token mean over the batch.
    Log-probabilities are <= 0 as for any policy.

    Followed: verl-project/verl ``verl/trainer/ppo/core_algos.py`` (``compute_policy_loss_dppo_tv``,
    ``loss_agg_mode`` default ``token-mean``) and ``examples/dppo_trainer/run_qwen3_30b_a3b_megatron.sh``
    (delta 0.15, ``clip_ratio_c=10000``) at commit 1dda039b9c6311889a9c9a26040677e1254814f9;
    PrimeIntellect-ai/prime-rl ``src/prime_rl/trainer/rl/loss.py`` (``default_loss_fn``: the same
    mask, ``r_t A`` untruncated, plus a KL term not used here) at
    559b44772e471d1538537b8805cc77f3824a5e64. Unlike verl, no ratio is clamped at exp(+-20) first
    (``min(r, C)`` is taken in log space)."""
    p = resolve("dppo_tv", {"delta": delta, "C": C})
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    keep, log_r = _masked_log_ratio(logp, old_logp, m)
    _refuse_positive_logp("dppo_tv", logp, old_logp, keep, "dppo_tv reads exp({name}) as a probability")
    a = adv.reshape(B, 1)
    lp = torch.where(keep, logp.detach(), _zero(log_r))
    lo = torch.where(keep, old_logp.detach(), _zero(log_r))
    diff = torch.exp(lp) - torch.exp(lo)  # pi_t - mu_t
    valid = keep & torch.where(a > 0, diff <= p["delta"], diff >= -p["delta"])
    w = torch.exp(torch.clamp(torch.where(valid, log_r.detach(), _zero(log_r)), max=math.log(p["C"])))
    per_tok = torch.where(valid, w * a * torch.where(keep, logp, _zero(log_r)), _zero(log_r))
    loss = -_token_mean(per_tok, keep, m)
    metrics = {"token_clip_frac": _frac(~valid, keep, m)}  # tokens dropped
    return LossOutput(loss, _seq_log_ratio(log_r, B, group_size), None, metrics)
