"""THEORY.md §4: Lemma 3, Theorem 2's delay terms, Corollary 3.

Each delay term D is *composed* from the §3 bias bounds and the drift lemma
(``||b||^2 <= M^2 m^2`` with ``sigma^2 <= C2 R^2``, ``mu_4 <= C4 R^4``,
``R = eta d (1+eps) M``), not typed in; the constants ``K_GMC`` and ``K_TIC`` as
THEORY.md states them are kept separately so that claim 11 can compare the two.
These are the reconstructed bounds ([R]) of THEORY.md.
"""
from __future__ import annotations

import sympy as sp

from . import assumptions, bias
from ._core import bound
from .symbols import C2, C4, B, Dc, DeltaJ, G, L, M, S, T, a, bias2, d, eps, eta, r0

# --------------------------------------------------------------------- Lemma 3


@bound
def lemma3_bound(DeltaJ=DeltaJ, eta=eta, T=T, L=L, S=S, bias2=bias2):
    """Lemma 3 (biased SGD): ``(1/T) sum E||grad J||^2 <= 2 DeltaJ/(eta T) + L eta S + mean ||b_t||^2``.

    .. math:: \\frac{2\\Delta J}{\\eta T} + L\\eta S + \\frac1T\\sum_t \\mathbb E\\|b_t\\|^2

    >>> lemma3_bound(1, 1, 2, 1, 1, 0)
    2
    """
    return 2 * DeltaJ / (eta * T) + L * eta * S + bias2


# --------------------------------------------------------------------- Theorem 2: D terms


def _sigma2_at_drift(eta, d, eps, C2, M):
    return assumptions.overlap_sigma2(C2, assumptions.drift_radius(eta, d, eps, M))


@bound
def D_gmc(eta=eta, d=d, G=G, eps=eps, C2=C2, M=M):
    """Theorem 2, GMC: ``M^2 m_GMC^2`` with ``m_GMC <= sigma^2/(4 G eps)``, ``sigma^2 <= C2 R^2``.

    Equals ``K_GMC eta^4 d^4 / (G^2 eps^2)``.

    >>> D_gmc(1, 1, 1, 1, 1, 1)
    1
    """
    return M**2 * bias.m_gmc_quadratic(_sigma2_at_drift(eta, d, eps, C2, M), G, eps) ** 2


@bound
def D_tic_trunc(eta=eta, d=d, eps=eps, C2=C2, M=M):
    """Theorem 2, TIC-trunc: ``M^2 m_trunc^2`` with ``m_trunc <= sigma^2/(4 eps)``; ``K_GMC eta^4 d^4 / eps^2``.

    >>> D_tic_trunc(1, 1, 1, 1, 1)
    1
    """
    return M**2 * bias.m_trunc_quadratic(_sigma2_at_drift(eta, d, eps, C2, M), eps) ** 2


@bound
def D_tic_mask(eta=eta, d=d, eps=eps, C2=C2, C4=C4, r0=r0, M=M):
    """Theorem 2, TIC-mask: ``M^2 (1+sigma^2) mu_4 / eps^4`` with ``sigma^2 <= C2 r0^2`` (as R <= r0)
    and ``mu_4 <= C4 R^4``; equals ``K_TIC eta^4 d^4 / eps^4``.

    >>> D_tic_mask(1, 1, 1, 1, 1, 1, 1)
    32
    """
    R = assumptions.drift_radius(eta, d, eps, M)
    sig2_cap = assumptions.overlap_sigma2(C2, r0)
    return M**2 * bias.m_mask_markov(sig2_cap, assumptions.overlap_mu4(C4, R), eps) ** 2


@bound
def D_stale(eta=eta, d=d, eps=eps, C2=C2, M=M):
    """Theorem 2, c = 1: ``M^2 sigma^2`` (``m <= sigma``): second order in the delay.

    >>> D_stale(1, 1, 1, 1, 1)
    4
    """
    return M**2 * bias.m_stale_bound(_sigma2_at_drift(eta, d, eps, C2, M)) ** 2


#: scheme name (as in :data:`estimators.SCHEMES`) -> its Theorem 2 delay term
DELAY_TERMS = {"gmc": "D_gmc", "tic_mask": "D_tic_mask", "tic_trunc": "D_tic_trunc", "stale": "D_stale"}


def delay_term(scheme: str):
    """The (composed) delay term of ``scheme``; looked up at call time so a patched bound is seen."""
    try:
        return globals()[DELAY_TERMS[scheme]]
    except KeyError:
        raise ValueError(f"no delay term for scheme {scheme!r}; known: {', '.join(DELAY_TERMS)}") from None


# --------------------------------------------------------------------- Theorem 2 as stated


