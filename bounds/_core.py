"""Domain checks and the registry of bound functions.

Every public bound is decorated with :func:`bound`: its arguments default to the
symbols of :mod:`bounds.symbols`, and any argument given as a number (python,
numpy or sympy) is checked against :data:`DOMAIN` before the formula is built.
A symbolic argument is refused only when sympy can prove it is outside the
domain (e.g. ``-eps``).
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import numpy as np
import sympy as sp

# argument name -> (readable rule, numpy test, sympy test returning True/False/None)
_POS = ("> 0", lambda x: x > 0, lambda v: v.is_positive)
_NONNEG = (">= 0", lambda x: x >= 0, lambda v: v.is_nonnegative)
_ATLEAST1 = (">= 1", lambda x: x >= 1, lambda v: (v - 1).is_nonnegative)
_PROB = ("in (0, 1)", lambda x: (x > 0) & (x < 1), lambda v: False if v.is_positive is False else None)
_REAL = ("real", lambda x: np.isfinite(x), lambda v: v.is_real)
_COUNT1 = ("an integer >= 1", lambda x: (x >= 1) & (x == np.round(x)), lambda v: (v - 1).is_nonnegative)
_COUNT0 = ("an integer >= 0", lambda x: (x >= 0) & (x == np.round(x)), lambda v: v.is_nonnegative)

DOMAIN: dict[str, tuple] = {
    "eps": _POS, "eta": _POS, "a": _POS, "Delta": _POS, "D": _POS,
    "G": _COUNT1, "T": _ATLEAST1,
    "d": _COUNT0, "w": _NONNEG, "wbar": _NONNEG, "wmax": _NONNEG, "sigma2": _NONNEG, "mu4": _NONNEG, "s2": _NONNEG,
    "y": _NONNEG, "delta": _NONNEG,
    "M": _NONNEG, "L": _NONNEG, "C2": _NONNEG, "C4": _NONNEG, "r0": _NONNEG, "R": _NONNEG,
    "S": _NONNEG, "B": _NONNEG, "bias2": _NONNEG, "DeltaJ": _NONNEG,
    "R_max": _NONNEG, "L_pi": _NONNEG, "H_pi": _NONNEG,
    "p": _PROB, "k": _REAL, "mu": _REAL,
    # §8 normalising optimisers
    "t": _COUNT1, "prompts_per_step": _COUNT1, "m2": _NONNEG, "c2": _NONNEG, "cmax": _NONNEG,
    "beta1": ("in [0, 1)", lambda x: (x >= 0) & (x < 1), lambda v: False if v.is_negative else None),
    "beta2": _PROB,
}


def _check_numeric(name: str, value, rule: str, test) -> None:
    try:
        raw = np.asarray(value)
        if raw.dtype.kind not in "iuf":  # a string, bool, complex or object is never silently converted
            raise TypeError
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number or array, got {name} = {value!r}") from None
    if not np.isfinite(arr).all():
        bad = arr[~np.isfinite(arr)] if arr.ndim else arr
        raise ValueError(f"{name} must be finite, got {name} = {float(bad.flat[0])!r}")
    ok = np.asarray(test(arr), dtype=bool)
    if not ok.all():
        bad = arr[~ok] if arr.ndim else arr
        raise ValueError(f"{name} must be {rule}, got {name} = {float(bad.flat[0])!r}")


def check_domain(**values) -> None:
    """Raise ``ValueError`` naming the first argument outside :data:`DOMAIN`.

    >>> check_domain(eps=0.1, G=4)
    >>> check_domain(eps=0)
    Traceback (most recent call last):
    ...
    ValueError: eps must be > 0, got eps = 0.0
    """
    for name, value in values.items():
        if name not in DOMAIN or value is None:
            continue
        rule, np_test, sp_test = DOMAIN[name]
        if isinstance(value, sp.Basic):
            if value.is_number:
                if value.is_real is False:
                    raise ValueError(f"{name} must be real, got {name} = {value}")
                _check_numeric(name, float(value), rule, np_test)
            elif sp_test(value) is False:
                raise ValueError(f"{name} must be {rule}, got {name} = {value} (known to violate it)")
        else:
            _check_numeric(name, value, rule, np_test)


BOUNDS: dict[str, Callable] = {}


def check_feasible(fn: Callable, values: dict) -> None:
    """Run ``fn``'s joint feasibility check (``bound(feasible=...)``) on the numeric ones of
    ``values``; symbolic arguments are left to the formula. The check raises ``ValueError``."""
    feasible = getattr(fn, "feasible", None)
    if feasible is None:
        return
    num = {}
    for name, v in values.items():
        if isinstance(v, sp.Basic):
            if not v.is_number:
                return  # a symbolic argument: nothing numeric to check jointly
            v = float(v)
        num[name] = np.asarray(v, dtype=np.float64)
    feasible(**num)


def bound(fn: Callable | None = None, *, feasible: Callable | None = None) -> Callable:
    """Register a symbolic bound; calls check the domain of numeric arguments first.

    Every parameter must default to a sympy symbol: :func:`bounds.numeric.twin`
    lambdifies the function over exactly those symbols. ``feasible(**numeric arguments)``,
    when given, checks the arguments jointly (e.g. that a second moment is at least the square
    of the mean it is given with) and raises ``ValueError`` when no law has them; the symbolic
    bound and its numeric twin both run it. Use as ``@bound`` or ``@bound(feasible=f)``.
    """
    if fn is None:
        return functools.partial(bound, feasible=feasible)
    sig = inspect.signature(fn)
    for prm in sig.parameters.values():
        if not isinstance(prm.default, sp.Symbol):
            raise ValueError(f"{fn.__name__}: parameter {prm.name!r} must default to a sympy Symbol")
    if fn.__name__ in BOUNDS:
        raise ValueError(f"a bound named {fn.__name__!r} is already registered")

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        ba = sig.bind(*args, **kwargs)
        ba.apply_defaults()
        check_domain(**ba.arguments)
        check_feasible(wrapper, ba.arguments)
        # python numbers become exact sympy numbers (4/2 stays the Integer 2, not 2.0)
        args = [v if isinstance(v, sp.Basic) else sp.sympify(v) for v in ba.arguments.values()]
        return fn(*args)

    wrapper.signature = sig
    wrapper.feasible = feasible
    BOUNDS[fn.__name__] = wrapper
    return wrapper
