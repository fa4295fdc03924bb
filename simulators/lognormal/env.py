"""E3: Gaussian policy with lognormal ratios (THEORY §6, claim 15).

pi_theta = N(theta, 1), pi_b = N(theta_b, 1), Delta = |theta - theta_b|. Under pi_b,
log w ~ N(-Delta^2/2, Delta^2). The score a - theta is unbounded, so this environment
serves the scalar mass-bias claims only. The closed forms of claim 15 are bounds/'
sympy expressions, used here through their numeric twins (:mod:`simulators.theory`).
"""
from __future__ import annotations

import math

import numpy as np

from .._validate import check_eps, check_G, check_positive_int, finite_array
from ..core import mc_mass
from ..theory import lognormal_closed_forms


def _delta(delta) -> float:
    d = float(finite_array(delta, "delta"))
    if d <= 0:
        raise ValueError(f"delta = |theta - theta_b| must be > 0, got {d!r}")
    return d


class GaussianPolicy:
    """E3 instance; owns its generator. Samples actions a ~ pi_b and their log-ratios."""

    def __init__(self, theta: float, theta_b: float, seed: int | None = 0):
        self.theta = float(finite_array(theta, "theta"))
        self.theta_b = float(finite_array(theta_b, "theta_b"))
        self.delta = _delta(abs(self.theta - self.theta_b))
        self.rng = np.random.default_rng(seed)

    def sample_log_ratio(self, n: int) -> np.ndarray:
        """log w(a) = log N(a; theta, 1) - log N(a; theta_b, 1) for n actions a ~ pi_b."""
        a = self.rng.normal(self.theta_b, 1.0, size=check_positive_int(n, "n"))
        return ((a - self.theta_b) ** 2 - (a - self.theta) ** 2) / 2

    def closed_forms(self, eps: float) -> dict:
        """sigma^2, mu_4, m_mask, m_trunc of claim 15 (bounds' twins)."""
        return lognormal_closed_forms(self.delta, check_eps(eps))

    def mc_ratio_moments(self, n: int, eps: float) -> dict:
        """Monte Carlo sigma^2, mu_4, m_mask, m_trunc from n samples: ``{key: (mean, se)}``.

        The masses come from :func:`estimators.weights` on single-sample groups.
        """
        lw = self.sample_log_ratio(n)
        d = np.expm1(lw)
        out = {}
        for key, x in (("sigma2", d**2), ("mu4", d**4)):
            out[key] = (float(x.mean()), float(x.std(ddof=1) / math.sqrt(n)))
        out["m_mask"] = mc_mass(lw[:, None], eps, "tic_mask")
        out["m_trunc"] = mc_mass(lw[:, None], eps, "tic_trunc")
        return out

    def mc_mass_bias(self, estimator: str, G: int, eps: float, n_groups: int):
        """``(mean, se)`` of E[(1/G) sum_i (w_i - c_i)] over ``n_groups`` groups (m_GMC for ``gmc``)."""
        G = check_G(G)
        lw = self.sample_log_ratio(check_positive_int(n_groups, "n_groups", 2) * G).reshape(n_groups, G)
        return mc_mass(lw, eps, estimator)
