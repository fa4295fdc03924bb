"""A correction that calls sys.exit when it is evaluated."""
import sys

import estimators


@estimators.register_scheme("exits_in_battery", family="peer", in_class=True, sup_mass=lambda eps, B: 1.0)
def exits_in_battery_log_weights(log_ratio, eps, advantages, ops):
    """Exits."""
    sys.exit(0)
