"""A token-level loss that returns one loss per row instead of a scalar."""
from estimators.losses import LossOutput, masked_token_log_ratio, register_token_loss


@register_token_loss("token_not_scalar")
def token_not_scalar_loss(logp, old_logp, mask, advantages, group_size, eps=None):
    log_r = masked_token_log_ratio(logp, old_logp.detach(), mask)
    B = logp.shape[0]
    return LossOutput(-log_r.sum(-1), log_r.detach().sum(-1).reshape(B // group_size, group_size), None, {})
