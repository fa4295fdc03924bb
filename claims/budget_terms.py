"""THEORY §9's terms, computed exactly: for a batch of B prompts drawn uniformly from Q, each with a group of G
completions, the squared bias ``||b(G)||^2``, the between-prompt variance ``V_b(G)`` and the within-group
``S_w(G) = G W(G)`` of every registered trajectory scheme, from an environment's outcome arrays (``log_ratio``,
``log_p_b``, ``rewards`` ``(Q, K)``, ``scores`` ``(Q, K, P)`` in one common parameter space):

* :func:`exact_terms`: by count-vector enumeration (:func:`simulators.core.exact_batch`), any scheme whose groups
  are independent;
* :func:`hoeffding`: the per-sample schemes' ``zeta1``, ``zeta2`` (Proposition 9.2) from single-outcome sums, any G;
* :func:`batch_mse_brute`: the batch's MSE by enumerating the joint law of B groups (no decomposition used);
* :func:`e5_arrays`: the outcome arrays of the shared-parameter model E5 (:mod:`simulators.shared_softmax`).
"""
from __future__ import annotations

import itertools

import numpy as np
from scipy.special import log_softmax, softmax

import estimators
from simulators.core import configurations
from simulators.core.exact import bound_M, exact_batch, ratio_moments
from simulators.core.groups import group_terms

PER_SAMPLE = ("is", "stale", "tic_mask", "tic_trunc")
"""Schemes whose weight depends on the trajectory's own ratio alone (Proposition 9.2 holds)."""


def binary(rewards) -> bool:
    """Whether every reward is 0 or 1 (TOPR's weight is then a function of (w_i, r_i) where A_i != 0)."""
    r = np.asarray(rewards)
    return bool(np.all((r == 0) | (r == 1)))


def per_sample_schemes(rewards) -> tuple[str, ...]:
    """The schemes Proposition 9.2 covers on these rewards: :data:`PER_SAMPLE`, and TOPR when rewards are binary."""
    return PER_SAMPLE + (("topr",) if binary(rewards) else ())


def per_outcome_weights(estimator: str, log_ratio, rewards, eps: float) -> np.ndarray:
    """``c(w_k, r_k)`` per outcome for a scheme of :func:`per_sample_schemes` (TOPR: A's sign from r, binary)."""
    lr = np.asarray(log_ratio, float)
    adv = (2.0 * np.asarray(rewards, float) - 1.0).reshape(-1, 1) if estimator == "topr" else None
    return estimators.weights(estimator, lr.reshape(-1, 1), eps, advantages=adv).reshape(lr.shape)


def hoeffding(log_ratio, log_p_b, rewards, scores, c) -> dict:
    """Per prompt, the Hoeffding terms of the leave-one-out kernel ``k(x, y) = (r_x - r_y)(c_x s_x - c_y s_y)/2``
    for per-outcome weights ``c`` ``(Q, K)``: the mean ``mu`` ``(Q, P)`` (= E_b[c (r - E_b r) s]), ``zeta1`` =
    Var h_1(X) and ``zeta2`` = Var k(X, Y) ``(Q,)``, by single-outcome sums (THEORY §9, Proposition 9.2)."""
    p = np.exp(np.asarray(log_p_b, float))
    r = np.asarray(rewards, float)
    S = np.asarray(scores, float)
    u = np.asarray(c, float)[..., None] * S  # (Q, K, P): c_k s_k
    rho, rho2 = (p * r).sum(-1), (p * r**2).sum(-1)
    alpha = np.einsum("qk,qkp->qp", p * r, u)
    beta = np.einsum("qk,qkp->qp", p, u)
    mu = alpha - rho[:, None] * beta
    h1 = 0.5 * ((r - rho[:, None])[..., None] * u + alpha[:, None] - r[..., None] * beta[:, None])
    zeta1 = np.einsum("qk,qk->q", p, (h1**2).sum(-1)) - (mu**2).sum(-1)
    a = (u**2).sum(-1)
    t1 = 2 * (p * a * (r**2 - 2 * r * rho[:, None] + rho2[:, None])).sum(-1)
    ur2, ur = np.einsum("qk,qkp->qp", p * r**2, u), alpha
    t2 = -2 * (2 * (ur2 * beta).sum(-1) - 2 * (ur**2).sum(-1))
    zeta2 = 0.25 * (t1 + t2) - (mu**2).sum(-1)
    return {"mu": mu, "zeta1": zeta1, "zeta2": zeta2}


def exact_terms(log_ratio, log_p_b, rewards, scores, grad_J, G: int, eps: float, estimator_names) -> dict:
    """Per scheme, §9's terms at group size G by enumeration: ``bias`` (P,), ``b_sq``, ``V_b``, ``W``, ``S_w``,
    ``mass`` (E of the group's mass (1/G) sum_i c_i) and the per-prompt conditional means ``mu`` (Q, P)."""
    raw = exact_batch(log_ratio, log_p_b, rewards, scores, G, eps, list(estimator_names))
    out = {}
    for s in estimator_names:
        mu = raw[s]["mean_grad"]
        mbar = mu.mean(0)
        bias = mbar - np.asarray(grad_J, float).ravel()
        W = float(np.mean(raw[s]["second_moment"] - (mu**2).sum(-1)))
        out[s] = {"bias": bias, "b_sq": float(bias @ bias), "V_b": float(np.mean(((mu - mbar) ** 2).sum(-1))),
                  "W": W, "S_w": G * W, "mass": float(1.0 - raw[s]["mass_bias"].mean()), "mu": mu}
    return out


