"""E4: extremal ratio laws for the tightness and exponent claims (THEORY §3, §6).

A ratio law is a finite distribution of w under pi_b with E_b w = 1. Mass-biases
``m(c) = E[(1/G) sum_i (w_i - c_i)]`` are exact by enumerating count vectors (for a
two-point law, the binomial count of the upper point), with weights from
:func:`estimators.weights`.

* :func:`two_point_mask`: w = 1 + eps^+ w.p. p = sigma^2/(sigma^2 + eps^2), else balanced;
  TIC-mask's worst case m_mask = (1+eps) sigma^2 / (sigma^2 + eps^2).
* :func:`scarf`: the two-point law attaining Scarf's bound, TIC-trunc's worst case
  m_trunc = (sqrt(sigma^2 + eps^2) - eps)/2.
* :func:`rare_jump`: w - 1 = 2 G eps w.p. p, else balanced; GMC's worst case,
  4 G eps m_GMC / sigma^2 -> 1 as p -> 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._validate import (
    check_eps,
    check_G,
    check_positive_int,
    check_probs,
    finite_array,
)
from ..core import draw_counts, exact_mass_batch, expand_counts, mc_mass

MEAN_ATOL = 1e-9

NUDGE = 1e-9
"""Relative nudge putting the upper point of :func:`two_point_mask` strictly above 1+eps."""


@dataclass(frozen=True)
class RatioLaw:
    """A finite law of w under pi_b: ``values`` (> 0) with ``probs`` (sum 1), mean 1."""

    values: np.ndarray
    probs: np.ndarray
    name: str = "law"

    def __post_init__(self):
        v = finite_array(self.values, "values", ndim=(1,))
        p = check_probs(self.probs, "probs")
        if p.shape != v.shape:
            raise ValueError(f"probs must have the shape of values {v.shape}, got {p.shape}")
        if (v <= 0).any():
            raise ValueError(f"ratio values must be > 0, got {v[v <= 0][0]!r}")
        if (p <= 0).any():
            raise ValueError("every value of a ratio law needs probability > 0 (drop the others)")
        mean = float(p @ v)
        if abs(mean - 1) > MEAN_ATOL:
            raise ValueError(f"a ratio law has E_b w = 1, got {mean!r}")
        object.__setattr__(self, "values", v)
        object.__setattr__(self, "probs", p)

    @property
    def sigma2(self) -> float:
        return float(self.probs @ (self.values - 1) ** 2)

    @property
    def mu4(self) -> float:
        return float(self.probs @ (self.values - 1) ** 4)

    def mass_bias(self, estimator_names, G: int, eps: float) -> dict:
        """Exact ``{scheme: m}`` at group size G (any G >= 1)."""
        out = exact_mass_batch(np.log(self.values), np.log(self.probs), G, eps, list(estimator_names))
        return {s: float(out[s][0]) for s in estimator_names}

    def wbar_moment(self, G: int, k: int) -> float:
        """Exact E(Wbar - 1)^k by enumeration."""
        out = exact_mass_batch(np.log(self.values), np.log(self.probs), G, 1.0, [], wbar_powers=(k,))
        return float(out[("wbar", k)][0])

    def mc_mass_bias(self, estimator: str, G: int, eps: float, n_groups: int, rng: np.random.Generator):
        """Monte Carlo ``(mean, se)`` of the mass-bias from ``n_groups`` groups."""
        counts = draw_counts(rng, check_G(G), self.probs, check_positive_int(n_groups, "n_groups", 2))
        log_w = np.log(self.values)[expand_counts(counts)]
        return mc_mass(log_w, eps, estimator)


def _two_point(hi: float, p: float, name: str) -> RatioLaw:
    """Upper point ``hi`` w.p. ``p``, lower point fixed by E w = 1."""
    if not 0 < p < 1:
        raise ValueError(f"{name}: probability of the upper point must lie in (0, 1), got {p!r}")
    lo = (1 - p * hi) / (1 - p)
    if lo <= 0:
        raise ValueError(f"{name}: lower point {lo!r} <= 0 (sigma^2 too large for this eps)")
    return RatioLaw(np.array([lo, hi]), np.array([1 - p, p]), name)


def two_point_mask(sigma2: float, eps: float) -> RatioLaw:
    """TIC-mask's extremal law: w = 1 + eps(1 + NUDGE) w.p. sigma^2/(sigma^2 + eps'^2), variance sigma^2."""
    s2, eps = _pos(sigma2, "sigma2"), check_eps(eps)
    e = eps * (1 + NUDGE)
    return _two_point(1 + e, s2 / (s2 + e**2), "two_point_mask")


def scarf(sigma2: float, eps: float) -> RatioLaw:
    """Scarf's two-point law: P(hi) = q = (1 - eps/sqrt(sigma^2 + eps^2))/2, mean 1, variance sigma^2."""
    s2, eps = _pos(sigma2, "sigma2"), check_eps(eps)
    q = 0.5 * (1 - eps / math.sqrt(s2 + eps**2))
    return _two_point(1 + math.sqrt(s2 * (1 - q) / q), q, "scarf")


def rare_jump(G: int, eps: float, p: float | None = 1e-6, sigma2: float | None = None) -> RatioLaw:
    """GMC's extremal law for group size G: w - 1 = 2 G eps w.p. p, the rest balanced.

    Give ``sigma2`` instead of ``p`` to fix the variance: p = sigma^2 / (sigma^2 + 4 G^2 eps^2).
    """
    G, eps = check_G(G), check_eps(eps)
    if sigma2 is not None:
        s2 = _pos(sigma2, "sigma2")
        p = s2 / (s2 + 4 * G**2 * eps**2)
    elif p is None:
        raise ValueError("rare_jump: give p (the probability of the jump, in (0, 1)) or sigma2 (its variance); "
                         "got p = None and sigma2 = None")
    return _two_point(1 + 2 * G * eps, _prob(p, "p"), "rare_jump")


def _prob(x, name):
    x = float(finite_array(x, name))
    if not 0 < x < 1:
        raise ValueError(f"{name} must lie in (0, 1), got {name} = {x!r}")
    return x


def _pos(x, name):
    x = float(finite_array(x, name))
    if x <= 0:
        raise ValueError(f"{name} must be > 0, got {x!r}")
    return x
