"""Torch surrogate losses over per-token log-probs.

Every trajectory-level scheme of :mod:`estimators.schemes` gets one surrogate whose
autograd gradient is exactly (minus) THEORY §2's estimator, averaged over groups:

    grad(-loss) = (1/num_groups) sum_g (1/G) sum_i c_gi A_gi grad log pi_theta(o_gi | q_g)

with c = :func:`estimators.weights` evaluated on the detached trajectory log-ratios.
Stop-gradients sit where THEORY §2 puts them:

* ``tic_mask`` is the clamped surrogate ``min(w, 1+eps) A``: clamped trajectories get
  zero gradient (computed as ``exp(min(log w, log(1+eps)))``, finite for any log-ratio).
* every other scheme is ``sg(c) * exp(l - sg(l)) * A`` with ``l`` the trajectory
  log-ratio: its value is ``c A`` and its gradient ``c A grad l``. For GMC this equals
  ``sg(lambda) w(theta) A`` in value and gradient, but never overflows.

Token-level baselines users compare against (not members of the class):

* ``token_clip``: GRPO/PPO per-token clip, ``min(r_t A, clip(r_t, 1-eps_low, 1+eps_high) A)``,
  aggregated per sequence (``1/|o|``) then averaged (``seq-mean-token-mean``) or over all
  tokens (``token-mean``).
* ``gspo``: sequence geometric-mean ratio ``s = exp(mean_t log r_t)``, PPO-clipped.

Rows of the batch are groups laid out contiguously: rows ``g*G .. g*G+G-1`` are the G
completions of prompt g.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ._validate import check_eps
from .diagnostics import diagnostics
from .schemes import SCHEMES, get_scheme, weights

TOKEN_LEVEL = ("token_clip", "gspo")


@dataclass
class LossOutput:
    loss: torch.Tensor
    """scalar surrogate; minimise it."""
    seq_log_ratio: torch.Tensor
    """(num_groups, G) detached trajectory log-ratios sum_t (log pi_theta - log pi_b)."""
    weights: torch.Tensor | None
    """(num_groups, G) detached weights c (trajectory schemes only)."""
    metrics: dict


def loss_names() -> list[str]:
    """Every name :func:`policy_loss` accepts: trajectory schemes, then token-level baselines."""
    return list(SCHEMES) + list(TOKEN_LEVEL)


def _check_batch(logp, old_logp, mask, advantages, group_size):
    if not isinstance(logp, torch.Tensor):
        raise ValueError(f"logp must be a torch tensor (batch, T), got {type(logp).__name__}")
    if logp.ndim != 2:
        raise ValueError(f"logp must have shape (batch, T), got {tuple(logp.shape)}")
    B, T = logp.shape
    for name, t in (("old_logp", old_logp), ("mask", mask)):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != (B, T):
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a tensor of shape {(B, T)} like logp, got {got}")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size G must be an integer >= 1, got {group_size!r}")
    if B % group_size:
        raise ValueError(
            f"batch of {B} rows does not split into groups of G = {group_size}: a group must stay whole in one batch"
        )
    adv = torch.as_tensor(advantages, dtype=logp.dtype, device=logp.device)
    if adv.numel() != B:
        raise ValueError(f"advantages must have one value per row ({B}), got shape {tuple(adv.shape)}")
    adv = adv.reshape(B // group_size, group_size)
    m = mask.to(logp.dtype)
    for name, t in (("logp", logp), ("old_logp", old_logp)):
        masked = torch.where(m > 0, t.detach(), torch.zeros_like(t.detach()))
        if not bool(torch.isfinite(masked).all()):
            idx = tuple(int(i) for i in torch.nonzero(~torch.isfinite(masked))[0])
            raise ValueError(f"{name} contains a non-finite value at completion token {idx}")
    if not bool(torch.isfinite(adv).all()):
        raise ValueError("advantages contain a non-finite value")
    lengths = m.sum(-1)
    if bool((lengths <= 0).any()):
        row = int(torch.nonzero(lengths <= 0)[0])
        raise ValueError(f"row {row} has an empty completion mask (no completion tokens)")
    return B, T, m, adv


def trajectory_log_ratio(logp, old_logp, mask):
    """Per-row sum over completion tokens of ``logp - old_logp``: the log of the trajectory ratio."""
    m = mask.to(logp.dtype)
    return ((logp - old_logp) * m).sum(-1)


def trajectory_loss(scheme: str, logp, old_logp, mask, advantages, group_size: int, eps: float) -> LossOutput:
    """Surrogate for a trajectory-level scheme (see module docstring).

    Args:
        logp: (B, T) per-token log-probs under pi_theta (requires grad).
        old_logp: (B, T) behaviour log-probs log pi_b, recorded at sampling time.
        mask: (B, T) 1 on completion tokens.
        advantages: (B,) or (B // G, G).
        group_size: G; B must be a multiple of G.
        eps: the cap threshold.
    """
    spec = get_scheme(scheme)
    eps = check_eps(eps)
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    lr = trajectory_log_ratio(logp, old_logp.detach(), m).reshape(B // group_size, group_size)
    lr_d = lr.detach()
    c = weights(scheme, lr_d, eps, adv if spec.needs_advantages else None)
    if scheme == "tic_mask":
        factor = torch.exp(torch.clamp(lr, max=math.log1p(eps)))
    else:
        factor = c * torch.exp(lr - lr_d)
    loss = -(factor * adv).mean()
    return LossOutput(loss, lr_d, c, diagnostics(lr_d, eps))


def token_clip_loss(logp, old_logp, mask, advantages, group_size: int, eps: float, eps_high: float | None = None,
                    agg: str = "seq-mean-token-mean") -> LossOutput:
    """GRPO/PPO token-level clipped surrogate (reference (f) of THEORY §2)."""
    eps = check_eps(eps)
    eps_high = eps if eps_high is None else check_eps(eps_high)
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    log_r = (logp - old_logp.detach()) * m
    r = torch.exp(log_r)
    a = adv.reshape(B, 1)
    per_tok = -torch.minimum(r * a, torch.clamp(r, 1 - eps, 1 + eps_high) * a)
    if agg == "seq-mean-token-mean":
        loss = ((per_tok * m).sum(-1) / m.sum(-1)).mean()
    elif agg == "token-mean":
        loss = (per_tok * m).sum() / m.sum()
    else:
        raise ValueError(f"unknown agg {agg!r}; valid: seq-mean-token-mean, token-mean")
    lr_d = (log_r.detach().sum(-1)).reshape(B // group_size, group_size)
    metrics = diagnostics(lr_d, eps)
    clipped = ((r.detach() > 1 + eps_high) & (a > 0)) | ((r.detach() < 1 - eps) & (a < 0))
    metrics["token_clip_frac"] = float((clipped.to(m.dtype) * m).sum() / m.sum())
    return LossOutput(loss, lr_d, None, metrics)


def gspo_loss(logp, old_logp, mask, advantages, group_size: int, eps: float = 3e-4, eps_high: float | None = 4e-4) -> LossOutput:
    """GSPO: sequence ratio s_i = exp(mean_t log r_t) (geometric mean), PPO-clipped per sequence."""
    eps = check_eps(eps)
    eps_high = eps if eps_high is None else check_eps(eps_high)
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    log_s = ((logp - old_logp.detach()) * m).sum(-1) / m.sum(-1)
    s = torch.exp(log_s)
    a = adv.reshape(B)
    loss = -torch.minimum(s * a, torch.clamp(s, 1 - eps, 1 + eps_high) * a).mean()
    lr_d = trajectory_log_ratio(logp.detach(), old_logp.detach(), m).reshape(B // group_size, group_size)
    metrics = diagnostics(lr_d, eps_high)
    sd = s.detach()
    metrics["seq_clip_frac"] = float((((sd > 1 + eps_high) & (a > 0)) | ((sd < 1 - eps) & (a < 0))).float().mean())
    return LossOutput(loss, lr_d, None, metrics)


def policy_loss(name: str, logp, old_logp, mask, advantages, group_size: int, eps: float, **kw) -> LossOutput:
    """Dispatch by name: any trajectory scheme, ``token_clip`` or ``gspo``."""
    if name in SCHEMES:
        if kw:
            raise ValueError(f"trajectory scheme {name!r} takes no extra options, got {sorted(kw)}")
        return trajectory_loss(name, logp, old_logp, mask, advantages, group_size, eps)
    if name == "token_clip":
        return token_clip_loss(logp, old_logp, mask, advantages, group_size, eps, **kw)
    if name == "gspo":
        return gspo_loss(logp, old_logp, mask, advantages, group_size, eps, **kw)
    raise ValueError(f"unknown loss {name!r}; valid: {', '.join(loss_names())}")
