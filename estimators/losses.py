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
  their section at the end of this module.

Padding and extremes, for every loss and dtype: log-ratios are formed by
:func:`masked_token_log_ratio`, which *selects* 0 outside the mask, so ``-inf`` or NaN padding
never reaches a value or a gradient; float16 / bfloat16 log-probs are widened to float32 for the
loss; PPO-clipped terms are selected (:func:`ppo_clip_objective`), never ``0 * inf``. Bounded
losses (:func:`is_bounded`) give a finite value and gradient for every finite input. The
unbounded ones: ``token_clip``, ``gspo``, ``opsm`` give ``+inf`` where A < 0 and a ratio
overflows (never NaN); ``is`` and ``tic_ppo`` refuse, with a ValueError naming the trajectory,
a surrogate or gradient that overflows the log-probs' dtype.

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

from ._compat import renamed_keywords
from ._validate import check_eps, check_group_size
from .params import Param, resolve
from .records import Style, interval_check, record
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
    bounded: bool = True  # finite value and gradient for every finite input (else: +inf, never NaN)


TOKEN_LOSSES: dict[str, TokenLoss] = {}


def register_token_loss(name: str, *, options: tuple = (), batch_coupled: bool = False, bounded: bool = True,
                        **record_fields):
    """Register a token-level loss. ``bounded=False`` declares a loss whose value is unbounded for
    some finite input (PPO's one-sided clip with A < 0): it must give ``+inf`` there, never NaN.
    ``record_fields`` (params, label, style, mass_bound, knob_check) are the estimator's record
    (:func:`estimators.records.record`)."""
    def deco(fn):
        from .schemes import check_registration

        check_registration(name, batch_coupled=batch_coupled, bounded=bounded)
        if isinstance(options, str) or not all(isinstance(o, str) for o in tuple(options)):
            raise ValueError(f"token loss {name!r}: options must be a tuple of knob names, got {options!r}")
        if name in TOKEN_LOSSES or name in SCHEMES:
            raise ValueError(f"a loss named {name!r} is already registered")
        record(name, **record_fields)
        TOKEN_LOSSES[name] = TokenLoss(name, fn, tuple(options), batch_coupled, (fn.__doc__ or "").strip(), bounded)
        return fn

    return deco


@renamed_keywords(name="estimator")
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


@renamed_keywords(name="estimator")
def is_batch_coupled(estimator: str) -> bool:
    """True when ``estimator``'s loss on a batch is not the mean of its losses on the batch's groups."""
    if estimator in SCHEMES:
        return SCHEMES[estimator].batch_coupled
    if estimator in TOKEN_LOSSES:
        return TOKEN_LOSSES[estimator].batch_coupled
    raise ValueError(f"unknown loss {estimator!r}; valid: {', '.join(loss_names())}")


