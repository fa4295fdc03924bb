"""Numeric twins of the symbolic bounds, built by ``sympy.lambdify`` (never hand-written).

>>> f = twin("m_gmc_quadratic")
>>> f(sigma2=[1.0, 2.0], G=2, eps=0.25).tolist()
[0.5, 1.0]
>>> f(sigma2=1.0, G=2, eps=0.0)
Traceback (most recent call last):
...
ValueError: eps must be > 0, got eps = 0.0
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import sympy as sp

from . import assumptions, bias, budget, delay, normalised  # noqa: F401  (registers every bound)
from ._core import BOUNDS, check_domain, check_feasible


def lambdify_bound(fn: Callable) -> Callable:
    """Numeric twin of a ``@bound`` function: same parameters, numpy arrays in and out.

    Every argument is required; arrays broadcast; the domain is checked first.
    """
    sig = fn.signature
    syms = [prm.default for prm in sig.parameters.values()]
    f = sp.lambdify(syms, fn(*syms), modules=["scipy", "numpy"])
    name = getattr(fn, "__name__", "bound")

    def numeric(*args, **kwargs):
        ba = sig.bind_partial(*args, **kwargs)
        missing = [n for n in sig.parameters if n not in ba.arguments]
        if missing:
            raise ValueError(f"{name}: missing argument(s) {', '.join(missing)}")
        check_domain(**ba.arguments)
        check_feasible(fn, ba.arguments)
        arrays = [np.asarray(ba.arguments[n], dtype=np.float64) for n in sig.parameters]
        out = np.asarray(f(*arrays), dtype=np.float64)
        return np.broadcast_to(out, np.broadcast_shapes(out.shape, *(x.shape for x in arrays))).copy()

    numeric.__name__ = name
    numeric.params = tuple(sig.parameters)
    numeric.__doc__ = f"Numeric twin of bounds {name}: lambdified over {', '.join(sig.parameters)}."
    return numeric


@functools.cache
def twin(name: str) -> Callable:
    """The numeric twin of the registered bound ``name`` (see :func:`names`), cached."""
    if name not in BOUNDS:
        raise ValueError(f"unknown bound {name!r}; known bounds: {', '.join(sorted(BOUNDS))}")
    return lambdify_bound(BOUNDS[name])


def names() -> list[str]:
    """Names of every registered bound."""
    return sorted(BOUNDS)
