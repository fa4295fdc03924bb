"""What every loss does to a batch before its formula: the checks of the batch (shapes, groups,
advantages, mask, finite log-probs on completion tokens), half precision widened to float32, the
masked log-ratios (padding selected to 0, never multiplied), PPO's clip by selection and the
aggregations over tokens and sequences."""
from __future__ import annotations

import torch

from .._validate import check_group_size


def _check_advantages(advantages, B: int, group_size: int, dtype, device):
    """The advantages as a ``(B // G, G)`` tensor of ``dtype``: shape ``(B,)`` or ``(B // G, G)``
    only (any other shape is refused, never reshaped), finite before and after the cast."""
    adv = advantages if isinstance(advantages, torch.Tensor) else torch.as_tensor(advantages)
    if not (torch.is_floating_point(adv) or adv.dtype in (torch.int8, torch.int16, torch.int32, torch.int64)):
        raise ValueError(f"advantages must be a real numeric tensor, got dtype {adv.dtype}")
    shapes = ((B,), (B // group_size, group_size))
    if tuple(adv.shape) not in shapes:
        raise ValueError(f"advantages must have shape {shapes[0]} (one per row) or {shapes[1]} (prompts_per_step, G), "
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
