"""A correction whose name has path parts."""
import estimators


@estimators.register_scheme("../../escaped", family="peer", in_class=True, sup_mass=lambda eps, B: 1.0)
def escaped_log_weights(log_ratio, eps, advantages, ops):
    """min(w, 1)."""
    return ops.clamp_max(log_ratio, 0.0)
