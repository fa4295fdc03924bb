"""A token-level correction defined outside the package: truncated per-token IS,
``sg(min(r_t, C)) A log pi_theta(o_t)`` averaged per sequence then over sequences."""
import math

import torch

from estimators.losses import LossOutput, masked_token_log_ratio, register_token_loss


@register_token_loss("token_tis")
def token_tis_loss(logp, old_logp, mask, advantages, group_size, eps=None, *, C=2.0):
    """Token-level truncated IS: the detached weight min(r_t, C) on each token's score."""
    B = logp.shape[0]
    m = mask.to(logp.dtype)
    keep = m > 0
    log_r = masked_token_log_ratio(logp, old_logp.detach(), m)
    w = torch.exp(torch.clamp(log_r.detach(), max=math.log(C)))
    a = torch.as_tensor(advantages, dtype=logp.dtype).reshape(B, 1)
    per_tok = torch.where(keep, w * a * torch.where(keep, logp, torch.zeros_like(logp)), torch.zeros_like(logp))
    loss = -(per_tok.sum(-1) / m.sum(-1)).mean()
    return LossOutput(loss, log_r.detach().sum(-1).reshape(B // group_size, group_size), None, {})
