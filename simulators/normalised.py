"""THEORY §8 computed exactly: per-coordinate sign laws of every group estimator, and parameter
paths under normalising optimisers with a scale hook.

* :func:`coordinate_sign_law`: for one instance (E1's arms, E2's sequences, or the types of the
  long-horizon E2 below), by count-vector enumeration of the group: per coordinate j the exact
  ``E g_j``, ``E g_j^2``, ``P(sign(grad_j J) g_j <= 0)`` (Cantelli's event), ``P(g_j = 0)`` and the
  sign efficiency ``E <grad J, sign g> / ||grad J||_1`` (signSGD's first-order ascent per unit).
* :func:`fixed_baseline_moments`: the iid (fixed-baseline) form of a per-sample scheme, exact
  outcome sums: ``mu_j = E_b[c X_j]``, ``E_b[c^2 X_j^2]``, ``X = (r - E_b r) s``.
* :func:`long_e2_types`: the long-horizon E2 (position-factorised, V = 2, reward 1{all H tokens
  right}) at a position-symmetric pair (theta, theta_b), reduced exactly to the 2H types
  (token at position 0, number of right tokens at the other H - 1 positions): a trajectory's
  ratio, reward and position-0 score depend on its type only, so the law of the position-0
  coordinates of every group estimator is the law on types (enumerable at H = 16, G = 4).
* :func:`invariance_paths`: asynchronous runs on the long-horizon E2 where each step's gradient is
  a function of the batch's per-group IS estimates and GMC scales (the hook), under
  :mod:`simulators.optim`'s optimisers; two paths are compared bit for bit.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln, log_softmax, softmax

from estimators import get_scheme, gmc_lambda

from .core.counts import configurations
from .core.groups import _chunks, group_terms
from .optim import Optimizer, OptimizerConfig

ZERO_REL = 1e-12
"""A coordinate of g_hat counts as 0 when |g_j| <= ZERO_REL max_o ||s(o)||: exact zeros (every
advantage 0) come out exactly 0; this only absorbs cancellations at the rounding level."""


def group_schemes(names=None) -> list[str]:
    """Every registered trajectory scheme whose groups are independent (batch-coupled ones excluded)."""
    from estimators import SCHEMES

    names = list(SCHEMES) if names is None else list(names)
    return [s for s in names if not get_scheme(s).batch_coupled]


def coordinate_sign_law(log_ratio, log_p_b, rewards, scores, grad, G: int, eps: float, estimator_names,
                        advantage: str = "loo") -> dict:
    """Exact per-coordinate moments and sign probabilities of each scheme's g_hat (module docstring).

    ``log_ratio``, ``log_p_b``, ``rewards``: ``(K,)``; ``scores`` ``(K, P)``; ``grad`` ``(P,)`` the exact
    grad J. Returns ``{scheme: {"mean", "m2", "p_le0", "p_zero", "p_wrong" (P,), "sign_eff"}}`` plus
    ``"_prob_total"``.
    """
    lr = np.asarray(log_ratio, float)[None]
    lpb = np.asarray(log_p_b, float)[None]
    rew = np.asarray(rewards, float)[None]
    S = np.asarray(scores, float)
    grad = np.asarray(grad, float)
    K, P = S.shape
    counts, tuples, log_coef = configurations(int(G), K)
    pmf = np.exp(log_coef + counts @ lpb[0])
    sg = np.sign(grad)
    tol = ZERO_REL * float(np.sqrt((S**2).sum(-1)).max())
    acc = {s: {k: np.zeros(P) for k in ("mean", "m2", "p_le0", "p_zero", "p_wrong")} for s in estimator_names}
    for sl in _chunks(len(counts), G * max(P, 1)):
        terms = group_terms(tuples[None, sl], lr, rew, eps, list(estimator_names), advantage, with_gap=False)
        pm = pmf[sl]
        for s in estimator_names:
            g = (terms.coef(s)[0] @ S) / G  # (n, P)
            zero = np.abs(g) <= tol
            signed = np.where(zero, 0.0, g) * sg
            a = acc[s]
            a["mean"] += pm @ g
            a["m2"] += pm @ g**2
            a["p_le0"] += pm @ (signed <= 0)
            a["p_zero"] += pm @ zero
            a["p_wrong"] += pm @ (signed < 0)
    l1 = float(np.abs(grad).sum())
    out = {}
    for s, a in acc.items():
        right = 1.0 - a["p_le0"]
        a["sign_eff"] = float((np.abs(grad) * (right - a["p_wrong"])).sum() / l1) if l1 > 0 else math.nan
        out[s] = a
    out["_prob_total"] = float(pmf.sum())
    return out


def fixed_baseline_moments(log_ratio, log_p_b, rewards, scores, eps: float, estimator: str) -> dict:
    """Per-coordinate ``mu = E_b[c(w) X]`` and ``a = E_b[c(w)^2 X^2]`` with ``X = (r - E_b r) s``
    (exact outcome sums) for a per-sample scheme; the iid estimator's Cantelli quantity at group
    size G is ``(a - mu^2) / (a + (G-1) mu^2)``."""
    import estimators

    lr = np.asarray(log_ratio, float)
    p = np.exp(np.asarray(log_p_b, float))
    r = np.asarray(rewards, float)
    S = np.asarray(scores, float)
    c = estimators.weights(estimator, lr.reshape(-1, 1), eps).ravel()
    X = (r - (p * r).sum())[:, None] * S
    return {"mean": (p * c) @ X, "a": (p * c**2) @ X**2}


def long_e2_types(H: int, p_b: float, delta: float) -> dict:
    """The long-horizon E2 (V = 2, target token 1 at every position) at theta_b with the target at
    probability ``p_b`` at every position and theta = theta_b with the target's logit raised by
    ``delta`` at every position, reduced to the 2H types of position 0 (module docstring).

    Returns ``log_ratio``, ``log_p_b``, ``rewards`` (2H,), ``scores`` (2H, 2) (position 0's two
    coordinates), ``grad`` (2,) (exact grad J at position 0), ``J``, ``sigma2`` (exact trajectory
    chi^2) and ``M`` (A2's bound for the whole parameter vector)."""
    if not (0 < p_b < 1):
        raise ValueError(f"p_b must lie in (0, 1), got {p_b!r}")
    tb = np.array([np.log(1 - p_b), np.log(p_b)])
    th = tb + np.array([0.0, delta])
    lpb, lp = log_softmax(tb), log_softmax(th)
    lrho = lp - lpb
    pi = softmax(th)
    rows = []
    for b in (0, 1):
        for k in range(H):
            n = b + k  # right tokens in the whole sequence
            lw = n * lrho[1] + (H - n) * lrho[0]
            lpk = lpb[b] + gammaln(H) - gammaln(k + 1) - gammaln(H - k) + k * lpb[1] + (H - 1 - k) * lpb[0]
            rows.append((lw, lpk, float(n == H), b))
    lw, lpk, rew, bit = map(np.array, zip(*rows))
    scores = np.stack([(bit == 0) - pi[0], (bit == 1) - pi[1]], -1).astype(float)
    J = float(np.exp(H * lp[1]))
    grad = J * (np.array([0.0, 1.0]) - pi)
    chi2_1 = float((np.exp(lpb) * np.expm1(2 * lrho)).sum())
    sigma2 = float(np.expm1(H * np.log1p(chi2_1)))
    per = 1.0 - 2.0 * pi + (pi**2).sum()
    return {"log_ratio": lw, "log_p_b": lpk, "rewards": rew, "scores": scores, "grad": grad, "J": J,
            "sigma2": sigma2, "M": float(np.sqrt(H * per.max()))}


# --------------------------------------------------------------------- paths with a scale hook


class SignSGD:
    """signSGD (ascent): ``theta + lr sign(g)``, with :class:`simulators.optim.Optimizer`'s interface.

    It is Adam with beta1 = beta2 = 0 and eps -> 0 (m = g, sqrt(v) = |g|), but computed as a sign:
    ``lr g / |g|`` rounds differently for different mantissas of g, ``lr sign(g)`` does not."""

    def __init__(self, lr: float):
        if not (np.isfinite(lr) and lr > 0):
            raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
        self.lr = float(lr)

    def step(self, theta: np.ndarray, g: np.ndarray) -> np.ndarray:
        return theta + self.lr * np.sign(g)


def invariance_paths(transform, cfg: OptimizerConfig | SignSGD, *, H: int = 8, p: float = 0.8, G: int = 8,
                     groups: int = 1, eps: float = 0.2, d: int = 8, T: int = 60, seed: int = 0,
                     estimator: str = "is") -> dict:
    """One asynchronous run on the long-horizon E2 (V = 2) whose step is
    ``opt.step(theta, transform(t, g, lam))``: ``g`` ``(groups, H, 2)`` the per-group estimates of
    ``scheme`` (one group per row; the batch's gradient is their mean), ``lam`` ``(groups,)`` GMC's
    scales on the raw ratios. Returns ``theta`` ``(T+1, H, 2)`` and ``lam`` ``(T, groups)``."""
    from .token_mdp.factorised import FactorisedTokenMDP, start_logits

    env = FactorisedTokenMDP(2, H)
    rng = np.random.default_rng([seed, d, groups])
    theta = start_logits(2, H, p)[None]
    hist = [theta.copy()]
    opt = cfg if isinstance(cfg, SignSGD) else Optimizer(cfg, theta)
    lams = np.zeros((T, groups))
    for t in range(T):
        tb = hist[max(0, len(hist) - 1 - d)]
        tokens = env.sample_tokens(rng, tb[0], (1, groups, G))  # (1, groups, G, H)
        g, _, lr = env.group_estimates(tokens, theta, tb, eps, [estimator])
        lam = np.asarray(gmc_lambda(lr.reshape(groups, G), eps)).ravel()
        lams[t] = lam
        step = np.asarray(transform(t, g[estimator][0], lam), float)[None]
        theta = opt.step(theta, step)
        hist.append(theta.copy())
    return {"theta": np.concatenate(hist), "lam": lams}


def path_gap(a: dict, b: dict) -> float:
    """``max |theta_a - theta_b|`` over the two paths (0.0: identical bit for bit)."""
    return float(np.abs(a["theta"] - b["theta"]).max())


__all__ = [
    "SignSGD",
    "coordinate_sign_law",
    "fixed_baseline_moments",
    "group_schemes",
    "invariance_paths",
    "long_e2_types",
    "path_gap",
]
