"""A deliberately wrong token loss: declared bounded (the default), but its untruncated ratio sum_t r_t A gives
+inf once a per-token log-ratio overflows the dtype (above about 709 in float64)."""
import torch

from estimators.losses import LossOutput, masked_token_log_ratio, register_token_loss


@register_token_loss("token_inf")
def token_inf_loss(logp, old_logp, mask, advantages, group_size, eps=None):
    """-mean over sequences of sum_t r_t A, r_t = exp(log pi - log pi_b), and +inf where r_t A overflows."""
    B = logp.shape[0]
    m = mask.to(logp.dtype)
    log_r = masked_token_log_ratio(logp, old_logp.detach(), m)
    a = torch.as_tensor(advantages, dtype=logp.dtype).reshape(B, 1)
    r = torch.where(m > 0, torch.exp(log_r), torch.zeros_like(log_r))
    loss = (r * a.abs()).sum(-1).mean()
    return LossOutput(loss, log_r.detach().sum(-1).reshape(B // group_size, group_size), None, {})
