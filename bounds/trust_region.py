"""Trust Region Masking's bounds on the surrogate's error (Li et al., arXiv 2512.23075), as the paper states them.

Read from the paper's LaTeX source in the version whose abstract is arXiv v3's (word for word also v5's:
"a family of bounds -- both KL-based and TV-based -- including a Pinsker-Marginal bound (O(T^{3/2})), a
Mixed bound (O(T)), and an Adaptive bound"); v1 and v2 state the Pinsker-Marginal and Mixed bounds only,
under the same names and orders. Equation and theorem names below are that version's.

Setting (§2). A response ``y = (y_1..y_T)`` of fixed length T, context ``c_t = (x, y_<t)``, reward
``R(x, y) in [0, 1]``, ``J(pi) = E_pi R``. Samples come from the rollout policy pi_roll; the token ratio is
``rho_t = pi_theta(y_t | c_t) / pi_roll(y_t | c_t)``. The surrogate (Eq. surrogate) is
``L(pi_theta) = E_roll[A sum_t rho_t]`` with ``A = R - b``, and the error is

    Error(pi_theta) = J(pi_theta) - J(pi_roll) - L(pi_theta).

Every proof bounds it with the form ``L'(pi_theta) = E_roll[R sum_t (rho_t - 1)]`` (Remark "surrogate
equivalence"), for which ``Error = sum_t (E_{d_t^theta} g_t - E_{d_t^roll} g_t)`` exactly (the
performance-difference identity, ``g_t(c_t) = E_{y_t ~ pi_theta} A_t^roll(c_t, y_t)``). For fixed-length
responses ``L = L' + T (J(pi_roll) - b)``, so the two forms coincide only at ``b = J(pi_roll)``; the
Remark's "any fixed baseline ... does not affect Error" holds for the gradient, not for the value (at
``pi_theta = pi_roll`` every bound is 0 while ``Error = -T (J(pi_roll) - b)``).

Divergences (Definitions "token-level" and "sequence-level"), the KL taken with pi_roll first:

* ``D_KL(c_t) = KL(pi_roll(.|c_t) || pi_theta(.|c_t))``, ``D_TV^tok(c_t) = TV(pi_theta(.|c_t), pi_roll(.|c_t))``;
* ``delta = D_KL^{tok,max} = max_{t, c_t} D_KL(c_t)`` and ``eps = D_TV^{tok,max} = max_{t, c_t} D_TV^tok(c_t)``:
  a maximum over every position *and every context* (TRM Guarantee, part 3: "for all reachable
  contexts"), not along one sampled sequence;
* ``D_KL^seq = sum_t E_{c_t ~ d_t^roll} D_KL(c_t) = KL(P^roll || P^theta)`` (chain rule),
  ``D_TV^seq = TV(P^roll, P^theta)`` over whole responses, ``Dbar_t = E_{c_t ~ d_t^roll} D_TV^tok(c_t)``.

The bounds (each ``|Error| <= B``; ``min(1, .)`` caps as stated):

* classical (Eq. classical): ``4 eps^2 sum_t (t-1) = 2 T (T-1) eps^2``, hence ``<= T (T-1) delta``;
* Pinsker-Marginal (Theorem): ``B_PM^KL = 4 min(1, sqrt(delta/2)) sum_{t=1}^T min(1, sqrt((t-1) delta/2))``,
  ``B_PM^TV = 4 min(1, eps) sum_t min(1, sqrt((t-1) delta/2))``; for ``delta <= 2/T`` the paper writes
  ``B_PM^KL = (4/3) T^{3/2} delta`` (the proof shows ``<=``: ``sum_{k<T} sqrt k <= (2/3) T^{3/2}``);
* Mixed (Theorem): ``B_Mix^KL = 4 T min(1, sqrt(delta/2)) min(1, sqrt(D_KL^seq/2))`` (``= 2 T sqrt(delta
  D_KL^seq)`` uncapped), ``B_Mix^TV = 4 T min(1, eps) min(1, D_TV^seq)``;
* Coupling (Theorem): ``B_Coup = 4 min(1, eps) sum_t min(1, (t-1) eps)``;
* Adaptive (Theorem): ``B_Adap^* = 4 sum_t Dbar_t min(1, (T-t) eps, sqrt((T-t) delta/2))``, its KL
  (TV) variant dropping the coupling (Pinsker) term;
* Unified (Theorem): ``B^* = min(B_PM^KL, B_PM^TV, B_Mix^KL, B_Mix^TV, B_Coup, B_Adap^*)``.

Every function takes numbers and returns a float; bad input is a ``ValueError`` naming it. The
sums over positions with their caps are why these are numeric, not :func:`bounds._core.bound` sympy
expressions (a symbolic horizon in ``Sum(Min(...))`` has no numeric twin over arrays).

>>> round(pinsker_marginal_small(4096, 1e-4), 2), round(mixed_kl_small(4096, 1e-4, 0.01), 3)
(34.95, 8.192)
>>> round(classical_kl(4096, 1e-4), 1), round(mixed_tv(4096, 5e-3, 0.05), 3)
(1677.3, 4.096)
"""
from __future__ import annotations

