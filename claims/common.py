"""Shared by the claim checks: the numeric threshold, the floors of exact computation, small helpers."""
from __future__ import annotations

import numpy as np
import sympy as sp

EPS = 0.2  # the threshold used by the numeric checks (TIC's public default is 0.28; any eps > 0 works)
REL_EXACT = 1e-10  # exact identities computed by enumeration (sums of up to ~1e6 terms)
ZERO = 1e-14  # "exactly 0" up to rounding (GMC's weights are lambda w to one ulp)


def is_zero(expr) -> bool:
    """``expr == 0`` as an exact fact: expand (erfc rewritten as erf), then simplify if needed."""
    expr = sp.sympify(expr)
    if sp.expand(expr.rewrite(sp.erf)) == 0:
        return True
    e = sp.simplify(expr)
    return e == 0 or sp.simplify(sp.expand(e.rewrite(sp.erf))) == 0


def log_ratios(rng: np.random.Generator, n: int, G_: int, scale: float) -> np.ndarray:
    """``(n, G_)`` log-ratios of lognormal ratios with mean 1 under the behaviour policy."""
    return rng.normal(-scale**2 / 2, scale, size=(n, G_))


def fmt(x: float) -> str:
    return f"{x:.3g}"
