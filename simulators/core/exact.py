"""Exact moments by count-vector enumeration (THEORY §6): mean gradient, second moment, bias,
mass bias; the per-sample closed forms of schemes whose weight depends on w_i alone."""

from __future__ import annotations

import numpy as np

import estimators

from .._validate import check_eps, check_G
from .counts import (
    MAX_ENTRIES,
    check_enumeration_size,
    configurations,
)
from .groups import _chunks, group_terms

PER_SAMPLE_SCHEMES = ("is", "stale", "tic_mask", "tic_trunc")
"""Schemes whose weight c_i depends on w_i alone (THEORY §3's per-sample rows)."""


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


def exact_batch(log_ratio, log_p_b, rewards, scores, G, eps, estimator_names, advantage="loo", max_entries=MAX_ENTRIES,
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
    check_enumeration_size(G, K, max_entries, B)
    counts, tuples, log_coef = configurations(G, K)
    N = len(counts)
    pmf = np.exp(log_coef[None, :] + lpb @ counts.T.astype(np.float64))  # (B, N)
    run = list(dict.fromkeys(["is", *estimator_names]))
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
    for s in estimator_names:
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


def per_sample_batch(log_ratio, log_p_b, rewards, scores, G, eps, estimator):
    """Exact moments of a per-sample scheme with leave-one-out advantages, for any G.

    With c_i = c(w_i) and iid outcomes, ``E g_hat = E_b[c(w) (r - E_b r) s]`` (THEORY §6)
    for every G >= 2, and ``E ||g_hat||^2`` is a finite sum of products of single-outcome
    moments (expanding ``A_i = r_i - mean_{j != i} r_j``; see the index-coincidence cases
    in the code). No ``max_norm`` (that needs enumeration).
    """
    if estimator not in PER_SAMPLE_SCHEMES:
        raise ValueError(f"per_sample moments need a per-sample scheme {PER_SAMPLE_SCHEMES}, got {estimator!r}")
    G = check_G(G)
    if G < 2:
        raise ValueError(f"leave-one-out advantages need G >= 2, got G = {G}")
    eps = check_eps(eps)
    lr, lpb, rew, S = _as_batch(log_ratio, log_p_b, rewards, scores)
    B, K = lr.shape
    # one single-outcome "group" per outcome: c(w_k), computed by the estimators
    c = estimators.weights(estimator, lr.reshape(B * K, 1), eps).reshape(B, K)
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