import math
from numbers import Integral

import numpy as np

# --------------------------------------------------------------------- argument checks


def _horizon(T) -> int:
    if isinstance(T, bool) or not isinstance(T, Integral) or T < 1:
        raise ValueError(f"T (the response length) must be an integer >= 1, got T = {T!r}")
    return int(T)


def _nonneg(x, name: str, top: float = math.inf) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {name} = {x!r}") from None
    if not (math.isfinite(v) and 0.0 <= v <= top):
        rule = ">= 0" if top == math.inf else f"in [0, {top:g}]"
        raise ValueError(f"{name} must be finite and {rule}, got {name} = {x!r}")
    return v


def _kl(delta, name: str = "delta (D_KL^tok,max)") -> float:
    return _nonneg(delta, name)


def _tv(eps, name: str = "eps (D_TV^tok,max)") -> float:
    return _nonneg(eps, name, 1.0)


def _pinsker_shift(T: int, delta: float) -> float:
    """``sum_{t=1}^T min(1, sqrt((t-1) delta / 2))``: the Pinsker-on-marginal-KL context shifts."""
    return float(np.minimum(1.0, np.sqrt(np.arange(T) * delta / 2.0)).sum())


# --------------------------------------------------------------------- the bounds


def classical(T, eps) -> float:
    """The classical bound (Eq. classical): ``2 T (T-1) eps^2``, O(T^2)."""
    T, eps = _horizon(T), _tv(eps)
    return 2.0 * T * (T - 1) * eps**2


def classical_kl(T, delta) -> float:
    """The classical bound through Pinsker (``eps <= sqrt(delta/2)``): ``T (T-1) delta``, O(T^2)."""
    T, delta = _horizon(T), _kl(delta)
    return float(T * (T - 1) * delta)


def pinsker_marginal_kl(T, delta) -> float:
    """``B_PM^KL = 4 min(1, sqrt(delta/2)) sum_t min(1, sqrt((t-1) delta/2))`` (Theorem Pinsker-Marginal)."""
    T, delta = _horizon(T), _kl(delta)
    return 4.0 * min(1.0, math.sqrt(delta / 2.0)) * _pinsker_shift(T, delta)


def pinsker_marginal_tv(T, delta, eps) -> float:
    """``B_PM^TV = 4 min(1, eps) sum_t min(1, sqrt((t-1) delta/2))`` (Theorem Pinsker-Marginal)."""
    T, delta, eps = _horizon(T), _kl(delta), _tv(eps)
    return 4.0 * min(1.0, eps) * _pinsker_shift(T, delta)


def pinsker_marginal_small(T, delta) -> float:
    """The Pinsker-Marginal bound's O(T^{3/2}) form, ``(4/3) T^{3/2} delta`` (stated for ``delta <= 2/T``;
    at least ``B_PM^KL`` at every delta: the caps only lower the sum and ``sum_{k<T} sqrt k <= (2/3) T^{3/2}``)."""
    T, delta = _horizon(T), _kl(delta)
    return 4.0 / 3.0 * T**1.5 * delta


def mixed_kl(T, delta, kl_seq) -> float:
    """``B_Mix^KL = 4 T min(1, sqrt(delta/2)) min(1, sqrt(D_KL^seq/2))`` (Theorem Mixed)."""
    T, delta, kl_seq = _horizon(T), _kl(delta), _kl(kl_seq, "kl_seq (D_KL^seq)")
    return 4.0 * T * min(1.0, math.sqrt(delta / 2.0)) * min(1.0, math.sqrt(kl_seq / 2.0))


