"""Count-vector combinatorics: the C(G+K-1, K-1) count vectors of a group, their multinomial
coefficients, the enumeration size guard."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy.special import gammaln

MAX_ENTRIES = 60_000_000
"""Largest exact enumeration accepted: count vectors x G weight entries (about 10 s)."""

CHUNK_ENTRIES = 1 << 22
"""Rows are processed in chunks of at most this many weight entries (bounded memory)."""

_RADIX_LIMIT = 2**62


def n_count_vectors(G: int, K: int) -> int:
    """Number of count vectors ``n in N^K`` with ``|n| = G``: ``C(G+K-1, K-1)``."""
    return math.comb(G + K - 1, K - 1)


def check_enumeration_size(G: int, K: int, max_entries: int = MAX_ENTRIES) -> int:
    """Raise ``ValueError`` (suggesting Monte Carlo) when enumeration would be too large."""
    N = n_count_vectors(G, K)
    if N * G > max_entries:
        raise ValueError(
            f"exact enumeration with G = {G} and K = {K} outcomes needs C(G+K-1, K-1) = {N:,} count "
            f"vectors, i.e. {N * G:,} weight entries per scheme, over the limit of {max_entries:,}; "
            f"use mc_moments (Monte Carlo) instead, or a smaller G or K"
        )
    return N


@lru_cache(maxsize=16)
def configurations(G: int, K: int):
    """All count vectors with ``|n| = G`` over K outcomes, lexicographic.

    Returns read-only arrays ``counts (N, K)``, ``tuples (N, G)`` (each count vector
    expanded to its sorted outcome tuple) and ``log_coef (N,)`` (log multinomial
    coefficient ``log G! - sum_k log n_k!``).
    """
    rows = np.zeros((1, 0), dtype=np.int64)
    sums = np.zeros(1, dtype=np.int64)
    for _ in range(K - 1):  # prepend one free coordinate at a time: n_k in 0..G - sum so far
        lengths = G - sums + 1
        starts = np.cumsum(lengths) - lengths
        new = np.arange(lengths.sum()) - np.repeat(starts, lengths)
        rows = np.column_stack([np.repeat(rows, lengths, axis=0), new])
        sums = np.repeat(sums, lengths) + new
    counts = np.column_stack([rows, G - sums])
    tuples = expand_counts(counts)
    log_coef = gammaln(G + 1) - gammaln(counts + 1).sum(-1)
    for a in (counts, tuples, log_coef):
        a.setflags(write=False)
    return counts, tuples, log_coef


def expand_counts(counts: np.ndarray) -> np.ndarray:
    """``(N, K)`` count vectors -> ``(N, G)`` sorted outcome tuples (outcome k repeated n_k times)."""
    N, K = counts.shape
    G = int(counts[0].sum()) if N else 0
    idx = np.repeat(np.tile(np.arange(K, dtype=np.int64), N), counts.ravel())
    return idx.reshape(N, G)
