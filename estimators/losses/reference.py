"""The token-level losses users compare against (not members of THEORY §2's class): GRPO/PPO's
token clip, GSPO, CISPO, M2PO and DeepSeek's off-policy sequence masking (OPSM)."""
from __future__ import annotations

import torch

from .._validate import check_eps
from ..params import Param, resolve
from ..records import Style
from .batch import _aggregate, _check_batch, _seq_log_ratio, _token_log_ratio, ppo_clip_objective
from .registry import LossOutput, register_token_loss


@register_token_loss("token_clip", options=("eps_high", "agg"), bounded=False,
                     label="token GRPO (clip)", style=Style("#E69F00", "<", 7))
def token_clip_loss(logp, old_logp, mask, advantages, group_size: int, eps: float, eps_high: float | None = None,
                    agg: str = "seq-mean-token-mean") -> LossOutput:
    """GRPO/PPO token-level clipped surrogate (reference (f) of THEORY §2): per token
    ``-min(r_t A, clip(r_t, 1-eps, 1+eps_high) A)``, eps_high = eps unless given."""
    eps = check_eps(eps)
    eps_high = eps if eps_high is None else check_eps(eps_high)
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    log_r = _token_log_ratio(logp, old_logp, m)
    a = adv.reshape(B, 1)
    per_tok = -ppo_clip_objective(log_r, a, 1 - eps, 1 + eps_high)
    loss = _aggregate(per_tok, m, agg)
    r = torch.exp(log_r.detach())
    clipped = ((r > 1 + eps_high) & (a > 0)) | ((r < 1 - eps) & (a < 0))
    metrics = {"token_clip_frac": float((clipped.to(m.dtype) * m).sum() / m.sum())}
    return LossOutput(loss, _seq_log_ratio(log_r, B, group_size), None, metrics)


@register_token_loss("gspo", bounded=False,
                     label="GSPO", style=Style("#009E73", ">", 8),
                     params=(Param("eps_low", 0.0003, "epsilon_low (GSPO)", "GSPO: lower clip of the sequence ratio, "
                                   "1 - eps_low", hi=1.0),
                             Param("eps_high", 0.0004, "epsilon_high (GSPO)", "GSPO: upper clip of the sequence "
                                   "ratio, 1 + eps_high")))
def gspo_loss(logp, old_logp, mask, advantages, group_size: int, eps: float | None = None, *,
              eps_low: float = 3e-4, eps_high: float = 4e-4) -> LossOutput:
    """GSPO (Zheng et al., arXiv 2507.18071, the J_GSPO objective with s_i = (pi_theta/pi_old)^(1/|y_i|)):
    sequence ratio ``s_i = exp(mean_t log r_t)`` (geometric mean), PPO-clipped per sequence at
    ``[1 - eps_low, 1 + eps_high]`` (the paper's §5.1 ranges 3e-4 and 4e-4 by default).
    ``eps`` (the trajectory schemes' threshold) is not used: GSPO's range is its own knob."""
    p = resolve("gspo", {"eps_low": eps_low, "eps_high": eps_high})
    eps_low, eps_high = p["eps_low"], p["eps_high"]
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    log_r = _token_log_ratio(logp, old_logp, m)
    log_s = log_r.sum(-1) / m.sum(-1)
    a = adv.reshape(B)
    loss = -ppo_clip_objective(log_s, a, 1 - eps_low, 1 + eps_high).mean()
    sd = torch.exp(log_s.detach())
    metrics = {"seq_clip_frac":
               float((((sd > 1 + eps_high) & (a > 0)) | ((sd < 1 - eps_low) & (a < 0))).float().mean())}
    return LossOutput(loss, _seq_log_ratio(log_r, B, group_size), None, metrics)


@register_token_loss("cispo",
                     label="CISPO", style=Style("#AA4499", "8", 12),
                     params=(Param("eps_low", 10.0, "epsilon_low^IS", "CISPO: lower clip of the detached token "
                                   "ratio, 1 - eps_low (>= 1: no lower bound)"),
                             Param("eps_high", 0.2, "epsilon_high^IS", "CISPO: upper clip of the detached token "
                                   "ratio, 1 + eps_high")))
def cispo_loss(logp, old_logp, mask, advantages, group_size: int, eps: float | None = None, *,
               eps_low: float = 10.0, eps_high: float = 0.2) -> LossOutput:
    """CISPO (MiniMax-M1, arXiv 2506.13585, §3.1, the J_CISPO objective): every token keeps a gradient, its
    detached ratio clipped, ``J = (1/sum_i |o_i|) sum_{i,t} sg(clip(r_t, 1-eps_low, 1+eps_high)) A_i
    log pi_theta(o_t)`` (token mean over the batch). The paper sets eps_low "large" (no lower
    bound) and tunes eps_high; ``eps`` is not used."""
    p = resolve("cispo", {"eps_low": eps_low, "eps_high": eps_high})
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    log_r = _token_log_ratio(logp, old_logp, m)
    r = torch.exp(log_r.detach())
    w = torch.clamp(r, min=1 - p["eps_low"], max=1 + p["eps_high"])
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    per_tok = torch.where(m > 0, (w * adv.reshape(B, 1) * logp) * m, zero)
    loss = -per_tok.sum() / m.sum()
    metrics = {"token_clip_frac": float(((w != r).to(m.dtype) * m).sum() / m.sum())}
    return LossOutput(loss, _seq_log_ratio(log_r, B, group_size), None, metrics)


