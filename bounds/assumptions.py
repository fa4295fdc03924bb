"""THEORY.md §1: assumptions A1-A5, their constants, and the drift lemma.

All bounds here are reconstructions ([R] in THEORY.md), not the paper's text.
"""
from __future__ import annotations

import sympy as sp

from ._core import bound
from .symbols import C2, C4, G, H_pi, L, L_pi, M, R, R_max, d, eps, eta, mu4, sigma2

_r, _dt, _dist = sp.symbols("r d_t dist", nonnegative=True)

#: A1-A5 as sympy relations over the constants (THEORY §1); A5 in the moment form,
#: stated for ||theta - theta'|| = dist <= r0.
ASSUMPTIONS: dict[str, tuple[str, object]] = {
    "A1": ("bounded reward", sp.And(_r >= 0, _r <= R_max)),
    "A2": ("bounded score, ||X_i|| <= M = R_max L_pi", sp.Eq(M, R_max * L_pi)),
    "A3": ("L-smoothness, L <= R_max (L_pi^2 + H_pi)", sp.Le(L, R_max * (L_pi**2 + H_pi))),
    "A4": ("bounded delay", sp.Le(_dt, d)),
    "A5": ("local policy overlap (moment form), dist <= r0",
           (sp.Le(sigma2, C2 * _dist**2), sp.Le(mu4, C4 * _dist**4))),
}


@bound
def score_bound(R_max=R_max, L_pi=L_pi):
    """A2: ``M = R_max L_pi`` bounds every ``||X_i|| = |A_i| ||s_i||``.

    .. math:: M = R_{\\max} L_\\pi

    >>> score_bound(2, 3)
    6
    """
    return R_max * L_pi


@bound
def smoothness_bound(R_max=R_max, L_pi=L_pi, H_pi=H_pi):
    """A3: ``L <= R_max (L_pi^2 + H_pi)``.

    >>> smoothness_bound(1, 2, 1)
    5
    """
    return R_max * (L_pi**2 + H_pi)


@bound
def estimator_norm_bound(eps=eps, M=M):
    """Lemma 2 / drift lemma: every member of C_eps has ``||g|| <= (1+eps) M`` surely.

    >>> estimator_norm_bound(sp.Rational(1, 5), 10)
    12
    """
    return (1 + eps) * M


@bound
def drift_radius(eta=eta, d=d, eps=eps, M=M):
    """Drift lemma: ``||theta_t - theta_{t-d_t}|| <= R = eta d (1+eps) M``.

    .. math:: R = \\eta\\, d\\,(1+\\epsilon) M

    >>> drift_radius(sp.Rational(1, 10), 4, 1, 5)
    4
    """
    return eta * d * estimator_norm_bound(eps, M)


@bound
def overlap_sigma2(C2=C2, R=R):
    """A5 at drift radius R: ``sigma^2 <= C2 R^2``.

    >>> overlap_sigma2(3, 2)
    12
    """
    return C2 * R**2


@bound
def overlap_mu4(C4=C4, R=R):
    """A5 at drift radius R: ``mu_4 <= C4 R^4``.

    >>> overlap_mu4(3, 2)
    48
    """
    return C4 * R**4


@bound
def class_second_moment(eps=eps, M=M):
    """Lemma 2: ``E||g||^2 <= S = (1+eps)^2 M^2`` for every c in C_eps, whatever the delay.

    >>> class_second_moment(1, 3)
    36
    """
    return estimator_norm_bound(eps, M) ** 2


@bound
def is_second_moment(sigma2=sigma2, G=G, M=M):
    """§3: plain IS, ``E||g_IS||^2 <= M^2 (1 + sigma^2 / G)`` (finite only under overlap).

    >>> is_second_moment(4, 2, 1)
    3
    """
    return M**2 * (1 + sigma2 / G)


__all__ = ["ASSUMPTIONS", "class_second_moment", "drift_radius", "estimator_norm_bound",
           "is_second_moment", "overlap_mu4", "overlap_sigma2", "score_bound", "smoothness_bound"]
