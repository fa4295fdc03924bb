"""Exact and Monte Carlo moments of the estimator family on a finite outcome space.

Every environment with finitely many outcomes (E1's arms, E2's token sequences, E4's
ratio values) reduces to the same data, one row per *instance* ``b`` (a prompt, or one
(theta, theta_b) pair of a batch):

* ``log_ratio[b, k] = log pi_theta(k) - log pi_b(k)``, shape ``(B, K)``;
* ``log_p_b[b, k] = log pi_b(k)``, shape ``(B, K)`` (every outcome sampled with p > 0);
* ``rewards[b, k]`` in [0, 1], shape ``(B, K)``;
* ``scores[b, k] = grad log pi_theta(k)``, shape ``(B, K, P)``.

A group is G iid outcomes from pi_b. The estimator of THEORY §1 is
``g_hat(c) = (1/G) sum_i c_i A_i s_{o_i}``; its weights ``c`` always come from
:func:`estimators.weights` and its advantages from :func:`estimators.advantages`,
both called once on a whole ``(rows, G)`` array.

Exact expectations (THEORY §6) sum over **count vectors** ``n`` (``|n| = G``) weighted
by the multinomial pmf: a group's estimate depends on its outcomes only through ``n``
(every scheme is permutation-equivariant), so the ``C(G+K-1, K-1)`` count vectors
replace the ``K^G`` ordered tuples. Each count vector is expanded to the sorted tuple
of its outcomes, a row of the ``(N, G)`` array handed to the estimators.

Monte Carlo draws count vectors with ``rng.multinomial`` (the same law as G iid draws)
and evaluates the estimate once per distinct count vector drawn, weighted by its
frequency.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.special import gammaln

import estimators
from estimators import advantages as compute_advantages
from estimators import get_scheme

from ._validate import check_eps, check_G, check_positive_int

MAX_ENTRIES = 60_000_000
"""Largest exact enumeration accepted: count vectors x G weight entries (about 10 s)."""

CHUNK_ENTRIES = 1 << 22
"""Rows are processed in chunks of at most this many weight entries (bounded memory)."""

PER_SAMPLE_SCHEMES = ("is", "stale", "tic_mask", "tic_trunc")
"""Schemes whose weight c_i depends on w_i alone (THEORY §3's per-sample rows)."""

_RADIX_LIMIT = 2**62


# --------------------------------------------------------------------------- enumeration


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


# --------------------------------------------------------------------------- one batch of groups


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


def group_terms(tuples, log_ratio, rewards, eps, schemes, advantage="loo", with_gap=True) -> GroupTerms:
    """Weights and advantages of groups given as outcome tuples.

    Args:
        tuples: ``(B or 1, n, G)`` integer outcome indices (1: the same tuples for every instance).
        log_ratio, rewards: ``(B, K)`` per-outcome log-ratio and reward.
        schemes: names of :data:`estimators.SCHEMES`; weights are computed by one
            :func:`estimators.weights` call per scheme on the whole ``(B*n, G)`` array.
    """
    B, K = log_ratio.shape
    n, G = tuples.shape[1], tuples.shape[2]
    for s in schemes:  # rows here are independent groups; a batch statistic would couple them
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
    for s in schemes:
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


# --------------------------------------------------------------------------- exact


def _as_batch(log_ratio, log_p_b, rewards, scores):
    lr = np.atleast_2d(np.asarray(log_ratio, dtype=np.float64))
    lpb = np.atleast_2d(np.asarray(log_p_b, dtype=np.float64))
    rew = np.broadcast_to(np.atleast_2d(np.asarray(rewards, dtype=np.float64)), lr.shape)
    S = np.asarray(scores, dtype=np.float64)
    if S.ndim == 2:
        S = S[None]
    S = np.broadcast_to(S, (lr.shape[0],) + S.shape[1:])
    return lr, lpb, rew, S


def ratio_moments(log_ratio, log_p_b):
    """sigma^2 = Var_b(w) and mu_4 = E_b (w-1)^4 per instance (THEORY §1), exact sums."""
    lr, lpb = np.atleast_2d(log_ratio), np.atleast_2d(log_p_b)
    p_b = np.exp(lpb)
    d = np.expm1(lr)  # w - 1, accurate for small log-ratios
    return (p_b * d**2).sum(-1), (p_b * d**4).sum(-1)


def bound_M(rewards, scores):
    """M = (max r - min r) max_k ||s_k|| >= ||A_i s_i|| for leave-one-out advantages (THEORY A2)."""
    rew = np.atleast_2d(rewards)
    S = np.asarray(scores)
    if S.ndim == 2:
        S = S[None]
    return (rew.max(-1) - rew.min(-1)) * np.sqrt((S**2).sum(-1).max(-1))


def exact_batch(log_ratio, log_p_b, rewards, scores, G, eps, schemes, advantage="loo", max_entries=MAX_ENTRIES,
                second: bool = True):
    """Exact moments of every scheme in ``schemes`` for B instances at once.

    Returns ``{scheme: {"mean_grad" (B, P), "bias" (B, P), "mass_bias" (B,),
    "second_moment" (B,), "max_norm" (B,)}}`` plus ``"_prob_total"`` (B,) (sum of the pmf,
    1 up to rounding). ``bias`` is ``E[g_hat(c) - g_hat(w)]`` summed per count vector
    (exactly 0 where c = w); ``mass_bias`` is ``E[(1/G) sum_i (w_i - c_i)]`` (THEORY §3's m).
    ``second=False`` skips ``second_moment`` and ``max_norm`` (cheaper: no per-group g_hat).
    """
    G = check_G(G)
    eps = check_eps(eps)
    lr, lpb, rew, S = _as_batch(log_ratio, log_p_b, rewards, scores)
    B, K = lr.shape
    check_enumeration_size(G, K, max_entries)
    counts, tuples, log_coef = configurations(G, K)
    N = len(counts)
    pmf = np.exp(log_coef[None, :] + lpb @ counts.T.astype(np.float64))  # (B, N)
    run = list(dict.fromkeys(["is", *schemes]))
    acc = {s: {"coef_mean": np.zeros((B, K)), "coef_bias": np.zeros((B, K)), "second_moment": np.zeros(B),
               "max_sq": np.zeros(B), "mass_bias": np.zeros(B)} for s in run}
    for sl in _chunks(N, B * G):
        terms = group_terms(tuples[None, sl], lr, rew, eps, run, advantage)
        pm = pmf[:, sl]
        coef_is = terms.coef("is") if second else None
        for s in run:
            a = acc[s]
            a["mass_bias"] += (pm * terms.gap[s]).sum(-1)
            if second:  # per-group coefficients: g_hat = coef @ S / G
                coef = coef_is if s == "is" else terms.coef(s)
                a["coef_mean"] += np.einsum("bn,bnk->bk", pm, coef)
                a["coef_bias"] += np.einsum("bn,bnk->bk", pm, coef - coef_is)
                sq = ((coef @ S) ** 2).sum(-1) / G**2  # (B, n) ||g_hat||^2
                a["second_moment"] += (pm * sq).sum(-1)
                a["max_sq"] = np.maximum(a["max_sq"], sq.max(-1))
            else:  # means only: pmf-weighted sums straight into (B, K)
                a["coef_mean"] += terms.instance_sums(terms.cA[s], pm)
                a["coef_bias"] += terms.instance_sums(terms.cA[s] - terms.cA["is"], pm)
    out = {}
    for s in schemes:
        a = acc[s]
        out[s] = {
            "mean_grad": np.einsum("bk,bkp->bp", a["coef_mean"], S) / G,
            "bias": np.einsum("bk,bkp->bp", a["coef_bias"], S) / G,
            "mass_bias": a["mass_bias"],
        }
        if second:
            out[s].update(second_moment=a["second_moment"], max_norm=np.sqrt(a["max_sq"]))
    out["_prob_total"] = pmf.sum(-1)
    out["_n_configs"] = N
    return out


def per_sample_batch(log_ratio, log_p_b, rewards, scores, G, eps, scheme):
    """Exact moments of a per-sample scheme with leave-one-out advantages, for any G.

    With c_i = c(w_i) and iid outcomes, ``E g_hat = E_b[c(w) (r - E_b r) s]`` (THEORY §6)
    for every G >= 2, and ``E ||g_hat||^2`` is a finite sum of products of single-outcome
    moments (expanding ``A_i = r_i - mean_{j != i} r_j``; see the index-coincidence cases
    in the code). No ``max_norm`` (that needs enumeration).
    """
    if scheme not in PER_SAMPLE_SCHEMES:
        raise ValueError(f"per_sample moments need a per-sample scheme {PER_SAMPLE_SCHEMES}, got {scheme!r}")
    G = check_G(G)
    if G < 2:
        raise ValueError(f"leave-one-out advantages need G >= 2, got G = {G}")
    eps = check_eps(eps)
    lr, lpb, rew, S = _as_batch(log_ratio, log_p_b, rewards, scores)
    B, K = lr.shape
    # one single-outcome "group" per outcome: c(w_k), computed by the estimators
    c = estimators.weights(scheme, lr.reshape(B * K, 1), eps).reshape(B, K)
    w = np.exp(lr)
    p = np.exp(lpb)
    ss = (S**2).sum(-1)  # ||s_k||^2
    rho, rho2 = (p * rew).sum(-1), (p * rew**2).sum(-1)

    def vec(f):  # E_b[f(k) s_k] -> (B, P)
        return np.einsum("bk,bkp->bp", p * f, S)

    def sca(f):
        return (p * f).sum(-1)

    alpha, beta, ar = vec(c * rew), vec(c), vec(c * rew**2)
    A2, Au, U2 = sca(c**2 * ss * rew**2), sca(c**2 * ss * rew), sca(c**2 * ss)
    dot = lambda x, y: (x * y).sum(-1)
    aa, bb, ab = dot(alpha, alpha), dot(beta, beta), dot(alpha, beta)
    # g_hat = (1/G)[sum_i a_i - (1/(G-1)) sum_{i != j} u_i r_j],  a = c s r, u = c s
    t1 = G * A2 + G * (G - 1) * aa
    t2 = G * (G - 1) * (Au * rho + dot(ar, beta) + (G - 2) * rho * ab)
    t3 = G * (G - 1) * (U2 * rho2 + aa + (G - 2) * (U2 * rho**2 + bb * rho2 + 2 * rho * ab)
                        + (G - 2) * (G - 3) * bb * rho**2)
    second = t1 / G**2 - 2 * t2 / (G**2 * (G - 1)) + t3 / (G**2 * (G - 1) ** 2)
    centred = rew - rho[:, None]
    return {
        "mean_grad": vec(c * centred),
        "bias": vec((c - w) * centred),
        "second_moment": second,
        "mass_bias": sca(w - c),
    }


# --------------------------------------------------------------------------- Monte Carlo


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


def mc_groups(counts, log_ratio, rewards, scores, eps, scheme, advantage="loo") -> MCGroups:
    """Estimates of ``scheme`` for the count vectors drawn for one instance."""
    uniq, freq = distinct_counts(counts)
    G = int(uniq[0].sum())
    lr, _, rew, S = _as_batch(log_ratio, log_ratio, rewards, scores)
    tuples = expand_counts(uniq)
    g = np.empty((len(uniq), S.shape[-1]))
    gap = np.empty(len(uniq))
    for sl in _chunks(len(uniq), G):
        t = group_terms(tuples[None, sl], lr, rew, eps, [scheme], advantage)
        g[sl] = (t.coef(scheme)[0] @ S[0]) / G
        gap[sl] = t.gap[scheme][0]
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


# --------------------------------------------------------------------------- environments


class OutcomeEnv:
    """Base of the finite-outcome environments (E1, E2): exact and Monte Carlo moments.

    A subclass sets ``theta_shape`` and ``rng`` (the environment owns its generator) and
    implements :meth:`arrays` (the per-instance outcome arrays of the module docstring)
    and :meth:`grad_J`. Instance ``b`` is one prompt, drawn uniformly: its gradient block
    is row ``b`` of the parameter, scaled by ``1/B``.
    """

    theta_shape: tuple
    rng: np.random.Generator

    def reseed(self, seed) -> None:
        """Start the environment's own generator afresh from ``seed`` (Monte Carlo draws use only it)."""
        self.rng = np.random.default_rng(seed)

    def arrays(self, theta, theta_b):  # pragma: no cover - abstract
        raise NotImplementedError

    def grad_J(self, theta):  # pragma: no cover - abstract
        raise NotImplementedError

    def check_theta(self, theta, name: str = "theta") -> np.ndarray:
        from ._validate import finite_array

        arr = finite_array(theta, name)
        if arr.shape != tuple(self.theta_shape):
            raise ValueError(f"{name} must have shape {tuple(self.theta_shape)}, got {arr.shape}")
        return arr

    def batch_arrays(self, theta, theta_b):
        """Outcome arrays of B parameter pairs (single prompt): ``theta`` is ``(B, *theta_shape)``.

        Returns ``log_ratio (B, K)``, ``log_p_b (B, K)``, ``rewards (B, K)``, ``scores (B, K, P)``.
        """
        if getattr(self, "n_prompts", 1) != 1:
            raise ValueError("batched parameter pairs need a single-prompt environment")
        theta, theta_b = np.asarray(theta, dtype=np.float64), np.asarray(theta_b, dtype=np.float64)
        B = theta.shape[0]
        lp, lpb = self.log_probs(theta), self.log_probs(theta_b)
        S = self.scores(theta).reshape(B, self.K, -1)
        return lp - lpb, lpb, np.broadcast_to(self.rewards, (B, self.K)), S

    def _full(self, per_instance):
        B = per_instance.shape[0]
        return (per_instance / B).reshape(self.theta_shape)

    def _common(self, theta, theta_b, lr, lpb, rew, S):
        sigma2, mu4 = ratio_moments(lr, lpb)
        M = bound_M(rew, S)
        one = (lambda x: float(x[0])) if lr.shape[0] == 1 else (lambda x: x)
        return {"grad_J": self.grad_J(theta), "sigma2": one(sigma2), "mu4": one(mu4), "M": one(M)}

    def exact_all(self, theta, theta_b, G, eps, schemes, advantage="loo", max_entries=MAX_ENTRIES):
        """Exact moments of several schemes at once (the enumeration is shared)."""
        for s in schemes:
            get_scheme(s)
        theta, theta_b = self.check_theta(theta), self.check_theta(theta_b, "theta_b")
        lr, lpb, rew, S = self.arrays(theta, theta_b)
        raw = exact_batch(lr, lpb, rew, S, G, eps, schemes, advantage, max_entries)
        common = self._common(theta, theta_b, lr, lpb, rew, S)
        out = {}
        for s in schemes:
            r = raw[s]
            bias = self._full(r["bias"])
            out[s] = {
                "mean_grad": self._full(r["mean_grad"]),
                "second_moment": float(r["second_moment"].mean()),
                "max_norm": float(r["max_norm"].max()),
                "bias": bias,
                "bias_norm": float(np.linalg.norm(bias)),
                "mass_bias": float(r["mass_bias"].mean()),
                "n_configs": raw["_n_configs"],
                **common,
            }
        return out

    def exact_moments(self, theta, theta_b, G, eps, scheme, advantage="loo", max_entries=MAX_ENTRIES):
        """Exact ``mean_grad``, ``grad_J``, ``second_moment``, ``max_norm`` (plus ``bias``,
        ``bias_norm``, ``mass_bias``, ``sigma2``, ``mu4``, ``M``, ``n_configs``)."""
        return self.exact_all(theta, theta_b, G, eps, [scheme], advantage, max_entries)[scheme]

    def per_sample_moments(self, theta, theta_b, G, eps, scheme):
        """Exact moments of a per-sample scheme with leave-one-out advantages, any G (no max_norm)."""
        theta, theta_b = self.check_theta(theta), self.check_theta(theta_b, "theta_b")
        lr, lpb, rew, S = self.arrays(theta, theta_b)
        r = per_sample_batch(lr, lpb, rew, S, G, eps, scheme)
        bias = self._full(r["bias"])
        return {
            "mean_grad": self._full(r["mean_grad"]),
            "second_moment": float(r["second_moment"].mean()),
            "bias": bias,
            "bias_norm": float(np.linalg.norm(bias)),
            "mass_bias": float(r["mass_bias"].mean()),
            **self._common(theta, theta_b, lr, lpb, rew, S),
        }

    def mc_moments(self, theta, theta_b, G, eps, scheme, n_groups, advantage="loo"):
        """Monte Carlo estimates with standard errors from ``n_groups`` groups drawn with ``self.rng``.

        Keys: those of :meth:`exact_moments` (``max_norm`` over the groups drawn) plus
        ``mean_grad_se``, ``second_moment_se``, ``mass_bias_se``.
        """
        get_scheme(scheme)
        G, eps, n_groups, _ = check_mc_args(G, eps, n_groups, 0)
        theta, theta_b = self.check_theta(theta), self.check_theta(theta_b, "theta_b")
        lr, lpb, rew, S = self.arrays(theta, theta_b)
        B = lr.shape[0]
        per = self.rng.multinomial(n_groups, np.full(B, 1.0 / B)) if B > 1 else [n_groups]
        blocks = []
        for b in range(B):
            if per[b] == 0:
                blocks.append(MCGroups(np.zeros((0, S.shape[-1])), np.zeros(0), np.zeros(0, dtype=np.int64)))
                continue
            counts = draw_counts(self.rng, G, np.exp(lpb[b]), int(per[b]))
            blocks.append(mc_groups(counts, lr[b], rew[b], S[b], eps, scheme, advantage))
        st = mc_stats(blocks, n_groups)
        mean = st["mean_grad"].reshape(self.theta_shape)
        grad_J = self.grad_J(theta)
        bias = mean - grad_J
        common = self._common(theta, theta_b, lr, lpb, rew, S)
        return {
            **common,
            "mean_grad": mean,
            "mean_grad_se": st["mean_grad_se"].reshape(self.theta_shape),
            "mean_grad_cov": st["mean_grad_cov"],
            "second_moment": st["second_moment"],
            "second_moment_se": st["second_moment_se"],
            "max_norm": st["max_norm"],
            "bias": bias,
            "bias_norm": float(np.linalg.norm(bias)),
            "mass_bias": st["mass_bias"],
            "mass_bias_se": st["mass_bias_se"],
            "n_groups": n_groups,
        }


# --------------------------------------------------------------------------- ratio laws only


def exact_mass_batch(log_ratio, log_p_b, G, eps, schemes, wbar_powers=(), max_entries=MAX_ENTRIES):
    """Scalar ratio-law quantities by enumerating count vectors (no scores, no rewards).

    For B ratio laws (``log_ratio``, ``log_p_b`` of shape ``(B, K)``) returns
    ``{scheme: E[(1/G) sum_i (w_i - c_i)]}`` (THEORY §3's mass-bias m for c <= w) and
    ``{("wbar", k): E(Wbar - 1)^k}`` for k in ``wbar_powers``; each entry has shape (B,).
    Works for every G >= 1.
    """
    G = check_G(G)
    eps = check_eps(eps)
    _check_ratio_only(schemes)
    lr = np.atleast_2d(np.asarray(log_ratio, dtype=np.float64))
    lpb = np.atleast_2d(np.asarray(log_p_b, dtype=np.float64))
    B, K = lr.shape
    check_enumeration_size(G, K, max_entries)
    counts, tuples, log_coef = configurations(G, K)
    pmf = np.exp(log_coef[None, :] + lpb @ counts.T.astype(np.float64))
    out = {s: np.zeros(B) for s in schemes}
    out.update({("wbar", k): np.zeros(B) for k in wbar_powers})
    for sl in _chunks(len(counts), B * G):
        n = sl.stop - sl.start
        rows = lr[:, tuples[sl]].reshape(B * n, G)
        w = estimators.weights("is", rows, eps)
        pm = pmf[:, sl]
        for s in schemes:
            c = w if s == "is" else estimators.weights(s, rows, eps)
            out[s] += (pm * (w - c).mean(-1).reshape(B, n)).sum(-1)
        if wbar_powers:
            d = (w.mean(-1) - 1.0).reshape(B, n)
            for k in wbar_powers:
                out[("wbar", k)] += (pm * d**k).sum(-1)
    return out


def _check_ratio_only(schemes):
    for s in schemes:
        if get_scheme(s).needs_advantages:
            raise ValueError(f"scheme {s!r} needs advantages; ratio laws carry no rewards")


def mc_mass(log_w: np.ndarray, eps: float, scheme: str):
    """Monte Carlo mass-bias ``mean, se`` of ``(1/G) sum_i (w_i - c_i)`` over groups ``log_w (n_groups, G)``."""
    _check_ratio_only([scheme])
    w = estimators.weights("is", log_w, eps)
    c = w if scheme == "is" else estimators.weights(scheme, log_w, eps)
    gap = (w - c).mean(-1)
    return float(gap.mean()), float(gap.std(ddof=1) / math.sqrt(len(gap)))
