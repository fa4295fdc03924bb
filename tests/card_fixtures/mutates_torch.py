"""A deliberately wrong correction: min(w, 1), clamping the caller's tensor in place when it gets a torch tensor
(as policy_loss passes it) and computing on a copy for numpy arrays."""
import estimators


@estimators.register_scheme("mutates_torch", family="peer", in_class=True, sup_mass=lambda eps, B: 1.0)
def mutates_torch_log_weights(log_ratio, eps, advantages, ops):
    """min(w, 1)."""
    if hasattr(log_ratio, "clamp_"):
        return log_ratio.clamp_(max=0.0)
    return ops.clamp_max(log_ratio, 0.0)
