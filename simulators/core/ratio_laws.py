"""Mass bias on ratio laws alone (E3, E4: no rewards, no scores), exact and Monte Carlo."""

from __future__ import annotations

import math

import numpy as np

import estimators
from estimators import get_scheme

from .._validate import check_eps, check_G
from .counts import MAX_ENTRIES, check_enumeration_size, configurations
from .groups import _chunks


def exact_mass_batch(log_ratio, log_p_b, G, eps, estimator_names, wbar_powers=(), max_entries=MAX_ENTRIES):
    """Scalar ratio-law quantities by enumerating count vectors (no scores, no rewards).

    For B ratio laws (``log_ratio``, ``log_p_b`` of shape ``(B, K)``) returns
    ``{scheme: E[(1/G) sum_i (w_i - c_i)]}`` (THEORY §3's mass-bias m for c <= w) and
    ``{("wbar", k): E(Wbar - 1)^k}`` for k in ``wbar_powers``; each entry has shape (B,).
    Works for every G >= 1.
    """
    G = check_G(G)
    eps = check_eps(eps)
    _check_ratio_only(estimator_names)
    lr = np.atleast_2d(np.asarray(log_ratio, dtype=np.float64))
    lpb = np.atleast_2d(np.asarray(log_p_b, dtype=np.float64))
    B, K = lr.shape
    check_enumeration_size(G, K, max_entries, B)
    counts, tuples, log_coef = configurations(G, K)
    pmf = np.exp(log_coef[None, :] + lpb @ counts.T.astype(np.float64))
    out = {s: np.zeros(B) for s in estimator_names}
    out.update({("wbar", k): np.zeros(B) for k in wbar_powers})
    for sl in _chunks(len(counts), B * G):
        n = sl.stop - sl.start
        rows = lr[:, tuples[sl]].reshape(B * n, G)
        w = estimators.weights("is", rows, eps)
        pm = pmf[:, sl]
        for s in estimator_names:
            c = w if s == "is" else estimators.weights(s, rows, eps)
            out[s] += (pm * (w - c).mean(-1).reshape(B, n)).sum(-1)
        if wbar_powers:
            d = (w.mean(-1) - 1.0).reshape(B, n)
            for k in wbar_powers:
                out[("wbar", k)] += (pm * d**k).sum(-1)
    return out


def _check_ratio_only(estimator_names):
    for s in estimator_names:
        if get_scheme(s).needs_advantages:
            raise ValueError(f"scheme {s!r} needs advantages; ratio laws carry no rewards")


def mc_mass(log_w: np.ndarray, eps: float, estimator: str):
    """Monte Carlo mass-bias ``mean, se`` of ``(1/G) sum_i (w_i - c_i)`` over groups ``log_w (n_groups, G)``."""
    _check_ratio_only([estimator])
    w = estimators.weights("is", log_w, eps)
    c = w if estimator == "is" else estimators.weights(estimator, log_w, eps)
    gap = (w - c).mean(-1)
    return float(gap.mean()), float(gap.std(ddof=1) / math.sqrt(len(gap)))
