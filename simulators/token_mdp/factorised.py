"""E2 at long horizons: the position-factorised token MDP with an all-or-nothing terminal reward.

``pi_theta(o) = prod_h softmax(theta[h])[o_h]`` over ``V^H`` sequences, and the reward is
``1{o = target}``: one terminal reward that needs *every* token right. This is what makes the
LLM's scratchpad task hard (H = 18 tokens, one reward at the end): the trajectory ratio is the
product of H token ratios, so at a given per-token drift its chi^2 is
``prod_h (1 + chi^2_h) - 1`` and grows exponentially in H (THEORY claim 18), while the signal
(how often a group sees a reward) is the probability of the whole sequence.

Exactness. Every quantity a run records is an exact sum over the ``V^H`` outcomes (65536 at
V = 2, H = 16), never a sample, except where a group-coupled weight makes the sum a sum over
groups (below):

* ``J`` and ``grad J`` are the enumeration sums ``sum_o pi(o) r(o)`` and
  ``sum_o pi(o) r(o) s(o)``; with one rewarded sequence they equal ``prod_h pi_h(t_h)`` and
  ``J (e_{t_h} - pi_h)`` row by row, which is how they are evaluated (the tests check both
  against :class:`~simulators.token_mdp.TokenTreeMDP`'s enumeration);
* ``sigma^2 = E_b w^2 - 1`` and ``mu_4 = E_b (w-1)^4`` from the per-position moments
  ``E_b rho_h^k`` (the ratio factorises over positions), written in ``expm1``/``log1p`` form so
  that they are accurate, and exactly 0, at zero drift;
* the bias ``b = E[g_hat(c) - g_hat(w)]`` of a per-sample scheme (``c_i = c(w_i)``: stale,
  TIC-mask, TIC-trunc, IS) by enumerating the ``V^H`` outcomes:
  ``b = E_b[(c(w) - w)(r - E_b r) s]`` (THEORY §6), vectorised over runs;
* the bias of a group-coupled scheme (GMC, SNIS, TOPR, ...) needs the law of the whole group:
  there is no enumeration of ``C(G + V^H - 1, G)`` groups, so it is a Monte Carlo mean of
  ``g_hat(c) - g_hat(w)`` over ``n_mc`` groups drawn from ``pi_b`` (the IS estimate on the same
  groups as control: the difference is 0 on every group the scheme leaves alone), with its
  standard error.

Scores: ``s(o) = onehot(o) - pi_theta``, flattened to ``H * V``; the bound ``M`` of A2 is
``(max r - min r) max_o ||s(o)||`` with the max taken position by position.
"""
from __future__ import annotations

import numpy as np
from scipy.special import log_softmax, softmax

import estimators
from estimators import get_scheme

from .._validate import check_positive_int
from ..core import PER_SAMPLE_SCHEMES
from .env import TokenTreeMDP, outcomes, reward_vector

MAX_H_ENUMERATION = 20
"""Largest horizon enumerated (V^H outcomes per run; 2^16 = 65536 is the design point)."""