def _check_advantages(advantages, B: int, group_size: int, dtype, device):
    """The advantages as a ``(B // G, G)`` tensor of ``dtype``: shape ``(B,)`` or ``(B // G, G)``
    only (any other shape is refused, never reshaped), finite before and after the cast."""
    adv = advantages if isinstance(advantages, torch.Tensor) else torch.as_tensor(advantages)
    if not (torch.is_floating_point(adv) or adv.dtype in (torch.int8, torch.int16, torch.int32, torch.int64)):
        raise ValueError(f"advantages must be a real numeric tensor, got dtype {adv.dtype}")
    shapes = ((B,), (B // group_size, group_size))
    if tuple(adv.shape) not in shapes:
        raise ValueError(f"advantages must have shape {shapes[0]} (one per row) or {shapes[1]} (num_groups, G), "
                         f"got {tuple(adv.shape)}")
    adv = adv.detach()  # the advantages are data, as the old log-probs are: no gradient flows into them
    wide = adv.to(torch.float64)
    if not bool(torch.isfinite(wide).all()):
        idx = tuple(int(i) for i in torch.nonzero(~torch.isfinite(wide))[0])
        raise ValueError(f"advantages contain a non-finite value ({float(wide[idx])}) at index {idx}")
    out = adv.to(dtype=dtype, device=device).reshape(B // group_size, group_size)
    if not bool(torch.isfinite(out).all()):
        idx = tuple(int(i) for i in torch.nonzero(~torch.isfinite(out.reshape(adv.shape)))[0])
        raise ValueError(f"advantage {float(wide[idx])} at index {idx} overflows the log-probs' dtype {dtype} "
                         f"(largest finite {torch.finfo(dtype).max:g}); pass log-probs of a wider dtype")
    return out


def _check_batch(logp, old_logp, mask, advantages, group_size):
    if not isinstance(logp, torch.Tensor):
        raise ValueError(f"logp must be a torch tensor (batch, T), got {type(logp).__name__}")
    if logp.ndim != 2:
        raise ValueError(f"logp must have shape (batch, T), got {tuple(logp.shape)}")
    B, T = logp.shape
    if B == 0:
        raise ValueError("empty batch (no rows): a loss needs at least one group of completions")
    for name, t in (("old_logp", old_logp), ("mask", mask)):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != (B, T):
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a tensor of shape {(B, T)} like logp, got {got}")
    group_size = check_group_size(group_size)
    if B % group_size:
        raise ValueError(
            f"batch of {B} rows does not split into groups of G = {group_size}: a group must stay whole in one batch"
        )
    adv = _check_advantages(advantages, B, group_size, logp.dtype, logp.device)
    m = mask.to(logp.dtype)
    bad = (m != 0) & (m != 1)  # NaN too
    if bool(bad.any()):
        idx = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise ValueError(f"mask must hold 0 or 1 only (1: a completion token, 0: padding), got {float(mask[idx])} "
                         f"at {idx}")
    for name, t in (("logp", logp), ("old_logp", old_logp)):
        masked = torch.where(m > 0, t.detach(), torch.zeros_like(t.detach()))
        if not bool(torch.isfinite(masked).all()):
            idx = tuple(int(i) for i in torch.nonzero(~torch.isfinite(masked))[0])
            raise ValueError(f"{name} contains a non-finite value at completion token {idx}")
    lengths = m.sum(-1)
    if bool((lengths <= 0).any()):
        row = int(torch.nonzero(lengths <= 0)[0])
        raise ValueError(f"row {row} has an empty completion mask (no completion tokens)")
    return B, T, m, adv


_HALF = (torch.float16, torch.bfloat16)


def _widen(logp, old_logp):
    """Half-precision log-probs are widened to float32 for the loss (autograd casts the gradient
    back): a float16 ratio overflows at log r = 11 and a float16 group sum at 65504. float32 and
    float64 pass through untouched."""
    if isinstance(logp, torch.Tensor) and logp.dtype in _HALF:
        logp = logp.float()
        if isinstance(old_logp, torch.Tensor) and old_logp.dtype in _HALF:
            old_logp = old_logp.float()
    return logp, old_logp


def masked_token_log_ratio(logp, old_logp, mask):
    """Per-token ``(logp - old_logp) * mask``, **selected** to exactly 0 where the mask is 0.

    Padding may hold any value, ``-inf`` and NaN included (``-inf * 0`` is NaN): positions
    outside the mask never influence a value or a gradient. Every loss forms its log-ratios
    here. No stop-gradient is applied: pass ``old_logp.detach()`` for a surrogate."""
    m = mask.to(logp.dtype) if mask.dtype != logp.dtype else mask
    return torch.where(m > 0, (logp - old_logp) * m, torch.zeros((), dtype=logp.dtype, device=logp.device))


def trajectory_log_ratio(logp, old_logp, mask):
    """Per-row sum over completion tokens of ``logp - old_logp``: the log of the trajectory ratio
    (positions outside the mask never count, whatever they hold: :func:`masked_token_log_ratio`)."""
    return masked_token_log_ratio(logp, old_logp, mask).sum(-1)


@renamed_keywords(scheme="estimator")
def trajectory_loss(estimator: str, logp, old_logp, mask, advantages, group_size: int, eps: float,
                    **params) -> LossOutput:
    """Surrogate for a trajectory-level estimator (see module docstring).

    Args:
        logp: (B, T) per-token log-probs under pi_theta (requires grad).
        old_logp: (B, T) behaviour log-probs log pi_b, recorded at sampling time.
        mask: (B, T) 1 on completion tokens.
        advantages: (B,) or (B // G, G).
        group_size: G; B must be a multiple of G.
        eps: the cap threshold.
        **params: the estimator's knobs (:data:`estimators.params.PARAMS`).
    """
    spec = get_scheme(estimator)
    eps = check_eps(eps)
    in_dtype = logp.dtype if isinstance(logp, torch.Tensor) else None
    logp, old_logp = _widen(logp, old_logp)
    B, _, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    lr = trajectory_log_ratio(logp, old_logp.detach(), m).reshape(B // group_size, group_size)
    lr_d = lr.detach()
    c = weights(estimator, lr_d, eps, adv if spec.needs_advantages else None, **params)
    # A = 0 contributes nothing, whatever its weight: an overflowed c never meets 0 (inf * 0)
    c_used = torch.where(adv == 0, torch.zeros((), dtype=c.dtype, device=c.device), c)
    if spec.surrogate == "clamp":
        factor = torch.exp(torch.clamp(lr, max=math.log1p(eps)))
    else:
        factor = c_used * torch.exp(lr - lr_d)
    loss = -(factor * adv).mean()
    if not spec.bounded:
        _refuse_overflow(estimator, loss, c_used, adv, lr_d, in_dtype)
    return LossOutput(loss, lr_d, c, {})


def _refuse_overflow(estimator: str, loss, c, adv, lr_d, in_dtype) -> None:
    """An unbounded scheme (``is``, ``tic_ppo``) whose surrogate or gradient overflows is refused:
    weights of +inf with advantages of both signs have no value (``inf - inf``), and a term
    ``c A`` beyond the log-probs' dtype is an infinite gradient there."""
    bad = ~torch.isfinite((c * adv).to(in_dtype))
    if bool(torch.isfinite(loss.detach())) and not bool(bad.any()):
        return
    where = ""
    if bool(bad.any()):
        g, i = (int(v) for v in torch.nonzero(bad)[0])
        where = f" (group {g}, completion {i}: trajectory log-ratio {float(lr_d[g, i]):.6g})"
    wider = "" if in_dtype == torch.float64 else " or float64 log-probs"
    raise ValueError(f"scheme {estimator!r} is unbounded and its surrogate overflows {in_dtype}{where}; "
                     f"use a bounded scheme (gmc, tic_trunc, ...){wider}")


def _token_log_ratio(logp, old_logp, m):
    return masked_token_log_ratio(logp, old_logp.detach(), m)


def ppo_clip_objective(log_r, a, lo: float, hi: float, keep=None):
    """PPO's ``min(r A, clip(r, lo, hi) A)`` elementwise, ``r = exp(log_r)``, by **selection**:
    an element whose clipped branch is the minimum (``A > 0, r > hi`` or ``A < 0, r < lo``), whose
    ``A = 0``, or that ``keep`` (a bool tensor broadcastable to ``log_r``) drops is a constant
    (``clip(r) A``, exactly 0 when dropped) with no gradient, and its ``exp`` is never formed, so
    an overflowed ``r`` cannot reach the backward pass as ``0 * inf``. Every other element is
    ``r A``, with the gradient ``r A grad log_r``: unbounded above when ``A < 0`` (``+inf`` loss
    once ``r`` overflows the dtype, never NaN)."""
    r_d = torch.exp(log_r.detach())
    frozen = ((r_d > hi) & (a > 0)) | ((r_d < lo) & (a < 0)) | (a == 0)
    if keep is not None:
        frozen = frozen | ~keep
    r = torch.exp(torch.where(frozen, torch.zeros((), dtype=log_r.dtype, device=log_r.device), log_r))
    const = torch.clamp(r_d, lo, hi) * a
    if keep is not None:
        const = torch.where(keep, const, torch.zeros((), dtype=const.dtype, device=const.device))
    return torch.where(frozen, const, r * a)


def _aggregate(per_tok, m, agg: str):
    if agg == "seq-mean-token-mean":
        return ((per_tok * m).sum(-1) / m.sum(-1)).mean()
    if agg == "token-mean":
        return (per_tok * m).sum() / m.sum()
    raise ValueError(f"unknown agg {agg!r}; valid: seq-mean-token-mean, token-mean")


def _seq_log_ratio(log_r, B, G):
    return log_r.detach().sum(-1).reshape(B // G, G)


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


# --------------------------------------------------------------------------- 2025-2026 token-level corrections
#
# Token-level stale-rollout corrections that verl, TRL and prime-rl ship since late 2025 (knobs in
# estimators.params.PARAMS; eps is not used by any of them): icepop (token masked IS), sapo (SAPO's
# soft gate in place of the clip), dppo_tv (DPPO's binary total-variation mask, truncated IS on the
# rest). Masked positions never reach a value: the token log-ratio is where(mask, logp - old, 0) and
# every per-token term is selected with torch.where, so padding holding -inf or NaN is harmless, and
# no exp of an unbounded log-ratio reaches the loss or its gradient.

def _masked_log_ratio(logp, old_logp, mask):
    """``(keep, log_r)``: ``keep = mask > 0`` and ``log_r = where(keep, logp - old_logp, 0)``."""
    keep = mask > 0
    return keep, torch.where(keep, logp - old_logp.detach(), torch.zeros_like(logp))


def _zero(x):
    return torch.zeros_like(x)


def _seq_mean_token_mean(per_tok, keep, m):
    return (torch.where(keep, per_tok, _zero(per_tok)).sum(-1) / m.sum(-1)).mean()


def _token_mean(per_tok, keep, m):
    return torch.where(keep, per_tok, _zero(per_tok)).sum() / m.sum()


def _frac(sel, keep, m):
    return float(torch.where(keep, sel.to(m.dtype), _zero(m)).sum() / m.sum())


LOGPROB_LOSSES = ("icepop", "dppo_tv")
"""Token losses that refuse a log-probability above 0 on a completion token (a probability above 1: the
input is not log-probabilities, and the loss would treat it as one)."""


def _refuse_positive_logp(loss: str, logp, old_logp, keep, why: str) -> None:
    for name, t in (("logp", logp), ("old_logp", old_logp)):
        above = keep & (t.detach() > 0)
        if bool(above.any()):
            idx = tuple(int(i) for i in torch.nonzero(above)[0])
            raise ValueError(f"{loss}: {name} holds a log-probability above 0 ({float(t[idx])}) at completion "
                             f"token {idx}: {why.format(name=name)}")


def _seq(log_r, B, G):
    return log_r.detach().sum(-1).reshape(B // G, G)


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
    return LossOutput(loss, _seq(log_r, B, group_size), None, metrics)


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
    return LossOutput(loss, _seq(log_r, B, group_size), None, {})


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
    return LossOutput(loss, _seq(log_r, B, group_size), None, metrics)


# --------------------------------------------------------------------------- 2026 corrections
#
# Batch-adaptive control (p3o), prefix and cumulative ratios (ctpo, minpro), trust-region masking of whole
# sequences (trm_k2, trm_k3), sign-decoupled clipping (dispo) and an importance-weight-free regression
# (oapl). None is a trajectory scheme: each reads the per-token ratios (or, for oapl, regresses on the
# sequence log-ratio), so none has a trajectory weight c_i and none is a member of C_eps by definition
# (THEORY §2's class is a set of trajectory weightings); what each bounds instead is in
# :data:`CORRECTIONS_2026`, derived and checked by bounds.mass.TOKEN_BOUNDS.

CORRECTIONS_2026 = ("p3o", "ctpo", "minpro", "trm_k2", "trm_k3", "dispo", "oapl")
"""The 2026 corrections, in the order the docs list them."""
SEQUENCE_SUM_LOSSES = ("oapl",)
"""Token losses whose gradient sums over a completion's tokens (no ``1/|o|`` average): an exact
evaluation scales the others' estimates by the completion length, not these."""

P3O_ESS_EPS = 1e-8
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
    lse1 = torch.logsumexp(sel, 0)
    lse2 = torch.logsumexp(2 * sel, 0)
    guard = -torch.nn.functional.softplus(math.log(P3O_ESS_EPS) - lse2)  # log(S2 / (S2 + 1e-8))
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
    return LossOutput(loss, _seq(log_r, B, group_size), None, metrics)


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
    B, T, m, adv = _check_batch(logp, old_logp, mask, advantages, group_size)
    keep, log_r = _masked_log_ratio(logp, old_logp, m)
    L = prefix_log_ratio(log_r.detach(), keep)
    t = torch.cumsum(keep.to(logp.dtype), -1).clamp(min=1.0)  # position among completion tokens
    bound = delta * torch.sqrt(t)
    log_rho = torch.maximum(torch.minimum(L, bound), -bound)
    per_tok = _detached_weight_surrogate(log_rho, log_r, adv.reshape(B, 1), keep)
    loss = -_seq_mean_token_mean(per_tok, keep, m)
    metrics = {"token_clip_frac": _frac(L.abs() > bound, keep, m)}
    return LossOutput(loss, _seq(log_r, B, group_size), None, metrics)


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
    return LossOutput(loss, _seq(log_r, B, group_size), None, metrics)


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
    (verl ``seq_max_k2`` / ``seq_max_k3``: the row's max, an empty row's max read as 0)."""
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
    return LossOutput(loss, _seq(log_r, B, group_size), None, {"seq_clip_frac": float((~rows).float().mean())})


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
register_token_loss("trm_k2", options=("eps_high",), bounded=False,
                    label="TRM (k2)", style=Style("#777777", "<", 26),
                    params=(Param("delta", 0.05, "delta_TRM", "trm_k2: mask a sequence whose largest token (log r)^2 "
                                  "/ 2 exceeds delta (verl seq_max_k2; no default there)"),))(trm_k2_loss)
register_token_loss("trm_k3", options=("eps_high",), bounded=False,
                    label="TRM (k3)", style=Style("#444444", ">", 27),
                    params=(Param("delta", 0.05, "delta_TRM3", "trm_k3: mask a sequence whose largest token r - 1 - "
                                  "log r exceeds delta (verl seq_max_k3; no default there)"),))(trm_k3_loss)


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
    return LossOutput(loss, _seq(log_r, B, group_size), None, metrics)


def oapl_optimal_advantages(adv, beta: float):
    """OAPL's optimal advantage of each completion from its group's centred rewards ``a`` (num_groups, G):
    ``A*_i = a_i - V*``, ``V* = beta log mean_j exp(a_j / beta)`` (the KL-regularised optimal value
    of the group under the behaviour policy, estimated from its G samples). Invariant to a common
    shift of the rewards, so any centred advantage (``drgrpo``, ``loo`` = G/(G-1) times it) gives it
    up to that scale."""
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

        loss = (1/(num_groups G)) sum_i (beta l_i - A*_i)^2 / (2 beta)

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
    keep, log_r = _masked_log_ratio(logp, old_logp, m)
    l = log_r.sum(-1).reshape(B // group_size, group_size)
    a_star = oapl_optimal_advantages(adv.to(torch.float64), beta).to(l.dtype)
    loss = ((beta * l - a_star) ** 2).mean() / (2 * beta)
    return LossOutput(loss, _seq(log_r, B, group_size), None, {})


TOKEN_LEVEL = tuple(TOKEN_LOSSES)
"""Names of the token-level losses (not members of the trajectory family)."""


@renamed_keywords(name="estimator")
def check_options(estimator: str, options: dict | None) -> dict:
    """The options ``estimator`` accepts, validated: knobs of :data:`estimators.params.PARAMS`
    (filled with their defaults) plus a token loss's own extra options."""
    options = dict(options or {})
    if estimator in SCHEMES:
        return resolve(estimator, options)
    if estimator not in TOKEN_LOSSES:
        raise ValueError(f"unknown loss {estimator!r}; valid: {', '.join(loss_names())}")
    extra = {k: options.pop(k) for k in TOKEN_LOSSES[estimator].options if k in options}
    return {**resolve(estimator, options), **extra}


@renamed_keywords(name="estimator")
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
