"""Torch surrogate losses over per-token log-probs.

Every trajectory-level scheme of :mod:`estimators.schemes` gets one surrogate whose
autograd gradient is exactly (minus) THEORY §2's estimator, averaged over groups:

    grad(-loss) = (1/num_groups) sum_g (1/G) sum_i c_gi A_gi grad log pi_theta(o_gi | q_g)

with c = :func:`estimators.weights` evaluated on the detached trajectory log-ratios.
Stop-gradients sit where THEORY §2 puts them:

The surrogate is a property of the registered scheme (``Scheme.surrogate``,
:data:`estimators.schemes.SURROGATES`):

* ``clamp`` (``tic_mask``): the clamped surrogate ``min(w, 1+eps) A``: clamped trajectories
  get zero gradient (computed as ``exp(min(log w, log(1+eps)))``, finite for any log-ratio).
* ``detached`` (every other scheme): ``sg(c) * exp(l - sg(l)) * A`` with ``l`` the trajectory
  log-ratio: its value is ``c A`` and its gradient ``c A grad l``. For GMC this equals
  ``sg(lambda) w(theta) A`` in value and gradient, but never overflows.

Token-level losses users compare against (not members of the class), registered in
:data:`TOKEN_LOSSES` with their knobs in :data:`estimators.params.PARAMS`:

* ``token_clip``: GRPO/PPO per-token clip, ``min(r_t A, clip(r_t, 1-eps_low, 1+eps_high) A)``,
  aggregated per sequence (``1/|o|``) then averaged (``seq-mean-token-mean``) or over all
  tokens (``token-mean``).
* ``gspo``: sequence geometric-mean ratio ``s = exp(mean_t log r_t)``, PPO-clipped at its own
  range (``eps_low``, ``eps_high``; the paper's 3e-4 / 4e-4).
* ``cispo``, ``m2po``, ``opsm``: see their functions; ``icepop``, ``sapo``, ``dppo_tv``: see
  :mod:`estimators.token_peers_2025`.

No loss computes the ratio diagnostics (:func:`estimators.diagnostics`): a caller computes
them once per update from :attr:`LossOutput.seq_log_ratio`. ``metrics`` holds only what the
loss alone knows: ``token_clip_frac`` (token_clip, cispo: tokens whose ratio was clipped;
m2po: tokens masked), ``seq_clip_frac`` (gspo: sequences clipped; opsm: sequences dropped),
``m2po_m2`` (m2po: the batch M2 before masking).

Rows of the batch are groups laid out contiguously: rows ``g*G .. g*G+G-1`` are the G
completions of prompt g.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ._validate import check_eps
from .params import resolve
from .schemes import SCHEMES, get_scheme, weights


@dataclass
class LossOutput:
    loss: torch.Tensor
    """scalar surrogate; minimise it."""
    seq_log_ratio: torch.Tensor
    """(num_groups, G) detached trajectory log-ratios sum_t (log pi_theta - log pi_b)."""
    weights: torch.Tensor | None
    """(num_groups, G) detached weights c (trajectory schemes only)."""
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


TOKEN_LOSSES: dict[str, TokenLoss] = {}


def register_token_loss(name: str, *, options: tuple = (), batch_coupled: bool = False):
    def deco(fn):
        if name in TOKEN_LOSSES or name in SCHEMES:
            raise ValueError(f"a loss named {name!r} is already registered")
        TOKEN_LOSSES[name] = TokenLoss(name, fn, tuple(options), batch_coupled, (fn.__doc__ or "").strip())
        return fn

    return deco


def loss_names() -> list[str]:
    """Every name :func:`policy_loss` accepts: trajectory schemes, then token-level losses."""
    return list(SCHEMES) + list(TOKEN_LOSSES)


def is_batch_coupled(name: str) -> bool:
    """True when ``name``'s loss on a batch is not the mean of its losses on the batch's groups."""
    if name in SCHEMES:
        return SCHEMES[name].batch_coupled
    if name in TOKEN_LOSSES:
        return TOKEN_LOSSES[name].batch_coupled
    raise ValueError(f"unknown loss {name!r}; valid: {', '.join(loss_names())}")


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


def trajectory_loss(scheme: str, logp, old_logp, mask, advantages, group_size: int, eps: float,
                    **params) -> LossOutput:
    """Surrogate for a trajectory-level scheme (see module docstring).

    Args:
        logp: (B, T) per-token log-probs under pi_theta (requires grad).
        old_logp: (B, T) behaviour log-probs log pi_b, recorded at sampling time.
        mask: (B, T) 1 on completion tokens.
        advantages: (B,) or (B // G, G).
        group_size: G; B must be a multiple of G.
        eps: the cap threshold.
        **params: the scheme's knobs (:data:`estimators.params.PARAMS`).
    """
    spec = get_scheme(scheme)
    eps = check_eps(eps)
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    lr = trajectory_log_ratio(logp, old_logp.detach(), m).reshape(B // group_size, group_size)
    lr_d = lr.detach()
    c = weights(scheme, lr_d, eps, adv if spec.needs_advantages else None, **params)
    if spec.surrogate == "clamp":
        factor = torch.exp(torch.clamp(lr, max=math.log1p(eps)))
    else:
        factor = c * torch.exp(lr - lr_d)
    loss = -(factor * adv).mean()
    return LossOutput(loss, lr_d, c, {})


def _token_log_ratio(logp, old_logp, m):
    return (logp - old_logp.detach()) * m


def _aggregate(per_tok, m, agg: str):
    if agg == "seq-mean-token-mean":
        return ((per_tok * m).sum(-1) / m.sum(-1)).mean()
    if agg == "token-mean":
        return (per_tok * m).sum() / m.sum()
    raise ValueError(f"unknown agg {agg!r}; valid: seq-mean-token-mean, token-mean")


def _seq_log_ratio(log_r, B, G):
    return log_r.detach().sum(-1).reshape(B // G, G)


@register_token_loss("token_clip", options=("eps_high", "agg"))
def token_clip_loss(logp, old_logp, mask, advantages, group_size: int, eps: float, eps_high: float | None = None,
                    agg: str = "seq-mean-token-mean") -> LossOutput:
    """GRPO/PPO token-level clipped surrogate (reference (f) of THEORY §2): per token
    ``-min(r_t A, clip(r_t, 1-eps, 1+eps_high) A)``, eps_high = eps unless given."""
    eps = check_eps(eps)
    eps_high = eps if eps_high is None else check_eps(eps_high)
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    log_r = _token_log_ratio(logp, old_logp, m)
    r = torch.exp(log_r)
    a = adv.reshape(B, 1)
    per_tok = -torch.minimum(r * a, torch.clamp(r, 1 - eps, 1 + eps_high) * a)
    loss = _aggregate(per_tok, m, agg)
    clipped = ((r.detach() > 1 + eps_high) & (a > 0)) | ((r.detach() < 1 - eps) & (a < 0))
    metrics = {"token_clip_frac": float((clipped.to(m.dtype) * m).sum() / m.sum())}
    return LossOutput(loss, _seq_log_ratio(log_r, B, group_size), None, metrics)


@register_token_loss("gspo")
def gspo_loss(logp, old_logp, mask, advantages, group_size: int, eps: float | None = None, *,
              eps_low: float = 3e-4, eps_high: float = 4e-4) -> LossOutput:
    """GSPO (Zheng et al., arXiv 2507.18071, the J_GSPO objective with s_i = (pi_theta/pi_old)^(1/|y_i|)): sequence ratio
    ``s_i = exp(mean_t log r_t)`` (geometric mean), PPO-clipped per sequence at
    ``[1 - eps_low, 1 + eps_high]`` (the paper's §5.1 ranges 3e-4 and 4e-4 by default).
    ``eps`` (the trajectory schemes' threshold) is not used: GSPO's range is its own knob."""
    p = resolve("gspo", {"eps_low": eps_low, "eps_high": eps_high})
    eps_low, eps_high = p["eps_low"], p["eps_high"]
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    log_r = _token_log_ratio(logp, old_logp, m)
    s = torch.exp(log_r.sum(-1) / m.sum(-1))
    a = adv.reshape(B)
    loss = -torch.minimum(s * a, torch.clamp(s, 1 - eps_low, 1 + eps_high) * a).mean()
    sd = s.detach()
    metrics = {"seq_clip_frac": float((((sd > 1 + eps_high) & (a > 0)) | ((sd < 1 - eps_low) & (a < 0))).float().mean())}
    return LossOutput(loss, _seq_log_ratio(log_r, B, group_size), None, metrics)


@register_token_loss("cispo")
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
    loss = -((w * adv.reshape(B, 1) * logp) * m).sum() / m.sum()
    metrics = {"token_clip_frac": float(((w != r).to(m.dtype) * m).sum() / m.sum())}
    return LossOutput(loss, _seq_log_ratio(log_r, B, group_size), None, metrics)


def m2po_keep_mask(log_r, m, tau: float):
    """M2PO's token mask (arXiv 2510.01161, the M2 trust region: M2_hat = mean of (log r)^2 and its mask step): over **every**
    completion token of the batch (either advantage sign, as AReaL's reference
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


@register_token_loss("m2po", batch_coupled=True)
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


@register_token_loss("opsm", options=("eps_high",))
def opsm_loss(logp, old_logp, mask, advantages, group_size: int, eps: float, eps_high: float | None = None, *,
              delta: float = 0.5) -> LossOutput:
    """DeepSeek-V3.2 off-policy sequence masking (arXiv 2512.02556, the masked GRPO objective and its mask M_i,t, eq. (9) as TRL cites it): the token-level
    GRPO loss (:func:`token_clip_loss`, seq-mean-token-mean, clip ``[1-eps, 1+eps_high]``) with the
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
    r = torch.exp(log_r)
    per_tok = -torch.minimum(r * a, torch.clamp(r, 1 - eps, 1 + eps_high) * a) * keep[:, None].to(m.dtype)
    loss = _aggregate(per_tok, m, "seq-mean-token-mean")
    metrics = {"seq_clip_frac": float((~keep).float().mean())}  # sequences dropped
    return LossOutput(loss, _seq_log_ratio(log_r, B, group_size), None, metrics)


from . import token_peers_2025  # noqa: F401  (registers icepop, sapo, dppo_tv)

TOKEN_LEVEL = tuple(TOKEN_LOSSES)
"""Names of the token-level losses (not members of the trajectory family)."""


def check_options(name: str, options: dict | None) -> dict:
    """The options ``name`` accepts, validated: knobs of :data:`estimators.params.PARAMS`
    (filled with their defaults) plus a token loss's own extra options."""
    options = dict(options or {})
    if name in SCHEMES:
        return resolve(name, options)
    if name not in TOKEN_LOSSES:
        raise ValueError(f"unknown loss {name!r}; valid: {', '.join(loss_names())}")
    extra = {k: options.pop(k) for k in TOKEN_LOSSES[name].options if k in options}
    return {**resolve(name, options), **extra}


def policy_loss(name: str, logp, old_logp, mask, advantages, group_size: int, eps: float, **options) -> LossOutput:
    """Dispatch by name: any trajectory scheme of :data:`estimators.SCHEMES` or token-level loss of
    :data:`TOKEN_LOSSES`; ``options`` are its knobs (unknown ones refused with a ValueError)."""
    opts = check_options(name, options)
    if name in SCHEMES:
        return trajectory_loss(name, logp, old_logp, mask, advantages, group_size, eps, **opts)
    return TOKEN_LOSSES[name].fn(logp, old_logp, mask, advantages, group_size, eps, **opts)
