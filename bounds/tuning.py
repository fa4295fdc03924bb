"""Corollary 3 numerically: the step size that minimises the delay-dominated bound.

:func:`tune_step_size` minimises the lambdified twin of ``a/(eta T) + B eta + D eta^4``
(:func:`bounds.delay.cor3_objective`) over ``log eta``; claim 12 and the tuned-delay sweep
(``python -m simulators.tuned_sweep``) both call it, so the objective is never hand-written.
"""
from __future__ import annotations

import math

from .numeric import twin

CONSTANTS = {"a": 2.0, "T": 1000.0, "d": 4.0, "C2": 1.0, "C4": 1.0, "r0": 1.0, "M": 1.0}
"""The constants of the tuned-delay computations: a = 2 DeltaJ, T steps, d delay, A2/A5 constants."""
LOG_ETA_BOUNDS = (-30.0, 10.0)
XATOL = 1e-10


def tune_step_size(a: float, D: float, T: float, B: float = 0.0, log_eta_bounds=LOG_ETA_BOUNDS,
                   xatol: float = XATOL) -> tuple[float, float]:
    """``(eta*, min value)`` of Corollary 3's objective over ``eta`` in ``exp(log_eta_bounds)``."""
    from scipy.optimize import minimize_scalar

    obj = twin("cor3_objective")

    def f(log_eta):
        return float(obj(eta=math.exp(log_eta), a=a, B=B, D=D, T=T))

    res = minimize_scalar(f, bounds=tuple(log_eta_bounds), method="bounded", options={"xatol": xatol})
    return math.exp(res.x), float(res.fun)
