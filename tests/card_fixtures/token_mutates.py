"""A deliberately wrong token loss: truncated per-token IS, but it clamps the caller's behaviour log-probs in place."""
import math

import torch

from estimators.losses import LossOutput, masked_token_log_ratio, register_token_loss


@register_token_loss("token_mutates")
def token_mutates_loss(logp, old_logp, mask, advantages, group_size, eps=None):
    """sg(min(r_t, 2)) A log pi, after old_logp.clamp_(min=-20)."""
    B = logp.shape[0]
    old_logp.clamp_(min=-20.0)
    m = mask.to(logp.dtype)
    log_r = masked_token_log_ratio(logp, old_logp.detach(), m)
    w = torch.exp(torch.clamp(log_r.detach(), max=math.log(2.0)))
    a = torch.as_tensor(advantages, dtype=logp.dtype).reshape(B, 1)
    per_tok = torch.where(m > 0, w * a * torch.where(m > 0, logp, torch.zeros_like(logp)), torch.zeros_like(logp))
    loss = -(per_tok.sum(-1) / m.sum(-1)).mean()
    return LossOutput(loss, log_r.detach().sum(-1).reshape(B // group_size, group_size), None, {})