def m2po_keep_mask(log_r, m, tau: float):
    """M2PO's token mask (arXiv 2510.01161, the M2 trust region: M2_hat = mean of (log r)^2 and its mask step):
    over **every** completion token of the batch (either advantage sign, as AReaL's reference
    ``_apply_m2po_masking`` does), mask the tokens of largest ``(log r)^2`` until the mean of
    ``(log r)^2`` over the tokens left is <= tau. Ties are broken by position (stable sort,
    earlier tokens masked first). If even the single smallest exceeds tau every token is
    masked (AReaL instead keeps that one token). Returns a (B, T) 0/1 tensor."""
    m2 = (log_r.detach() ** 2)
    sel = m > 0
    vals = m2[sel]
    n = vals.numel()
    vs, order = torch.sort(vals, descending=True, stable=True)
    suffix_mean = vs.flip(0).cumsum(0).flip(0) / torch.arange(n, 0, -1, dtype=vs.dtype, device=vs.device)
    ok = torch.nonzero(suffix_mean <= tau)
    k = int(ok[0]) if len(ok) else n  # number of tokens masked
    keep_sorted = torch.ones(n, dtype=torch.bool, device=vs.device)
    keep_sorted[:k] = False
    keep = torch.empty_like(keep_sorted)
    keep[order] = keep_sorted
    out = torch.zeros_like(sel)
    out[sel] = keep
    return out.to(m.dtype)


@register_token_loss("m2po", batch_coupled=True,
                     label="M2PO", style=Style("#661100", "H", 13),
                     params=(Param("tau", 0.04, "tau_M2", "M2PO: mask the tokens of largest (log r)^2 until the "
                                   "batch mean of (log r)^2 over the rest is <= tau"),))
def m2po_loss(logp, old_logp, mask, advantages, group_size: int, eps: float | None = None, *,
              tau: float = 0.04) -> LossOutput:
    """M2PO (Zheng, Zhao, Chen, arXiv 2510.01161, the J_M2PO objective): no clipping, the second-moment mask
    of :func:`m2po_keep_mask` (a statistic of the whole batch passed), token mean over the batch:
    ``J = (1/sum_i |o_i|) sum_{i,t} M_{i,t} r_{i,t} A_i``, so the gradient of a kept token is
    ``r_t A grad log pi``. ``eps`` is not used."""
    tau = resolve("m2po", {"tau": tau})["tau"]
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    log_r = _token_log_ratio(logp, old_logp, m)
    keep = m2po_keep_mask(log_r, m, tau)
    r = torch.exp(torch.where(keep > 0, log_r, torch.zeros_like(log_r))) * keep  # masked tokens: exactly 0
    loss = -((r * adv.reshape(B, 1)) * m).sum() / m.sum()
    metrics = {"token_clip_frac": float(((1 - keep) * m).sum() / m.sum()),  # tokens masked
               "m2po_m2": float(((log_r.detach() ** 2) * m).sum() / m.sum())}
    return LossOutput(loss, _seq_log_ratio(log_r, B, group_size), None, metrics)


@register_token_loss("opsm", options=("eps_high",), bounded=False,
                     label="OPSM", style=Style("#6699CC", "1", 14),
                     params=(Param("delta", 0.5, "delta", "OPSM: drop a sequence with A < 0 whose mean token "
                                   "log(pi_b / pi_theta) exceeds delta"),))
def opsm_loss(logp, old_logp, mask, advantages, group_size: int, eps: float, eps_high: float | None = None, *,
              delta: float = 0.5) -> LossOutput:
    """DeepSeek-V3.2 off-policy sequence masking (arXiv 2512.02556, the masked GRPO objective and its mask M_i,t,
    eq. (9) as TRL cites it): the token-level GRPO loss (:func:`token_clip_loss`, seq-mean-token-mean, clip
    ``[1-eps, 1+eps_high]``) with the
    sequences dropped whose advantage is negative **and** whose mean token
    ``log(pi_b / pi_theta)`` exceeds delta (pi_b: the sampling policy)."""
    delta = resolve("opsm", {"delta": delta})["delta"]
    eps = check_eps(eps)
    eps_high = eps if eps_high is None else check_eps(eps_high)
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    log_r = _token_log_ratio(logp, old_logp, m)
    a = adv.reshape(B, 1)
    kl = -(log_r.detach().sum(-1) / m.sum(-1))  # mean_t log(pi_b / pi_theta)
    keep = ~((a[:, 0] < 0) & (kl > delta))
    per_tok = -ppo_clip_objective(log_r, a, 1 - eps, 1 + eps_high, keep=keep[:, None])
    loss = _aggregate(per_tok, m, "seq-mean-token-mean")
    metrics = {"seq_clip_frac": float((~keep).float().mean())}  # sequences dropped
    return LossOutput(loss, _seq_log_ratio(log_r, B, group_size), None, metrics)
