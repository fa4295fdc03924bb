"""The §3 bias bounds and Theorem 2's delay terms, as numbers, for the simulators.

Nothing is re-derived here: every formula is a numeric twin of a sympy bound of
:mod:`bounds` (``bounds.numeric.twin``); this module only says which bound belongs to
which scheme and which arguments it takes.
"""
from __future__ import annotations

import numpy as np

from bounds import mass_bound as _mass_bound
from bounds.delay import (
    DELAY_TERMS,  # scheme -> the bounds/ name of Theorem 2's delay term D
)

FP_SLACK = 1e-9
"""Relative slack when comparing an exact bias with its bound (floating-point rounding of
the bound's ``sqrt(a) - b`` forms and of sums over up to 1e6 configurations)."""



def _twin(name):
    from bounds.numeric import twin

    return twin(name)


def mass_bound(estimator: str, sigma2, mu4, G: int, eps: float):
    """THEORY §3's tightest bound on the mass bias m of ``scheme`` (0 for IS, NaN for schemes
    without one): :func:`bounds.mass_bound` in its ``"tight"`` form, the one table every reader uses."""
    return _mass_bound(estimator, sigma2, mu4, G, eps, form="tight")


def estimator_norm_bound(eps: float, M):
    """Lemma 2 / the drift lemma: ``||g_hat|| <= (1+eps) M`` for every member of C_eps."""
    return _twin("estimator_norm_bound")(eps=eps, M=M)


def drift_radius(eta: float, d, eps: float, M):
    """The drift lemma's radius ``R = eta d (1+eps) M`` bounding ``||theta_t - theta_{t-d_t}||`` under SGD."""
    return _twin("drift_radius")(eta=eta, d=d, eps=eps, M=M)


def gmc_quadratic(sigma2, G: int, eps: float):
    """sigma^2 / (4 G eps), the GMC rate of THEORY §3 (claim 8)."""
    return _twin("m_gmc_quadratic")(sigma2=sigma2, G=G, eps=eps)


def delay_term(estimator: str, eta, d, G, eps, C2, C4, r0, M):
    """Theorem 2's D for ``scheme`` with constants (C2, C4, r0, M) estimated by the caller."""
    if estimator == "is":
        return 0.0
    if estimator not in DELAY_TERMS:
        return float("nan")
    f = _twin(DELAY_TERMS[estimator])
    kw = {"eta": eta, "d": d, "G": G, "eps": eps, "C2": C2, "C4": C4, "r0": r0, "M": M}
    return float(f(**{k: kw[k] for k in f.params}))


LOG_FLOAT_MAX = float(np.log(np.finfo(np.float64).max))  # 709.78: exp overflows above it


def lognormal_closed_forms(delta: float, eps: float) -> dict:
    """Claim 15's closed forms (sigma^2, mu_4, m_mask, m_trunc) for E3, from bounds' twins.

    Refused (``ValueError``) when mu_4 ~ e^{6 Delta^2} exceeds the float64 range (Delta > 10.87):
    its closed form would be inf - inf = NaN."""
    if 6 * float(delta) ** 2 >= LOG_FLOAT_MAX:
        raise ValueError(f"Delta = {delta!r} is too large for the E3 closed forms: mu_4 = e^(6 Delta^2) - ... "
                         f"exceeds the float64 range (needs Delta < {np.sqrt(LOG_FLOAT_MAX / 6):.4g})")
    return {
        "sigma2": float(_twin("lognormal_sigma2")(Delta=delta)),
        "mu4": float(_twin("lognormal_mu4")(Delta=delta)),
        "m_mask": float(_twin("lognormal_m_mask")(Delta=delta, eps=eps)),
        "m_trunc": float(_twin("lognormal_m_trunc")(Delta=delta, eps=eps)),
    }


def fourth_moment_group_mean(sigma2, mu4, G):
    """E(Wbar - 1)^4 = (mu_4 + 3 (G-1) sigma^4) / G^3 (claim 6), from bounds' twin."""
    return float(_twin("fourth_moment_group_mean")(sigma2=sigma2, mu4=mu4, G=G))


def class_second_moment(eps: float, M):
    """Lemma 2: (1+eps)^2 M^2 bounds E||g_hat||^2 for every member of C_eps."""
    return _twin("class_second_moment")(eps=eps, M=M)


def is_second_moment(sigma2, G: int, M):
    """THEORY §3: E||g_IS||^2 <= M^2 (1 + sigma^2/G)."""
    return _twin("is_second_moment")(sigma2=sigma2, G=G, M=M)