def ratio_law(log_ratio, log_p_b, rewards, scores) -> dict:
    """Per prompt: sigma^2, mu_4 and M = (max r - min r) max_k ||s_k|| (THEORY §1, A2)."""
    s2, m4 = ratio_moments(log_ratio, log_p_b)
    return {"sigma2": s2, "mu4": m4, "M": bound_M(rewards, scores)}


def group_law(log_ratio, log_p_b, rewards, scores, G: int, eps: float, estimator: str) -> tuple[np.ndarray, np.ndarray]:
    """The law of one group's estimate for a uniformly drawn prompt: every (prompt, count vector)'s ``g_hat``
    ``(n, P)`` and its probability ``(n,)`` (enumerated; the probabilities sum to 1)."""
    lr, lpb = np.atleast_2d(log_ratio), np.atleast_2d(log_p_b)
    rew, S = np.atleast_2d(rewards), np.asarray(scores, float)
    Q, K = lr.shape
    counts, tuples, log_coef = configurations(G, K)
    xs, ps = [], []
    for q in range(Q):
        terms = group_terms(tuples[None], lr[q:q + 1], rew[q:q + 1], eps, [estimator])
        cA = terms.cA[estimator]  # (n, G)
        xs.append(np.einsum("ng,ngp->np", cA, S[q][tuples]) / G)
        ps.append(np.exp(log_coef + counts @ lpb[q]) / Q)
    return np.concatenate(xs), np.concatenate(ps)


def batch_mse_brute(x: np.ndarray, p: np.ndarray, target, B: int) -> float:
    """``E||(1/B) sum_b X_b - target||^2`` for B independent draws of the discrete law ``(x, p)``, by summing over
    every B-tuple of its atoms (no variance decomposition used)."""
    t = np.asarray(target, float).ravel()
    total = 0.0
    for head in itertools.product(range(len(p)), repeat=B - 1):
        v = x[list(head)].sum(0) if head else np.zeros_like(t)
        batch = (v[None] + x) / B - t[None]  # the last draw varies over every atom
        total += float(np.prod(p[list(head)]) * (p * (batch**2).sum(-1)).sum())
    return total


def e5_arrays(env, theta, theta_b) -> tuple:
    """E5's outcome arrays over its V^H sequences (one prompt): ``log_ratio``, ``log_p_b``, ``rewards`` ``(1, K)``,
    ``scores`` ``(1, K, V r)`` (``grad log pi(o) = sum_h (e_{o_h} - pi_h) psi_h``), and ``grad J`` ``(V r,)``."""
    from simulators.token_mdp.env import outcomes

    o = outcomes(env.V, env.H)  # (K, H)
    lp = log_softmax(env.logits(np.asarray(theta)[None])[0], -1)
    lpb = log_softmax(env.logits(np.asarray(theta_b)[None])[0], -1)
    hh = np.arange(env.H)
    logp, logpb = lp[hh, o].sum(-1), lpb[hh, o].sum(-1)
    pi = softmax(env.logits(np.asarray(theta)[None])[0], -1)  # (H, V)
    onehot = np.eye(env.V)[o]  # (K, H, V)
    S = np.einsum("khv,hr->kvr", onehot - pi[None], env.psi).reshape(len(o), -1)
    rew = (o == env.target).all(-1).astype(float)
    gJ = env.grad_J_batch(np.asarray(theta)[None])[0].ravel()
    return (logp - logpb)[None], logpb[None], rew[None], S[None], gJ


def exact_budget_per_sample(log_ratio, log_p_b, rewards, scores, grad_J, G: int, eps: float, estimator: str) -> dict:
    """§9's terms of a per-sample scheme (:func:`per_sample_schemes`) at any G >= 2 without enumerating groups:
    ``b_sq`` and ``V_b`` from the G-free conditional means, ``S_w`` by Proposition 9.2 (:func:`hoeffding`)."""
    if estimator not in per_sample_schemes(rewards):
        raise ValueError(f"{estimator!r} is not a per-sample scheme on these rewards; per-sample: "
                         f"{', '.join(per_sample_schemes(rewards))}")
    if G < 2:
        raise ValueError(f"leave-one-out advantages need G >= 2, got G = {G}")
    c = per_outcome_weights(estimator, log_ratio, rewards, eps)
    h = hoeffding(log_ratio, log_p_b, rewards, scores, c)
    mbar = h["mu"].mean(0)
    bias = mbar - np.asarray(grad_J, float).ravel()
    z1, z2 = float(h["zeta1"].mean()), float(h["zeta2"].mean())
    return {"bias": bias, "b_sq": float(bias @ bias), "V_b": float(np.mean(((h["mu"] - mbar) ** 2).sum(-1))),
            "zeta1": z1, "zeta2": z2, "S_w": 4 * z1 + 2 * (z2 - 2 * z1) / (G - 1)}
