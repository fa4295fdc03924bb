"""Symbolic bounds of THEORY.md (sympy) and their numeric twins.

* :mod:`bounds.symbols`     every symbol, declared once with its assumptions
* :mod:`bounds.assumptions` §1: A1-A5 constants and the drift lemma
* :mod:`bounds.bias`        §2-§3: beta functionals, mass-bias bounds, key inequalities, laws
* :mod:`bounds.mass`        §3: the one scheme -> mass-bias bound table, ``mass_bound(scheme, ...)``
* :mod:`bounds.delay`       §4: Lemma 3, Theorem 2's delay terms, Corollary 3
* :mod:`bounds.normalised`  §8: Adam's step bound, sign-error bounds, ``SIGN_TABLE`` (beside ``MASS_BOUNDS``)
* :mod:`bounds.exponents`   exponent of a variable in an expression, derived by sympy
* :mod:`bounds.numeric`     ``twin(name)``: the lambdified numeric twin of a bound
* :mod:`bounds.tuning`      Corollary 3's step size, tuned numerically on the twin of its objective
* :mod:`bounds.trust_region` a published paper's bounds, as it states them: Trust Region Masking's bounds on
  the surrogate's error (arXiv 2512.23075; numeric, checked by claim 25)

The claims of §5 that these bounds state are checked by :mod:`claims` (``python -m claims``).

The bounds are THEORY.md's reconstruction ([R]), not the paper's text, except :mod:`bounds.trust_region`,
which states Li et al.'s bounds as their paper writes them.
"""
from .mass import MASS_FORMS, mass_bound, mass_bound_name, mass_bounds


def __getattr__(name):  # bounds.delay imports sympy: loaded on first use; the mass table is read when asked
    if name == "MASS_BOUNDS":  # (bounds.mass.mass_bounds): importing bounds imports no estimator, nor torch
        return mass_bounds()
    if name == "DELAY_TERMS":
        from .delay import DELAY_TERMS

        return DELAY_TERMS
    if name == "twin":
        from .numeric import twin

        return twin
    if name in ("SIGN_TABLE", "sign_error_bound", "trajectory_share_bound"):
        from . import normalised

        return getattr(normalised, name)
    raise AttributeError(name)


__all__ = ["DELAY_TERMS", "MASS_BOUNDS", "MASS_FORMS", "SIGN_TABLE", "mass_bound", "mass_bound_name", "mass_bounds",
           "sign_error_bound", "trajectory_share_bound", "twin"]

