"""Exponent extractor: the power of a variable in an expression, derived by sympy.

``exponent(f, v, at)`` is ``lim log f / log v`` as ``v -> at`` (``0`` from above, or
``oo``): the p with ``f = v^{p + o(1)}``. It is how every exponent of THEORY.md §5
(claims 10-12: -4, -2, -2/5, 4/5, ...) is obtained; none is typed in.
"""
from __future__ import annotations

import sympy as sp


def _limit_point(at):
    at = sp.sympify(at)
    if at == 0:
        return sp.Integer(0), "+"
    if at == sp.oo:
        return sp.oo, "-"
    raise ValueError(f"exponent: `at` must be 0 or oo, got at = {at}")


def exponent(expr, var: sp.Symbol, at=0) -> sp.Expr:
    """The exponent p with ``expr = var^{p + o(1)}`` as ``var -> at``, as an exact sympy number.

    ``expr`` must be positive near ``at``. Raises ``ValueError`` when the limit of
    ``log expr / log var`` is not a finite real number (no power law, e.g. ``exp(-1/v)``).

    >>> from bounds.symbols import eps, G
    >>> exponent((1 + eps)**4 / eps**2, eps, 0)
    -2
    >>> exponent(G**sp.Rational(-2, 5) * (3 + 1 / G), G, sp.oo)
    -2/5
    >>> exponent(sp.Integer(7), G, sp.oo)
    0
    """
    if not isinstance(var, sp.Symbol):
        raise ValueError(f"exponent: var must be a sympy Symbol, got {var!r}")
    point, direction = _limit_point(at)
    expr = sp.sympify(expr)
    if expr.is_zero:
        raise ValueError("exponent: expr is identically 0 (no power law)")
    val = sp.limit(sp.log(expr) / sp.log(var), var, point, direction)
    if not (val.is_real and val.is_finite):
        raise ValueError(f"exponent: log({expr})/log({var}) -> {val} as {var} -> {at}: not a power law")
    return sp.nsimplify(val) if val.is_Float else val


def elasticity(expr, var: sp.Symbol, at=None) -> sp.Expr:
    """``var d(log expr)/d var``, simplified; its limit at ``at`` if given (the local log-log slope).

    >>> from bounds.symbols import T
    >>> elasticity(5 * T**sp.Rational(-4, 5), T)
    -4/5
    """
    e = sp.simplify(var * sp.diff(sp.log(expr), var))
    if at is None:
        return e
    point, direction = _limit_point(at)
    return sp.limit(e, var, point, direction)


def exponents(expr, at: dict) -> dict[str, sp.Expr]:
    """:func:`exponent` of ``expr`` for each ``{symbol: point}``; keys are the symbol names."""
    return {str(v): exponent(expr, v, pt) for v, pt in at.items()}


def loglog_slope(x, y) -> float:
    """Least-squares slope of log y against log x over the positive finite points: the measured
    counterpart of :func:`exponent`, the one slope fitter of the toolkit (NaN below two points)."""
    import numpy as np

    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0])
