"""Group terms: weights (:func:`estimators.weights`), advantages and per-group estimates of a batch
of ``(rows, G)`` outcome tuples, in bounded-memory chunks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import estimators
from estimators import advantages as compute_advantages
from estimators import get_scheme

from .counts import CHUNK_ENTRIES


@dataclass
class GroupTerms:
    """Per-group quantities of one chunk of rows (B instances x n groups), for several schemes.

    ``cA[s]`` is ``c_i A_i`` with shape ``(B*n, G)``; ``gap[s]`` is ``(1/G) sum_i (w_i - c_i)``
    with shape ``(B, n)`` (the pointwise mass-bias beta_1 for c <= w). :meth:`coef` gives
    ``coef[b, n, k] = sum_{i: o_i = k} c_i A_i`` so that ``g_hat = coef @ scores / G``;
    :meth:`instance_sums` gives ``sum_{n, i} f[b, n] c_i A_i e_{o_i}``, shape ``(B, K)``.
    """

    tuples: np.ndarray  # (B, n, G) outcome indices
    K: int
    cA: dict
    gap: dict

    def coef(self, s) -> np.ndarray:
        B, n, G = self.tuples.shape
        flat = (np.arange(B * n, dtype=np.int64) * self.K)[:, None] + self.tuples.reshape(B * n, G)
        return np.bincount(flat.ravel(), weights=self.cA[s].ravel(), minlength=B * n * self.K).reshape(B, n, self.K)

    def instance_sums(self, values: np.ndarray, f: np.ndarray) -> np.ndarray:
        """``sum_{n, i} f[b, n] values[b*n, i] e_{o_i}`` per instance, ``(B, K)``."""
        B, n, G = self.tuples.shape
        flat = (np.arange(B, dtype=np.int64) * self.K)[:, None, None] + self.tuples
        return np.bincount(flat.ravel(), weights=(values.reshape(B, n, G) * f[:, :, None]).ravel(),
                           minlength=B * self.K).reshape(B, self.K)


def group_terms(tuples, log_ratio, rewards, eps, estimator_names, advantage="loo", with_gap=True) -> GroupTerms:
    """Weights and advantages of groups given as outcome tuples.

    Args:
        tuples: ``(B or 1, n, G)`` integer outcome indices (1: the same tuples for every instance).
        log_ratio, rewards: ``(B, K)`` per-outcome log-ratio and reward.
        schemes: names of :data:`estimators.SCHEMES`; weights are computed by one
            :func:`estimators.weights` call per scheme on the whole ``(B*n, G)`` array.
    """
    B, K = log_ratio.shape
    n, G = tuples.shape[1], tuples.shape[2]
    for s in estimator_names:  # rows here are independent groups; a batch statistic would couple them
        if get_scheme(s).batch_coupled:
            raise ValueError(f"scheme {s!r} normalises over the whole batch: its groups are not independent; "
                             "use simulators.peers (one batch at a time)")
    bi = np.arange(B)[:, None, None]
    lr = log_ratio[bi, tuples].reshape(B * n, G)
    if tuples.shape[0] == 1 and B > 1 and np.all(rewards == rewards[:1]):
        # shared tuples and rewards: one advantage computation serves every instance
        A = np.broadcast_to(compute_advantages(rewards[0][tuples[0]], advantage)[None], (B, n, G)).reshape(B * n, G)
    else:
        A = compute_advantages(rewards[bi, tuples].reshape(B * n, G), advantage)
    w = estimators.weights("is", lr, eps) if with_gap else None
    cA, gap = {}, {}
    for s in estimator_names:
        c = w if (s == "is" and w is not None) else estimators.weights(
            s, lr, eps, advantages=A if get_scheme(s).needs_advantages else None
        )
        cA[s] = c * A
        if with_gap:
            gap[s] = (w - c).mean(-1).reshape(B, n)
    return GroupTerms(np.broadcast_to(tuples, (B, n, G)), K, cA, gap)


def _chunks(n_rows: int, row_entries: int):
    step = max(1, CHUNK_ENTRIES // max(1, row_entries))
    for start in range(0, n_rows, step):
        yield slice(start, min(n_rows, start + step))
