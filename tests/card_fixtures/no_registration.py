"""A file that defines a weighting but registers nothing."""


def my_log_weights(log_ratio, eps, advantages, ops):
    return log_ratio
