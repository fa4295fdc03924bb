"""A deliberately broken correction: it raises on any group whose log-ratios are all -5."""
import estimators


@estimators.register_scheme("raises_alone", family="peer", in_class=True, sup_mass=lambda eps, B: 1.0)
def raises_alone_log_weights(log_ratio, eps, advantages, ops):
    """min(w, 1); a ZeroDivisionError on a group of log-ratios -5."""
    if bool(((log_ratio == -5.0).all(-1)).any()):
        raise ZeroDivisionError("group at -5")
    return ops.clamp_max(log_ratio, 0.0)
