"""A deliberately broken correction: NaN weights for a batch of one group whose log-ratios are all 5."""
import math

import estimators


@estimators.register_scheme("nan_alone", family="peer", in_class=True, sup_mass=lambda eps, B: 1.0)
def nan_alone_log_weights(log_ratio, eps, advantages, ops):
    """min(w, 1), but NaN for a batch of one group at log w = 5."""
    lw = ops.clamp_max(log_ratio, 0.0)
    if log_ratio.shape[0] == 1 and float(log_ratio.min()) == 5.0:
        return ops.full_like(log_ratio, math.nan)
    return lw
