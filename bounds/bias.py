"""THEORY.md §2-§3: ratio-based bias bounds, key inequalities, extremal laws, lognormal forms.

The mass-bias scalars ``m`` satisfy ``||b|| <= M m`` (leave-one-out advantages).
Each function returns a sympy expression; numeric twins come from
:func:`bounds.numeric.twin`. These are the reconstructed bounds ([R]) of THEORY.md.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import sympy as sp
from sympy.utilities.iterables import partitions

from ._core import bound, check_domain
from .symbols import Delta, G, delta, eps, k, mu, mu4, p, s2, sigma2, w, wbar, wmax, y

# --------------------------------------------------------------------- §2 GMC and beta


def gmc_lambda(ratios: Sequence, eps=eps):
    """GMC's group scale (THEORY §2 (d)): ``lambda = min(1, G (1+eps) / sum_j w_j)``.

    >>> gmc_lambda([3, 1, 1, 1], sp.Rational(1, 5))
    4/5
    """
    check_domain(eps=eps, G=len(ratios))
    return sp.Min(1, len(ratios) * (1 + eps) / sp.Add(*ratios))


@bound
def gmc_excess(wbar=wbar, eps=eps):
    """Theorem 1: ``min beta_inf = min beta_1 = (Wbar - 1 - eps)_+``, attained by GMC.

    Also GMC's identity ``(1 - lambda) Wbar = (Wbar - 1 - eps)_+``.

    >>> gmc_excess(2, sp.Rational(1, 2)), gmc_excess(1, 1)
    (1/2, 0)
    """
    return sp.Max(wbar - 1 - eps, 0)


@bound
def beta1_term_trunc(w=w, eps=eps):
    """§2 table: TIC-trunc's ``beta_1 = (1/G) sum_i (w_i - 1 - eps)_+``; this is one term."""
    return sp.Max(w - 1 - eps, 0)


@bound
def beta1_term_mask(w=w, eps=eps):
    """§2 table: TIC-mask's ``beta_1 = (1/G) sum_i w_i 1{w_i > 1+eps}``; this is one term."""
    return sp.Piecewise((w, w > 1 + eps), (0, True))


@bound
def beta_inf_trunc(wbar=wbar, wmax=wmax, eps=eps):
    """§2 table: TIC-trunc's ``beta_inf = Wbar (1 - (1+eps)/w_max)_+``."""
    return wbar * sp.Max(1 - (1 + eps) / wmax, 0)


@bound
def beta_inf_mask(wbar=wbar, wmax=wmax, eps=eps):
    """§2 table: TIC-mask's ``beta_inf = Wbar 1{w_max > 1+eps}``."""
    return sp.Piecewise((wbar, wmax > 1 + eps), (0, True))


