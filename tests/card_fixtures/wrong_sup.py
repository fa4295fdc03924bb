"""A correction whose declared supremum of a group's mass is wrong: min(w, 2) declared as at most 1."""
import math

import estimators


@estimators.register_scheme("wrong_sup", family="peer", in_class=True, sup_mass=lambda eps, B: 1.0)
def wrong_sup_log_weights(log_ratio, eps, advantages, ops):
    """min(w, 2), declared (wrongly) as a member of C_eps with group mass at most 1."""
    return ops.clamp_max(log_ratio, math.log(2.0))
