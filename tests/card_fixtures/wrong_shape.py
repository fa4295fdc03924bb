"""A scheme whose weights have the wrong shape (one weight per group, not per trajectory)."""
import estimators


def _direct(log_ratio, eps, advantages, ops):
    return ops.exp(log_ratio)[:, :1]


@estimators.register_scheme("wrong_shape", family="peer", in_class=True, sup_mass=lambda eps, B: 1.0,
                            weights_fn=_direct)
def wrong_shape_log_weights(log_ratio, eps, advantages, ops):
    return log_ratio[:, :1]
