"""Sequence-level importance sampling truncated at C = 2: c_i = min(w_i, C) (a correction the toolkit
does not ship, defined outside the package for the report card's tests)."""
import math

import estimators
from estimators.params import PARAMS, Param

PARAMS["seq_is_trunc"] = (Param("C", 2.0, "C_trunc", "seq_is_trunc: truncation level of the sequence ratio"),)


@estimators.register_scheme("seq_is_trunc", family="peer", in_class=False, sup_mass=lambda eps, B, C: float(C))
def seq_is_trunc_log_weights(log_ratio, eps, advantages, ops, C):
    """Sequence-level IS truncated at C: c_i = min(w_i, C); a group's mass is at most C."""
    return ops.clamp_max(log_ratio, math.log(C))
