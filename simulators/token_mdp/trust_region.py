"""Trust Region Masking's quantities on E2, exact: the surrogate's error and the divergences its bounds read.

For a policy pair (pi_theta, pi_roll = pi_b) on a :class:`~simulators.token_mdp.TokenTreeMDP` (responses of
H = T tokens, reward in [0, 1] paid at the end), every quantity of :mod:`bounds.trust_region` is a finite sum
over the V^H responses and the tree's nodes (each node is a context ``c_t``; every node is reached with
positive probability under both policies, so the maxima run over all of them):

* ``J``, ``J_roll``; the surrogate ``L = E_roll[R sum_t (rho_t - 1)]`` (the paper's ``L'``: its ``L`` with
  baseline ``b = J(pi_roll)``) and ``error = J - J_roll - L``;
* ``delta = max_c KL(pi_roll(.|c) || pi_theta(.|c))``, ``eps = max_c TV``, ``kl_seq = KL(P^roll || P^theta)``,
  ``tv_seq = TV(P^roll, P^theta)`` over whole responses, ``dbar[t] = E_{c_t ~ d_t^roll} TV(c_t)``.

The bounds need rewards in [0, 1]: every E2 environment has them (THEORY A1, checked when it is built).
"""
from __future__ import annotations

import numpy as np
from scipy.special import log_softmax

from .env import TokenTreeMDP


def node_divergences(env: TokenTreeMDP, theta, theta_b) -> tuple[np.ndarray, np.ndarray]:
    """``(kl, tv)``, one value per logit row (context): ``KL(pi_b(.|c) || pi_theta(.|c))`` and the total
    variation between the two next-token distributions."""
    lq = log_softmax(env.check_theta(theta), axis=-1)
    lb = log_softmax(env.check_theta(theta_b, "theta_b"), axis=-1)
    pb = np.exp(lb)
    kl = np.maximum((pb * (lb - lq)).sum(-1), 0.0)
    tv = 0.5 * np.abs(np.exp(lq) - pb).sum(-1)
    return kl, tv


def trust_region_terms(env: TokenTreeMDP, theta, theta_b) -> dict:
    """Every exact quantity of the module docstring for theta (pi_theta) and theta_b (pi_roll)."""
    if not isinstance(env, TokenTreeMDP):
        raise ValueError(f"env must be a TokenTreeMDP (E2), got {type(env).__name__}")
    lp, lpb = env.token_log_probs(env.check_theta(theta)), env.token_log_probs(env.check_theta(theta_b, "theta_b"))
    p, pb, r = np.exp(lp.sum(-1)), np.exp(lpb.sum(-1)), env.rewards
    J, J_roll = float(p @ r), float(pb @ r)
    L = float((pb * r) @ np.expm1(lp - lpb).sum(-1))
    kl, tv = node_divergences(env, theta, theta_b)
    used = np.unique(env.nodes)  # every context of the tree
    return {"T": int(env.H), "J": J, "J_roll": J_roll, "L": L, "error": J - J_roll - L,
            "delta": float(kl[used].max()), "eps": float(tv[used].max()),
            "kl_seq": float(max(pb @ (lpb - lp).sum(-1), 0.0)), "tv_seq": float(0.5 * np.abs(p - pb).sum()),
            "dbar": pb @ tv[env.nodes]}


__all__ = ["node_divergences", "trust_region_terms"]
