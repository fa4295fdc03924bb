"""A deliberately broken correction: its weight is NaN once a trajectory's log-ratio exceeds 3."""
import math

import estimators


@estimators.register_scheme("broken_nan", family="peer", in_class=True, sup_mass=lambda eps, B: 1.0)
def broken_nan_log_weights(log_ratio, eps, advantages, ops):
    """min(w, 1), but NaN where log w > 3."""
    return ops.where(log_ratio > 3.0, ops.full_like(log_ratio, math.nan), ops.clamp_max(log_ratio, 0.0))