def beta_1(c: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Ratio-based bias functional ``beta_1 = (1/G) sum_i |w_i - c_i|`` per group (§2), arrays (n, G).

    >>> beta_1(np.array([[1.0, 1.0]]), np.array([[2.0, 0.5]])).tolist()
    [0.75]
    """
    return np.abs(w - c).mean(axis=-1)


def beta_inf(c: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``beta_inf = Wbar max_i |1 - c_i / w_i|`` per group (§2), arrays (n, G).

    >>> beta_inf(np.array([[1.0, 1.0]]), np.array([[2.0, 0.5]])).tolist()
    [1.25]
    """
    return w.mean(axis=-1) * np.abs(1.0 - c / w).max(axis=-1)


# --------------------------------------------------------------------- §3 key inequalities


@bound
def hinge(y=y, eps=eps):
    """``(y - eps)_+``, the excess over the threshold.

    >>> hinge(3, 1), hinge(sp.Rational(1, 2), 1)
    (2, 0)
    """
    return sp.Max(y - eps, 0)


@bound
def key_quadratic_bound(y=y, eps=eps):
    """Key inequality (§3): ``(y - eps)_+ <= y^2 / (4 eps)``, equality at ``y = 2 eps``.

    .. math:: (y-\\epsilon)_+ \\le \\frac{y^2}{4\\epsilon}

    >>> key_quadratic_bound(2, sp.Rational(1, 2))
    2
    """
    return y**2 / (4 * eps)


@bound
def key_quartic_bound(y=y, eps=eps):
    """Squared key inequality (§4, Jensen route): ``(y - eps)_+^2 <= y^4 / (16 eps^2)``.

    >>> key_quartic_bound(2, sp.Rational(1, 2))
    4
    """
    return key_quadratic_bound(y, eps) ** 2


@bound
def scarf_bound(s2=s2, k=k, mu=mu):
    """Scarf: ``sup E(Y-k)_+`` over laws with mean mu and variance s2 (§3).

    .. math:: \\tfrac12\\left(\\sqrt{s^2+(k-\\mu)^2}-(k-\\mu)\\right)

    >>> scarf_bound(3, 2, 1)
    1/2
    """
    return (sp.sqrt(s2 + (k - mu) ** 2) - (k - mu)) / 2


# --------------------------------------------------------------------- §3 mass-bias bounds


@bound
def m_stale_bound(sigma2=sigma2):
    """c = 1: ``m = E_b|w - 1| <= sigma``.

    >>> m_stale_bound(4)
    2
    """
    return sp.sqrt(sigma2)


@bound
def m_mask_markov(sigma2=sigma2, mu4=mu4, eps=eps):
    """TIC-mask: ``m_mask = P_theta(w > 1+eps) <= sqrt(1+sigma^2) sqrt(mu_4) / eps^2``.

    .. math:: m_{mask} \\le \\frac{\\sqrt{1+\\sigma^2}\\sqrt{\\mu_4}}{\\epsilon^2}

    >>> m_mask_markov(3, 4, 2)
    1
    """
    return sp.sqrt(1 + sigma2) * sp.sqrt(mu4) / eps**2


@bound
def m_trunc_scarf(sigma2=sigma2, eps=eps):
    """TIC-trunc: ``m_trunc = E_b (w-1-eps)_+ <= (sqrt(sigma^2 + eps^2) - eps) / 2`` (Scarf, k = 1+eps).

    >>> m_trunc_scarf(16, 3)
    1
    """
    return scarf_bound(sigma2, 1 + eps, 1)


@bound
def m_trunc_quadratic(sigma2=sigma2, eps=eps):
    """TIC-trunc: ``m_trunc <= E_b (w-1)^2 / (4 eps) = sigma^2 / (4 eps)`` (key inequality).

    >>> m_trunc_quadratic(2, sp.Rational(1, 2))
    1
    """
    return key_quadratic_bound(sp.sqrt(sigma2), eps)


@bound
def m_gmc_scarf(sigma2=sigma2, G=G, eps=eps):
    """GMC: ``m_GMC(G) = E(Wbar-1-eps)_+ <= (sqrt(sigma^2/G + eps^2) - eps) / 2`` (Scarf, Var Wbar = sigma^2/G).

    >>> m_gmc_scarf(4, 4, sp.Rational(1, 2))
    -1/4 + sqrt(5)/4
    """
    return scarf_bound(sigma2 / G, 1 + eps, 1)


@bound
def m_gmc_quadratic(sigma2=sigma2, G=G, eps=eps):
    """GMC: ``m_GMC(G) <= sigma^2 / (4 G eps)``.

    .. math:: m_{GMC}(G) \\le \\frac{\\sigma^2}{4G\\epsilon}

    >>> m_gmc_quadratic(8, 2, 1)
    1
    """
    return key_quadratic_bound(sp.sqrt(sigma2 / G), eps)


def _ratio_moments_feasible(sigma2=None, mu4=None, **_):
    """A ratio law (w >= 0, E w = 1) with Var w = sigma2 and E(w-1)^4 = mu4 exists iff mu4 >= sigma2^2
    (Jensen) when sigma2 <= 1, and mu4 >= sigma2^3 - sigma2^2 + sigma2 when sigma2 > 1 (w - 1 >= -1:
    the two-point law on {0, 1 + sigma2} is the least; up to rounding). ``ValueError`` otherwise."""
    s, m = np.broadcast_arrays(sigma2, mu4)
    least = np.where(s <= 1, s**2, s**3 - s**2 + s)
    bad = m < least * (1 - 1e-12) - 1e-300
    if np.any(bad):
        i = np.flatnonzero(bad.ravel())[0]
        raise ValueError(f"infeasible ratio moments: mu4 = {float(m.ravel()[i])!r} is below "
                         f"{float(least.ravel()[i])!r}, the least fourth central moment of a ratio law with "
                         f"sigma2 = {float(s.ravel()[i])!r} (no law has them)")


@bound(feasible=_ratio_moments_feasible)
def fourth_moment_group_mean(sigma2=sigma2, mu4=mu4, G=G):
    """Identity (§3): ``E(Wbar - 1)^4 = (mu_4 + 3 (G-1) sigma^4) / G^3``.

    >>> fourth_moment_group_mean(1, 3, 2)   # Gaussian: 3 Var(Wbar)^2 = 3/4
    3/4
    """
    return (mu4 + 3 * (G - 1) * sigma2**2) / G**3


@bound(feasible=_ratio_moments_feasible)
def m2_gmc_quartic(sigma2=sigma2, mu4=mu4, G=G, eps=eps):
    """§4 alternative route: ``m_GMC^2 <= E(Wbar-1)^4 / (16 eps^2)`` (Jensen + squared key inequality).

    >>> m2_gmc_quartic(1, 3, 2, sp.Rational(1, 4))   # 16 eps^2 = 1
    3/4
    """
    return fourth_moment_group_mean(sigma2, mu4, G) / (16 * eps**2)


def central_moment_of_mean(n: int, G=G, moment: Callable[[int], sp.Expr] | None = None) -> sp.Expr:
    """``E(Wbar - 1)^n`` for iid ``w_i`` with central moments ``moment(j) = E(w-1)^j``, derived.

    Counts the index patterns of ``(sum_i Y_i)^n``: an integer partition of n with all
    parts >= 2 (a part 1 has mean zero) picks ``G^(l) / prod(mult!)`` index sets and
    ``n! / prod(part!)`` orderings.

    >>> central_moment_of_mean(2)
    sigma2/G
    """
    if n < 1:
        raise ValueError(f"moment order must be >= 1, got n = {n}")
    check_domain(G=G)
    if moment is None:
        def moment(j):
            return {2: sigma2, 4: mu4}.get(j, sp.Symbol(f"mu{j}", real=True))
    total = sp.Integer(0)
    for part in partitions(n):
        part = dict(part)  # sympy reuses the dict
        if 1 in part:
            continue
        n_parts = sum(part.values())
        choose = sp.ff(G, n_parts) / sp.Mul(*[sp.factorial(m) for m in part.values()])
        orders = sp.factorial(n) / sp.Mul(*[sp.factorial(j) ** m for j, m in part.items()])
        total += choose * orders * sp.Mul(*[moment(j) ** m for j, m in part.items()])
    return sp.factor(sp.expand_func(total) / G**n)


# --------------------------------------------------------------------- §3 / E4 extremal laws


def law_moments(law: dict) -> tuple[sp.Expr, sp.Expr]:
    """Mean and variance of a two-point law ``{"p": P(hi), "hi": ..., "lo": ...}``."""
    mean = law["p"] * law["hi"] + (1 - law["p"]) * law["lo"]
    var = law["p"] * (law["hi"] - mean) ** 2 + (1 - law["p"]) * (law["lo"] - mean) ** 2
    return sp.simplify(mean), sp.simplify(var)


def mask_two_point_law(sigma2=sigma2, eps=eps, delta=delta) -> dict:
    """E4 law for TIC-mask: mean 1, variance sigma^2, mass at ``hi = 1 + eps + delta`` (delta -> 0+).

    ``p = sigma^2 / (sigma^2 + (eps+delta)^2)`` and ``lo = (1 - p hi) / (1 - p)``; a valid
    ratio law (lo >= 0) needs ``sigma^2 <= eps`` at delta = 0.
    """
    check_domain(sigma2=sigma2, eps=eps, delta=delta)
    hi = 1 + eps + delta
    pr = sigma2 / (sigma2 + (eps + delta) ** 2)
    return {"p": pr, "hi": hi, "lo": (1 - pr * hi) / (1 - pr)}


@bound
def m_mask_two_point(sigma2=sigma2, eps=eps):
    """THEORY §3 tightness: the two-point law gives ``m_mask = (1+eps) sigma^2 / (sigma^2 + eps^2)``.

    >>> m_mask_two_point(1, 1)
    1
    """
    return (1 + eps) * sigma2 / (sigma2 + eps**2)


def scarf_two_point_law(s2=s2, k=k, mu=mu) -> dict:
    """The law attaining Scarf's bound: ``Y in {k - r, k + r}``, ``r = sqrt(s2 + (k-mu)^2)``, mean mu."""
    check_domain(s2=s2, k=k, mu=mu)
    r = sp.sqrt(s2 + (k - mu) ** 2)
    return {"p": (1 - (k - mu) / r) / 2, "hi": k + r, "lo": k - r}


def rare_jump_law(p=p, G=G, eps=eps) -> dict:
    """E4 rare-jump law for GMC: ``w - 1 = 2 G eps`` w.p. p, balanced elsewhere (mean 1)."""
    check_domain(p=p, G=G, eps=eps)
    return {"p": p, "hi": 1 + 2 * G * eps, "lo": 1 - 2 * G * eps * p / (1 - p)}


# --------------------------------------------------------------------- E3 lognormal


def normal_sf(x):
    """Standard normal upper tail ``Phi_bar(x) = erfc(x / sqrt 2) / 2``."""
    return sp.erfc(x / sp.sqrt(2)) / 2


@bound
def lognormal_sigma2(Delta=Delta):
    """E3 (claim 15): ``sigma^2 = e^{Delta^2} - 1``.

    >>> lognormal_sigma2(1)
    -1 + E
    """
    return sp.exp(Delta**2) - 1


@bound
def lognormal_mu4(Delta=Delta):
    """E3 (claim 15): ``mu_4 = e^{6 Delta^2} - 4 e^{3 Delta^2} + 6 e^{Delta^2} - 3``."""
    return sp.exp(6 * Delta**2) - 4 * sp.exp(3 * Delta**2) + 6 * sp.exp(Delta**2) - 3


@bound
def lognormal_m_mask(Delta=Delta, eps=eps):
    """E3 (claim 15): ``m_mask = Phi_bar((ln(1+eps) - Delta^2/2) / Delta)``."""
    return normal_sf((sp.log(1 + eps) - Delta**2 / 2) / Delta)


@bound
def lognormal_m_trunc(Delta=Delta, eps=eps):
    """E3 (claim 15): ``m_trunc = m_mask - (1+eps) Phi_bar((ln(1+eps) + Delta^2/2) / Delta)``."""
    return lognormal_m_mask(Delta, eps) - (1 + eps) * normal_sf((sp.log(1 + eps) + Delta**2 / 2) / Delta)


def _gauss_pdf(x, mean, var):
    return sp.exp(-((x - mean) ** 2) / (2 * var)) / sp.sqrt(2 * sp.pi * var)


def lognormal_log_ratio_pdf(x, Delta=Delta, under: str = "b"):
    """Density of ``log w`` in E3: ``N(-Delta^2/2, Delta^2)`` under pi_b, ``N(+Delta^2/2, Delta^2)`` under pi_theta."""
    check_domain(Delta=Delta)
    if under not in ("b", "theta"):
        raise ValueError(f"under must be 'b' or 'theta', got {under!r}")
    sign = -1 if under == "b" else 1
    return _gauss_pdf(x, sign * Delta**2 / 2, Delta**2)

