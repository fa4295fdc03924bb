"""E2: the token-level tree MDP of THEORY §6.

A response is a sequence ``o = (o_1..o_H)`` over a vocabulary of V tokens, so the
outcome space is ``V^H`` (enumerated in lexicographic order, :func:`outcomes`). Logits:

* ``param="tabular"``: one row of V logits per prefix (node), ``(V^H - 1)/(V - 1)`` rows;
* ``param="position"``: one row per position h (factorised policy), H rows.

``pi_theta(o) = prod_h softmax(theta[node_h])[o_h]``; the trajectory ratio is the product
of token ratios; ``grad log pi_theta(o) = sum_h (e_{o_h} - pi(.|node_h))`` placed in node
h's row. Rewards are a vector over the ``V^H`` outcomes (:func:`reward_vector`).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy.special import log_softmax, softmax

from estimators._compat import renamed_keywords

from .._validate import check_positive_int, check_rewards, finite_array
from ..core import MAX_ENTRIES, OutcomeEnv

PARAMS = ("tabular", "position")


@lru_cache(maxsize=32)
def outcomes(V: int, H: int) -> np.ndarray:
    """All ``V^H`` token sequences, lexicographic, shape ``(V^H, H)`` (read-only)."""
    grids = np.indices((V,) * H).reshape(H, -1).T
    grids.setflags(write=False)
    return grids


@lru_cache(maxsize=32)
def node_index(V: int, H: int, param: str) -> np.ndarray:
    """``(V^H, H)``: the logit row used at position h of each outcome."""
    o = outcomes(V, H)
    if param == "position":
        idx = np.broadcast_to(np.arange(H), o.shape).copy()
    else:  # tabular: prefixes of length h are numbered after the (V^h - 1)/(V - 1) shorter ones
        idx = np.zeros_like(o)
        code = np.zeros(len(o), dtype=np.int64)
        offset = 0
        for h in range(H):
            idx[:, h] = offset + code
            offset += V**h
            code = code * V + o[:, h]
    idx.setflags(write=False)
    return idx


def n_nodes(V: int, H: int, param: str) -> int:
    return H if param == "position" else (V**H - 1) // (V - 1)


def reward_vector(kind: str, V: int, H: int, target=None, threshold: int | None = None) -> np.ndarray:
    """Rewards over :func:`outcomes`: ``target`` (1{o = target}), ``threshold``
    (1{sum_h o_h >= threshold}) or ``parity`` (1{sum_h o_h odd})."""
    o = outcomes(V, H)
    if kind == "target":
        t = np.zeros(H, dtype=np.int64) if target is None else np.asarray(target)
        if t.shape != (H,) or (t < 0).any() or (t >= V).any():
            raise ValueError(f"target must be a length-{H} token sequence over 0..{V - 1}, got {target!r}")
        return (o == t).all(-1).astype(np.float64)
    if kind == "threshold":
        k = (V - 1) * H // 2 + 1 if threshold is None else threshold
        return (o.sum(-1) >= k).astype(np.float64)
    if kind == "parity":
        return (o.sum(-1) % 2).astype(np.float64)
    raise ValueError(f"unknown reward kind {kind!r}; valid: target, threshold, parity")


class TokenTreeMDP(OutcomeEnv):
    """E2 environment over ``V^H`` sequences; owns its generator for Monte Carlo draws.

    >>> mdp = TokenTreeMDP(2, 3, "position", reward_vector("parity", 2, 3))
    >>> mdp.theta_shape, mdp.K
    ((3, 2), 8)
    """

    def __init__(self, V: int, H: int, param: str, rewards, seed: int | None = 0):
        self.V = check_positive_int(V, "V (vocabulary size)", 2)
        self.H = check_positive_int(H, "H (horizon)", 1)
        if param not in PARAMS:
            raise ValueError(f"param must be one of {PARAMS}, got {param!r}")
        self.param = param
        self.K = self.V**self.H
        self.rewards = check_rewards(finite_array(rewards, "rewards", ndim=(1,)), (self.K,))
        self.theta_shape = (n_nodes(self.V, self.H, param), self.V)
        self.nodes = node_index(self.V, self.H, param)
        self.tokens = outcomes(self.V, self.H)
        self.reseed(seed)

    @classmethod
    def from_rewards(cls, theta, rewards, param: str, seed: int | None = 0):
        """Infer V from ``theta``'s last axis and H from ``len(rewards) = V^H``."""
        theta = np.asarray(theta)
        r = np.asarray(rewards)
        if theta.ndim != 2 or theta.shape[1] < 2:
            raise ValueError(f"theta must have shape (n_nodes, V) with V >= 2, got {theta.shape}")
        V = theta.shape[1]
        H = round(float(np.log(max(r.size, 1)) / np.log(V)))
        if r.ndim != 1 or H < 1 or V**H != r.size:
            raise ValueError(f"rewards must be a vector over the V^H outcomes (V = {V}), got length {r.size}")
        return cls(V, H, param, r, seed)

    def token_log_probs(self, theta):
        """``(..., V^H, H)``: log pi(o_h | node_h) for every outcome and position."""
        lp = log_softmax(np.asarray(theta, dtype=np.float64), axis=-1)  # (..., n_nodes, V)
        return lp[..., self.nodes, self.tokens]

    def log_probs(self, theta):
        return self.token_log_probs(theta).sum(-1)

    def scores(self, theta):
        """``(..., V^H, n_nodes * V)``: grad log pi_theta(o), one row per outcome."""
        theta = np.asarray(theta, dtype=np.float64)
        lead = theta.shape[:-2]
        pi = softmax(theta, axis=-1)  # (..., n_nodes, V)
        n, V = self.theta_shape
        S = np.zeros(lead + (self.K, n, V))
        k = np.arange(self.K)[:, None]
        # e_{o_h} - pi(.|node_h) in row node_h (nodes of one outcome are distinct)
        S[..., k, self.nodes, :] = -pi[..., self.nodes, :]
        S[..., k, self.nodes, self.tokens] += 1.0
        return S.reshape(lead + (self.K, n * V))

    def J(self, theta):
        return (np.exp(self.log_probs(theta)) * self.rewards).sum(-1)

    def grad_J(self, theta):
        """E_pi[r grad log pi], shape of ``theta`` (leading batch axes allowed)."""
        theta = np.asarray(theta, dtype=np.float64)
        p = np.exp(self.log_probs(theta))
        g = np.einsum("...k,...kp->...p", p * self.rewards, self.scores(theta))
        return g.reshape(theta.shape)

    def arrays(self, theta, theta_b):
        lp, lpb = self.log_probs(theta), self.log_probs(theta_b)
        return (lp - lpb)[None], lpb[None], self.rewards[None], self.scores(theta)[None]

    def position_ratio_moments(self, theta, theta_b):
        """Per position h (``param="position"``): E_b rho_h^2 = sum_v pi_theta(v)^2 / pi_b(v)."""
        if self.param != "position":
            raise ValueError("position_ratio_moments needs param='position'")
        lp = log_softmax(np.asarray(theta, dtype=np.float64), axis=-1)
        lpb = log_softmax(np.asarray(theta_b, dtype=np.float64), axis=-1)
        return np.exp(2 * lp - lpb).sum(-1)