class FactorisedTokenMDP(TokenTreeMDP):
    """E2, ``param="position"``, reward ``1{o = target}``, with batched exact sums over runs.

    ``theta`` of a batch of runs has shape ``(B, H, V)``.

    >>> env = FactorisedTokenMDP(2, 3)
    >>> round(float(env.J_batch(np.zeros((1, 3, 2)))[0]), 6)
    0.125
    """

    def __init__(self, V: int, H: int, target=None, seed: int | None = 0):
        V = check_positive_int(V, "V (vocabulary size)", 2)
        H = check_positive_int(H, "H (horizon)", 1)
        if V**H > V**MAX_H_ENUMERATION or H > MAX_H_ENUMERATION:
            raise ValueError(f"H = {H} is over the enumeration limit H <= {MAX_H_ENUMERATION}")
        self.target = np.ones(H, dtype=np.int64) if target is None else np.asarray(target, dtype=np.int64)
        super().__init__(V, H, "position", reward_vector("target", V, H, target=self.target), seed)
        o = outcomes(V, H)
        self.onehot = np.zeros((self.K, H * V))  # onehot[k, h V + v] = 1{o_h = v}
        self.onehot[np.arange(self.K)[:, None], np.arange(H) * V + o] = 1.0
        self.target_index = int(np.flatnonzero(self.rewards)[0])
        self.bits = o.astype(np.float64).T.copy() if V == 2 else None  # (H, K): o_h in {0, 1}

    # ------------------------------------------------------------------ exact sums per run

    def _lp(self, theta):
        return log_softmax(np.asarray(theta, dtype=np.float64), axis=-1)

    def outcome_log_probs(self, theta) -> np.ndarray:
        """``(B, V^H)``: log pi_theta(o) of every outcome, for every run."""
        lp = self._lp(theta)
        if self.bits is not None:  # V = 2: log pi(o) = sum_h lp[h, 0] + sum_h o_h (lp[h, 1] - lp[h, 0])
            return lp[..., 0].sum(-1)[:, None] + (lp[..., 1] - lp[..., 0]) @ self.bits
        return lp.reshape(lp.shape[0], -1) @ self.onehot.T

    def J_batch(self, theta) -> np.ndarray:
        """``(B,)``: J = sum_o pi(o) 1{o = target} = prod_h pi_h(target_h)."""
        lp = self._lp(theta)
        return np.exp(lp[:, np.arange(self.H), self.target].sum(-1))

    def grad_J_batch(self, theta) -> np.ndarray:
        """``(B, H, V)``: grad J = sum_o pi(o) r(o) s(o) = J (e_{target_h} - pi_h) per position."""
        pi = softmax(np.asarray(theta, dtype=np.float64), axis=-1)
        e = np.zeros_like(pi)
        e[:, np.arange(self.H), self.target] = 1.0
        return self.J_batch(theta)[:, None, None] * (e - pi)

    def ratio_moments_batch(self, theta, theta_b):
        """``(sigma^2, mu_4)`` of the trajectory ratio under pi_b, each ``(B,)``, from
        ``E_b w^k = prod_h E_b rho_h^k``: with ``a_{k,h} = E_b rho_h^k - 1`` and
        ``A_k = E_b w^k - 1 = expm1(sum_h log1p(a_{k,h}))``, ``sigma^2 = A_2`` and
        ``mu_4 = A_4 - 4 A_3 + 6 A_2``."""
        lp, lpb = self._lp(theta), self._lp(theta_b)
        pb, lrho = np.exp(lpb), lp - lpb
        A = {k: np.expm1(np.log1p((pb * np.expm1(k * lrho)).sum(-1)).sum(-1)) for k in (2, 3, 4)}
        return A[2], np.maximum(A[4] - 4 * A[3] + 6 * A[2], 0.0)

    def score_bound(self, theta) -> np.ndarray:
        """``(B,)``: M = (max r - min r) max_o ||s(o)|| (A2), the max over o position by position."""
        pi = softmax(np.asarray(theta, dtype=np.float64), axis=-1)
        per = 1.0 - 2.0 * pi + (pi**2).sum(-1, keepdims=True)  # ||e_v - pi_h||^2
        return np.sqrt(per.max(-1).sum(-1)) * (self.rewards.max() - self.rewards.min())

    def vec_sum(self, f, theta) -> np.ndarray:
        """``(B, H, V)``: ``sum_o f(o) s_theta(o)`` for ``f`` of shape ``(B, V^H)``."""
        pi = softmax(np.asarray(theta, dtype=np.float64), axis=-1)
        total = f.sum(-1)
        if self.bits is not None:  # V = 2: sum_o f(o) 1{o_h = 1}, and the rest for o_h = 0
            ones = f @ self.bits.T
            out = np.stack([total[:, None] - ones, ones], -1)
        else:
            out = (f @ self.onehot).reshape(pi.shape)
        return out - total[:, None, None] * pi

    def per_sample_bias(self, theta, theta_b, G: int, eps: float, estimator: str):
        """Exact ``(bias (B, H, V), mass_bias (B,))`` of a per-sample scheme with leave-one-out
        advantages, by enumerating the outcomes: ``b = E_b[(c(w) - w)(r - E_b r) s]``,
        ``m = E_b(w - c)``."""
        if estimator not in PER_SAMPLE_SCHEMES:
            raise ValueError(f"exact per-sample bias needs a scheme of {PER_SAMPLE_SCHEMES}, got {estimator!r}")
        lp, lpb = self.outcome_log_probs(theta), self.outcome_log_probs(theta_b)
        lr = lp - lpb
        B = lr.shape[0]
        c = estimators.weights(estimator, lr.reshape(-1, 1), eps).reshape(B, self.K)
        w = np.exp(lr)
        pb = np.exp(lpb)
        rho = pb[:, self.target_index]  # E_b r
        f = pb * (c - w) * (self.rewards[None] - rho[:, None])
        return self.vec_sum(f, theta), (pb * (w - c)).sum(-1)

    # ------------------------------------------------------------------ groups

    def sample_tokens(self, rng: np.random.Generator, theta_b_row, shape) -> np.ndarray:
        """Token sequences ``shape + (H,)`` drawn from pi_b (one run's ``theta_b``, ``(H, V)``)."""
        cdf = np.cumsum(softmax(np.asarray(theta_b_row, dtype=np.float64), axis=-1), axis=-1)  # (H, V)
        u = rng.random(tuple(shape) + (self.H,))
        return (u[..., None] > cdf[:, :-1]).sum(-1)

    def group_estimates(self, tokens, theta, theta_b, eps: float, estimator_names, advantage="loo"):
        """Per-group estimates ``g_hat`` of several schemes on the same groups.

        ``tokens``: ``(B, n, G, H)``; returns ``({scheme: g_hat (B, n, H, V)}, {scheme: gap (B, n)})``
        with ``gap = (1/G) sum_i (w_i - c_i)`` (the group's mass bias) and the log-ratios ``(B, n, G)``.
        """
        B, n, G, H = tokens.shape
        lp, lpb = self._lp(theta), self._lp(theta_b)  # (B, H, V)
        lrho = (lp - lpb)[:, None, None, np.arange(H), :]  # (B, 1, 1, H, V)
        lr = np.take_along_axis(np.broadcast_to(lrho, (B, n, G, H, self.V)), tokens[..., None], -1)[..., 0].sum(-1)
        r = (tokens == self.target).all(-1).astype(np.float64)  # (B, n, G)
        A = estimators.advantages(r.reshape(B * n, G), advantage)
        flat = lr.reshape(B * n, G)
        w = np.exp(flat)
        oh = np.zeros((B, n, G, H, self.V))
        np.put_along_axis(oh, tokens[..., None], 1.0, -1)
        pi = softmax(np.asarray(theta, dtype=np.float64), axis=-1)  # (B, H, V)
        out, gap = {}, {}
        for s in estimator_names:
            c = w if s == "is" else estimators.weights(s, flat, eps,
                                                       advantages=A if get_scheme(s).needs_advantages else None)
            cA = (c * A).reshape(B, n, G)
            g = np.einsum("bng,bnghv->bnhv", cA, oh) - cA.sum(-1)[..., None, None] * pi[:, None]
            out[s] = g / G
            gap[s] = (w - c).mean(-1).reshape(B, n)
        return out, gap, lr


def start_logits(V: int, H: int, p: float, target=None) -> np.ndarray:
    """``(H, V)`` logits with the target token at probability ``p`` at every position (so
    ``J(theta_0) = p^H``: a longer sequence is harder to get right, as a longer completion is) and
    the other tokens equally likely."""
    if not (1.0 / V < p < 1):
        raise ValueError(f"p (the target token's start probability) must be in (1/V, 1), got {p!r}")
    t = np.ones(H, dtype=np.int64) if target is None else np.asarray(target, dtype=np.int64)
    theta = np.full((H, V), np.log((1 - p) / (V - 1)))
    theta[np.arange(H), t] = np.log(p)
    return theta


__all__ = ["MAX_H_ENUMERATION", "FactorisedTokenMDP", "start_logits"]