def mixed_kl_small(T, delta, kl_seq) -> float:
    """The Mixed bound's O(T) form, ``2 T sqrt(delta D_KL^seq)`` (``B_Mix^KL`` with both caps inactive; at
    least ``B_Mix^KL`` at every argument)."""
    T, delta, kl_seq = _horizon(T), _kl(delta), _kl(kl_seq, "kl_seq (D_KL^seq)")
    return 2.0 * T * math.sqrt(delta * kl_seq)


def mixed_tv(T, eps, tv_seq) -> float:
    """``B_Mix^TV = 4 T min(1, eps) min(1, D_TV^seq)`` (Theorem Mixed)."""
    T, eps, tv_seq = _horizon(T), _tv(eps), _tv(tv_seq, "tv_seq (D_TV^seq)")
    return 4.0 * T * eps * tv_seq


def coupling(T, eps) -> float:
    """``B_Coup = 4 min(1, eps) sum_t min(1, (t-1) eps)`` (Theorem Coupling)."""
    T, eps = _horizon(T), _tv(eps)
    return 4.0 * eps * float(np.minimum(1.0, np.arange(T) * eps).sum())


ADAPTIVE_ROUTES = ("hybrid", "kl", "tv")


def adaptive(dbar, delta, eps, route: str = "hybrid") -> float:
    """``B_Adap = 4 sum_t Dbar_t w_t`` (Theorem Adaptive), ``dbar`` the T values ``Dbar_1..Dbar_T``, with
    ``w_t = min(1, (T-t) eps, sqrt((T-t) delta/2))`` (``hybrid``, ``B_Adap^*``), ``min(1, sqrt((T-t) delta/2))``
    (``kl``) or ``min(1, (T-t) eps)`` (``tv``)."""
    if route not in ADAPTIVE_ROUTES:
        raise ValueError(f"unknown adaptive route {route!r}; valid: {', '.join(ADAPTIVE_ROUTES)}")
    d = np.asarray(dbar, dtype=np.float64) if np.ndim(dbar) == 1 else None
    if d is None or d.size == 0 or not np.isfinite(d).all() or (d < 0).any() or (d > 1).any():
        raise ValueError(f"dbar must be a non-empty 1-d array of values in [0, 1], got dbar = {dbar!r}")
    delta, eps = _kl(delta), _tv(eps)
    rest = np.arange(d.size - 1, -1, -1, dtype=np.float64)  # T - t for t = 1..T
    w = np.ones_like(rest)
    if route in ("hybrid", "kl"):
        w = np.minimum(w, np.sqrt(rest * delta / 2.0))
    if route in ("hybrid", "tv"):
        w = np.minimum(w, rest * eps)
    return 4.0 * float(d @ w)


def trm_bounds(T, delta, eps, kl_seq, tv_seq, dbar) -> dict[str, float]:
    """Every bound of the paper at one point, by name (:data:`BOUNDS`'s order), and ``unified`` (``B^*``)."""
    T = _horizon(T)
    if np.ndim(dbar) != 1 or len(dbar) != T:
        raise ValueError(f"dbar must hold one value per position (T = {T}), got shape {np.shape(dbar)}")
    out = {"classical": classical(T, eps), "classical_kl": classical_kl(T, delta),
           "pm_kl": pinsker_marginal_kl(T, delta), "pm_tv": pinsker_marginal_tv(T, delta, eps),
           "pm_small": pinsker_marginal_small(T, delta),
           "mix_kl": mixed_kl(T, delta, kl_seq), "mix_tv": mixed_tv(T, eps, tv_seq),
           "mix_small": mixed_kl_small(T, delta, kl_seq),
           "coupling": coupling(T, eps), "adaptive": adaptive(dbar, delta, eps)}
    out["unified"] = min(out[k] for k in UNIFIED)
    return out


BOUNDS = ("classical", "classical_kl", "pm_kl", "pm_tv", "pm_small", "mix_kl", "mix_tv", "mix_small", "coupling",
          "adaptive", "unified")
"""The names :func:`trm_bounds` returns."""
UNIFIED = ("pm_kl", "pm_tv", "mix_kl", "mix_tv", "coupling", "adaptive")
"""The six bounds whose minimum is the Unified bound ``B^*``."""

__all__ = ["ADAPTIVE_ROUTES", "BOUNDS", "UNIFIED", "adaptive", "classical", "classical_kl", "coupling", "mixed_kl",
           "mixed_kl_small", "mixed_tv", "pinsker_marginal_kl", "pinsker_marginal_small", "pinsker_marginal_tv",
           "trm_bounds"]