@bound
def K_gmc(eps=eps, C2=C2, M=M):
    """THEORY §4 table: ``K_GMC = C2^2 (1+eps)^4 M^6 / 16``.

    >>> K_gmc(1, 1, 1)
    1
    """
    return C2**2 * (1 + eps) ** 4 * M**6 / 16


@bound
def K_tic(eps=eps, C2=C2, C4=C4, r0=r0, M=M):
    """THEORY §4 table: ``K_TIC = (1 + C2 r0^2) C4 (1+eps)^4 M^6``.

    >>> K_tic(1, 1, 1, 1, 1)
    32
    """
    return (1 + C2 * r0**2) * C4 * (1 + eps) ** 4 * M**6


def stated_delay_terms() -> dict[str, sp.Expr]:
    """Theorem 2's D column exactly as THEORY.md §4 writes it."""
    return {
        "gmc": K_gmc() * eta**4 * d**4 / (G**2 * eps**2),
        "tic_mask": K_tic() * eta**4 * d**4 / eps**4,
        "tic_trunc": K_gmc() * eta**4 * d**4 / eps**2,
        "stale": C2 * (1 + eps) ** 2 * M**4 * eta**2 * d**2,
    }


@bound
def theorem2_bound(DeltaJ=DeltaJ, eta=eta, T=T, L=L, eps=eps, M=M, D=Dc):
    """Theorem 2: ``2 DeltaJ/(eta T) + L eta (1+eps)^2 M^2 + D`` (D the scheme's delay term).

    >>> theorem2_bound(1, 1, 1, 1, 1, 1, 1)
    7
    """
    return lemma3_bound(DeltaJ, eta, T, L, assumptions.class_second_moment(eps, M), D)


# --------------------------------------------------------------------- Corollary 3


@bound
def cor3_objective(eta=eta, a=a, B=B, D=Dc, T=T):
    """Corollary 3's objective ``a/(eta T) + B eta + D eta^4`` (D = the eta^4 coefficient).

    >>> cor3_objective(1, 4, 0, 1, 1)
    5
    """
    return a / (eta * T) + B * eta + D * eta**4


@bound
def eta_B(a=a, B=B, T=T):
    """``eta_B = sqrt(a / (B T))``.

    >>> eta_B(4, 1, 1)
    2
    """
    return sp.sqrt(a / (B * T))


@bound
def eta_D(a=a, D=Dc, T=T):
    """``eta_D = eta* = (a / (4 D T))^{1/5}``, the exact minimiser of ``a/(eta T) + D eta^4``.

    >>> eta_D(4, 1, 1)
    1
    """
    return (a / (4 * D * T)) ** sp.Rational(1, 5)


@bound
def cor3_delay_part(a=a, D=Dc, T=T):
    """The delay-dependent part of Corollary 3: ``(5/4) 4^{1/5} a^{4/5} D^{1/5} T^{-4/5}``.

    .. math:: \\tfrac54\\,4^{1/5} a^{4/5} D^{1/5} T^{-4/5}

    >>> cor3_delay_part(4, 1, 1)
    5
    """
    return (sp.Rational(5, 4) * 4 ** sp.Rational(1, 5) * a ** sp.Rational(4, 5) * D ** sp.Rational(1, 5)
            * T ** sp.Rational(-4, 5))


@bound
def cor3_tuned_bound(a=a, B=B, D=Dc, T=T):
    """Corollary 3: ``bound <= 2 sqrt(a B / T) + (5/4) 4^{1/5} a^{4/5} D^{1/5} T^{-4/5}``.

    >>> cor3_tuned_bound(4, 1, 1, 1)
    9
    """
    return 2 * sp.sqrt(a * B / T) + cor3_delay_part(a, D, T)


@bound
def cor3_locality_extra(DeltaJ=DeltaJ, d=d, eps=eps, M=M, r0=r0, T=T):
    """Corollary 3: extra ``2 DeltaJ d (1+eps) M / (r0 T)`` when the cap ``eta <= r0/(d(1+eps)M)`` binds.

    >>> cor3_locality_extra(1, 1, 1, 1, 1, 1)
    4
    """
    return 2 * DeltaJ * d * (1 + eps) * M / (r0 * T)


def delay_coefficient(scheme: str) -> sp.Expr:
    """D of Corollary 3 for ``scheme``: its composed Theorem 2 term divided by ``eta^4``."""
    return sp.simplify(delay_term(scheme)() / eta**4)


__all__ = ["DELAY_TERMS", "D_gmc", "D_stale", "D_tic_mask", "D_tic_trunc", "K_gmc", "K_tic",
           "cor3_delay_part", "cor3_locality_extra", "cor3_objective", "cor3_tuned_bound",
           "delay_coefficient", "delay_term", "eta_B", "eta_D", "lemma3_bound", "stated_delay_terms",
           "theorem2_bound"]
