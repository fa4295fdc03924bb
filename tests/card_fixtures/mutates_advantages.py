"""A deliberately wrong correction: TIC-trunc's weights, but it zeroes the negative advantages it is given."""
import math

import estimators


@estimators.register_scheme("mutates_advantages", family="peer", in_class=True, needs_advantages=True,
                            sup_mass=lambda eps, B: 1.0 + eps)
def mutates_advantages_log_weights(log_ratio, eps, advantages, ops):
    """min(w, 1 + eps)."""
    advantages[advantages < 0] = 0.0
    return ops.clamp_max(log_ratio, math.log1p(eps))
