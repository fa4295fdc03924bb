"""A deliberately wrong correction: GMC's weights, but it writes into the log-ratios it is given."""
import estimators


@estimators.register_scheme("mutates_input", family="peer", in_class=True, sup_mass=lambda eps, B: 1.0 + eps)
def mutates_input_log_weights(log_ratio, eps, advantages, ops):
    """min(w, 1), computed after clamping the caller's array in place."""
    log_ratio[...] = ops.clamp_max(log_ratio, 0.0)
    return log_ratio