@renamed_keywords(scheme="estimator")  # deprecated 2026-12-07, removed after 2027-06-01
def exact_moments(theta, theta_b, rewards, G, eps, estimator, advantage="loo", param="position",
                  max_entries=MAX_ENTRIES):
    """Exact moments on E2 by enumerating compositions of G over the ``V^H`` outcomes.

    ``theta``, ``theta_b``: ``(n_nodes, V)`` logits; ``rewards``: vector over
    :func:`outcomes` (its length V^H fixes H); ``param``: ``position`` or ``tabular``.
    Keys as :func:`simulators.bandit.exact_moments` (gradients shaped like ``theta``).
    """
    mdp = TokenTreeMDP.from_rewards(theta, rewards, param)
    return mdp.exact_moments(theta, theta_b, G, eps, estimator, advantage, max_entries)


@renamed_keywords(scheme="estimator")  # deprecated 2026-12-07, removed after 2027-06-01
def mc_moments(theta, theta_b, rewards, G, eps, estimator, n_groups, seed, advantage="loo", param="position"):
    """Monte Carlo moments on E2 from ``n_groups`` groups, with standard errors."""
    from ..core import check_mc_args

    check_mc_args(G, eps, n_groups, seed)
    mdp = TokenTreeMDP.from_rewards(theta, rewards, param, seed)
    return mdp.mc_moments(theta, theta_b, G, eps, estimator, n_groups, advantage)


@renamed_keywords(scheme="estimator")  # deprecated 2026-12-07, removed after 2027-06-01
def per_sample_moments(theta, theta_b, rewards, G, eps, estimator, param="position"):
    """Exact moments of a per-sample scheme with leave-one-out advantages, any G (THEORY §6)."""
    mdp = TokenTreeMDP.from_rewards(theta, rewards, param)
    return mdp.per_sample_moments(theta, theta_b, G, eps, estimator)
