"""Monte Carlo moments: groups drawn as multinomial count vectors, estimates and their standard
errors."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._validate import check_eps, check_G, check_positive_int
from .counts import _RADIX_LIMIT, expand_counts
from .exact import _as_batch
from .groups import _chunks, group_terms


def draw_counts(rng: np.random.Generator, G: int, p_b: np.ndarray, n_groups: int) -> np.ndarray:
    """``n_groups`` count vectors of G iid draws from ``p_b`` (K,): ``(n_groups, K)``."""
    return rng.multinomial(G, p_b, size=n_groups)


def distinct_counts(counts: np.ndarray):
    """Distinct rows of ``counts`` and their frequencies (a radix key when it fits int64)."""
    K = counts.shape[1]
    G = int(counts[0].sum())
    if (G + 1) ** K < _RADIX_LIMIT:
        key = counts @ ((G + 1) ** np.arange(K, dtype=np.int64))
        _, first, freq = np.unique(key, return_index=True, return_counts=True)
        return counts[first], freq
    uniq, freq = np.unique(counts, axis=0, return_counts=True)
    return uniq, freq


@dataclass
class MCGroups:
    """Distinct groups drawn for one instance: estimates ``g (u, P)``, ``gap (u,)``, frequencies ``freq (u,)``."""

    g: np.ndarray
    gap: np.ndarray
    freq: np.ndarray


def mc_groups(counts, log_ratio, rewards, scores, eps, estimator, advantage="loo") -> MCGroups:
    """Estimates of ``scheme`` for the count vectors drawn for one instance."""
    uniq, freq = distinct_counts(counts)
    G = int(uniq[0].sum())
    lr, _, rew, S = _as_batch(log_ratio, log_ratio, rewards, scores)
    tuples = expand_counts(uniq)
    g = np.empty((len(uniq), S.shape[-1]))
    gap = np.empty(len(uniq))
    for sl in _chunks(len(uniq), G):
        t = group_terms(tuples[None, sl], lr, rew, eps, [estimator], advantage)
        g[sl] = (t.coef(estimator)[0] @ S[0]) / G
        gap[sl] = t.gap[estimator][0]
    return MCGroups(g, gap, freq)


def mc_stats(blocks: list[MCGroups], n_total: int):
    """Means and standard errors over all groups; block q's estimates live in block q.

    The full estimate of a group of block q is ``e_q (x) g``; returns ``mean_grad (Q, P)``,
    ``mean_grad_se (Q, P)``, ``second_moment``, ``second_moment_se``, ``max_norm``,
    ``mass_bias``, ``mass_bias_se``, and ``mean_grad_cov`` (Q*P, Q*P), the covariance of the
    flattened ``mean_grad`` estimate (score components are correlated: a softmax score sums to
    zero), for standard errors of projections and norms.
    """
    n = n_total
    if n < 2:
        raise ValueError(f"Monte Carlo standard errors need n_groups >= 2, got {n}")
    mean = np.stack([(b.freq[:, None] * b.g).sum(0) for b in blocks]) / n
    # two-pass variance of each component; a group outside block q contributes (0 - mean_q)^2
    var = np.stack([(b.freq[:, None] * (b.g - mu) ** 2).sum(0) + (n - b.freq.sum()) * mu**2
                    for b, mu in zip(blocks, mean)]) / (n - 1)

    def scalar(vals):
        f = np.concatenate([b.freq for b in blocks])
        x = np.concatenate(vals)
        mu = (f * x).sum() / n
        v = (f * (x - mu) ** 2).sum() / (n - 1)
        return mu, math.sqrt(v / n)

    # E[v v^T] of the flattened group estimate v = e_q (x) g is block diagonal
    P = mean.shape[1]
    evv = np.zeros((len(blocks) * P, len(blocks) * P))
    for q, b in enumerate(blocks):
        evv[q * P:(q + 1) * P, q * P:(q + 1) * P] = (b.freq[:, None] * b.g).T @ b.g / n
    m = mean.ravel()
    cov = (evv - np.outer(m, m)) * (n / (n - 1)) / n

    sq = [(b.g**2).sum(-1) for b in blocks]
    second, second_se = scalar(sq)
    mass, mass_se = scalar([b.gap for b in blocks])
    return {
        "mean_grad": mean,
        "mean_grad_se": np.sqrt(var / n),
        "mean_grad_cov": cov,
        "second_moment": second,
        "second_moment_se": second_se,
        "max_norm": float(math.sqrt(max(float(x.max()) for x in sq if len(x)))),
        "mass_bias": mass,
        "mass_bias_se": mass_se,
    }


def check_mc_args(G, eps, n_groups, seed):
    G = check_G(G)
    eps = check_eps(eps)
    n_groups = check_positive_int(n_groups, "n_groups", 2)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return G, eps, n_groups, int(seed)
