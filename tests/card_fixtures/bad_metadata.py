"""A correction whose declared flags are strings ("no" and "False" are both true in Python)."""
import estimators


@estimators.register_scheme("bad_metadata", family="peer", in_class="no", bounded="False",
                            sup_mass=lambda eps, B: 1.0)
def bad_metadata_log_weights(log_ratio, eps, advantages, ops):
    """min(w, 1)."""
    return ops.clamp_max(log_ratio, 0.0)
