"""THEORY §3: the one scheme -> mass-bias bound table, and its numeric evaluation.

Every reader of a mass-bias bound m (``||b|| <= M m``) looks it up here: the simulators'
exact checks, the LLM trainer's theory-in-the-loop column and the claims. §3 gives two
bounds per scheme, and the table names both under a *form*:

* ``"tight"``: the tightest bound §3 states. Scarf's bound for GMC and TIC-trunc
  (``(sqrt(sigma^2/G + eps^2) - eps)/2`` and ``(sqrt(sigma^2 + eps^2) - eps)/2``), the
  Markov bound for TIC-mask, ``sigma`` for c = 1.
* ``"theorem2"``: the bound Theorem 2's delay term is composed from
  (:data:`bounds.delay.DELAY_TERMS`): the quadratic ``sigma^2/(4 G eps)`` and
  ``sigma^2/(4 eps)`` for GMC and TIC-trunc (``(y-eps)_+ <= y^2/(4 eps)`` applied to Scarf),
  the same Markov and ``sigma`` bounds for TIC-mask and c = 1. It is never below ``"tight"``.

Plain IS has ``m = 0`` exactly (Lemma 1); every other scheme of :data:`estimators.SCHEMES`
has no bound in THEORY, and :func:`mass_bound` gives NaN for it.

>>> float(mass_bound("gmc", 1.0, 0.0, 4, 0.25, form="theorem2"))
0.25
>>> round(float(mass_bound("gmc", 1.0, 0.0, 4, 0.25)), 6)
0.176777
>>> mass_bound("gmc", 1.0, 0.0, 4, 0.25, form="loose")
Traceback (most recent call last):
...
ValueError: unknown mass-bound form 'loose'; valid: tight, theorem2
"""
from __future__ import annotations

import numpy as np

MASS_FORMS = ("tight", "theorem2")


def mass_bounds() -> dict[str, dict[str, str]]:
    """scheme -> form -> the registered bound on its mass bias m (THEORY §3); IS (m = 0) is not listed. Each
    row is the ``mass_bound`` of the scheme's record, in its own module (:mod:`estimators.records`), read when
    asked (importing :mod:`bounds` imports no estimator, nor torch); also :data:`MASS_BOUNDS`."""
    from estimators.records import records

    recs = records()
    rows = {n: r.mass_bound for n, r in recs.items() if r.mass_bound is not None}
    rank = {n: recs[n].style.rank if recs[n].style else float("inf") for n in rows}
    return {n: rows[n] for n in sorted(rows, key=lambda n: rank[n])}


def __getattr__(name: str):
    if name == "MASS_BOUNDS":  # the table as a module attribute, read when asked (mass_bounds)
        return mass_bounds()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def mass_bound_name(scheme: str, form: str = "tight") -> str | None:
    """The registered bound of ``scheme`` in ``form``; None for a scheme without one (IS included)."""
    if form not in MASS_FORMS:
        raise ValueError(f"unknown mass-bound form {form!r}; valid: {', '.join(MASS_FORMS)}")
    from estimators.records import records

    rec = records().get(scheme)  # the one row of mass_bounds(), without building the table
    return None if rec is None or rec.mass_bound is None else rec.mass_bound[form]


def mass_bound(scheme: str, sigma2, mu4, G, eps, form: str = "tight"):
    """THEORY §3's bound on the mass bias m of ``scheme`` at (sigma^2, mu_4, G, eps); arrays broadcast.

    0 for IS (unbiased, Lemma 1); NaN for a scheme without a bound in THEORY (snis, topr, ...).
    ``form`` picks the table's column (module docstring).
    """
    name = mass_bound_name(scheme, form)
    sigma2 = np.asarray(sigma2, dtype=np.float64)
    if scheme == "is":
        return np.zeros_like(sigma2)
    if name is None:
        return np.full_like(sigma2, np.nan)
    from .numeric import twin

    f = twin(name)
    kw = {"sigma2": sigma2, "mu4": mu4, "G": G, "eps": eps}
    return f(**{k: kw[k] for k in f.params})


__all__ = ["MASS_FORMS", "mass_bound", "mass_bound_name", "mass_bounds"]
