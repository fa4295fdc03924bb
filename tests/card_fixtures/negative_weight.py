"""A scheme whose direct weights are negative for trajectories with A < 0."""
import estimators


def _direct(log_ratio, eps, advantages, ops):
    return ops.where(advantages < 0, -ops.exp(log_ratio), ops.exp(log_ratio))


@estimators.register_scheme("negative_weight", family="peer", in_class=False, needs_advantages=True,
                            bounded=False, sup_mass=lambda eps, B: float("inf"), weights_fn=_direct)
def negative_weight_log_weights(log_ratio, eps, advantages, ops):
    return log_ratio
