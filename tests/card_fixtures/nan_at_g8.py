"""A deliberately broken correction: min(w, 1), but NaN at group size 8 only (the card's E1 and LLM G)."""
import math

import estimators


@estimators.register_scheme("nan_at_g8", family="peer", in_class=True, sup_mass=lambda eps, B: 1.0)
def nan_at_g8_log_weights(log_ratio, eps, advantages, ops):
    """min(w, 1), NaN for every group of 8."""
    if log_ratio.shape[1] == 8:
        return ops.full_like(log_ratio, math.nan)
    return ops.clamp_max(log_ratio, 0.0)
