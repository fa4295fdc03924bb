"""E1: the K-armed softmax bandit of THEORY §6, one prompt or several.

pi_theta = softmax(theta), score s_k = e_k - pi_theta, rewards r in [0, 1]^K,
grad J = sum_k pi_k r_k (e_k - pi). With several prompts (theta and rewards of shape
``(Q, K)``) a prompt is drawn uniformly, J is the average over prompts and prompt q's
gradient block is row q, scaled by 1/Q.
"""
from __future__ import annotations

import numpy as np
from scipy.special import log_softmax, softmax

from estimators._compat import renamed_keywords

from .._validate import check_rewards, finite_array
from ..core import MAX_ENTRIES, OutcomeEnv


class SoftmaxBandit(OutcomeEnv):
    """E1 environment. Owns its generator (``seed``) for Monte Carlo draws.

    >>> env = SoftmaxBandit([1.0, 0.0])
    >>> env.grad_J(np.zeros(2)).tolist()
    [0.25, -0.25]
    """

    def __init__(self, rewards, seed: int | None = 0):
        r = finite_array(rewards, "rewards", ndim=(1, 2))
        if r.shape[-1] < 2:
            raise ValueError(f"a bandit needs K >= 2 arms, got rewards of shape {r.shape}")
        self.rewards = check_rewards(r, r.shape)
        self.theta_shape = r.shape
        self.K = r.shape[-1]
        self.n_prompts = 1 if r.ndim == 1 else r.shape[0]
        self.reseed(seed)

    # ground truth
    @staticmethod
    def log_probs(theta):
        return log_softmax(np.asarray(theta, dtype=np.float64), axis=-1)

    @staticmethod
    def scores(theta):
        """``(..., K, K)``: row k is s_k = e_k - pi_theta."""
        pi = softmax(np.asarray(theta, dtype=np.float64), axis=-1)
        K = pi.shape[-1]
        return np.eye(K) - pi[..., None, :]

    def J(self, theta):
        """Objective, mean over prompts; ``theta`` may carry leading batch axes."""
        pi = softmax(np.asarray(theta, dtype=np.float64), axis=-1)
        v = (pi * self.rewards).sum(-1)
        return v.mean(-1) if self.n_prompts > 1 else v

    def grad_J(self, theta):
        """Exact gradient, shape of ``theta`` (leading batch axes allowed)."""
        pi = softmax(np.asarray(theta, dtype=np.float64), axis=-1)
        pr = pi * self.rewards
        return (pr - pi * pr.sum(-1, keepdims=True)) / self.n_prompts

    def arrays(self, theta, theta_b):
        """Per-prompt outcome arrays ``(Q, K)``, ``(Q, K)``, ``(Q, K)``, ``(Q, K, K)``."""
        lp, lpb = self.log_probs(theta), self.log_probs(theta_b)
        Q = self.n_prompts
        return (
            (lp - lpb).reshape(Q, self.K),
            lpb.reshape(Q, self.K),
            self.rewards.reshape(Q, self.K),
            self.scores(theta).reshape(Q, self.K, self.K),
        )


def rare_arm_instance(K: int = 4, p_rare: float = 0.02, boost: float = 3.0):
    """The rare-arm variant of THEORY §6: arm 0 has pi_b(0) = p_rare and w_0 = exp(boost)-ish.

    Returns ``(theta, theta_b, rewards)``: arm 0 is the only rewarded arm; the current
    policy raises its logit by ``boost`` (heavy ratio tails, approaching E4's worst case).
    """
    if not 0 < p_rare < 1:
        raise ValueError(f"p_rare must lie in (0, 1), got {p_rare!r}")
    theta_b = np.zeros(K)
    theta_b[0] = np.log(p_rare * (K - 1) / (1 - p_rare))
    theta = theta_b.copy()
    theta[0] += boost
    rewards = np.zeros(K)
    rewards[0] = 1.0
    return theta, theta_b, rewards


@renamed_keywords(scheme="estimator")  # deprecated 2026-12-07, removed after 2027-06-01
def exact_moments(theta, theta_b, rewards, G, eps, estimator, advantage="loo", max_entries=MAX_ENTRIES):
    """Exact moments of ``scheme``'s estimator on E1, by enumerating count vectors.

    Args:
        theta, theta_b: current and behaviour logits, shape ``(K,)`` or ``(Q, K)``.
        rewards: in [0, 1], shape of ``theta``.
        G: group size (>= 2 for leave-one-out advantages); eps > 0; scheme: a name of
            :data:`estimators.SCHEMES`; advantage: ``loo`` (default), ``grpo``, ``drgrpo``.

    Returns a dict with ``mean_grad`` and ``grad_J`` (shape of ``theta``),
    ``second_moment`` = E||g_hat||^2, ``max_norm`` = max over count vectors of ||g_hat||,
    and ``bias`` (E[g_hat(c) - g_hat(w)]), ``bias_norm``, ``mass_bias`` (THEORY §3's m),
    ``sigma2``, ``mu4``, ``M``, ``n_configs``. Raises ``ValueError`` for bad input or an
    enumeration over ``max_entries`` weight entries.

    >>> r = exact_moments([0.5, 0.0, -0.5], [0.0, 0.0, 0.0], [1.0, 0.0, 0.5], 4, 0.2, "is")
    >>> bool(np.allclose(r["mean_grad"], r["grad_J"], atol=1e-12))
    True
    """
    return SoftmaxBandit(rewards).exact_moments(theta, theta_b, G, eps, estimator, advantage, max_entries)


@renamed_keywords(scheme="estimator")  # deprecated 2026-12-07, removed after 2027-06-01
def mc_moments(theta, theta_b, rewards, G, eps, estimator, n_groups, seed, advantage="loo"):
    """Monte Carlo version of :func:`exact_moments` from ``n_groups`` groups.

    Same keys, plus ``mean_grad_se``, ``second_moment_se`` and ``mass_bias_se`` (standard
    errors); ``max_norm`` is the largest ||g_hat|| drawn. Deterministic given ``seed``.
    """
    from ..core import check_mc_args

    check_mc_args(G, eps, n_groups, seed)
    return SoftmaxBandit(rewards, seed).mc_moments(theta, theta_b, G, eps, estimator, n_groups, advantage)


@renamed_keywords(schemes="estimator_names")  # deprecated 2026-12-07, removed after 2027-06-01
def exact_all(theta, theta_b, rewards, G, eps, estimator_names, advantage="loo", max_entries=MAX_ENTRIES):
    """:func:`exact_moments` for several schemes sharing one enumeration: ``{scheme: dict}``."""
    return SoftmaxBandit(rewards).exact_all(theta, theta_b, G, eps, estimator_names, advantage, max_entries)


@renamed_keywords(scheme="estimator")  # deprecated 2026-12-07, removed after 2027-06-01
def per_sample_moments(theta, theta_b, rewards, G, eps, estimator):
    """Exact moments of a per-sample scheme (is, stale, tic_mask, tic_trunc), leave-one-out, any G."""
    return SoftmaxBandit(rewards).per_sample_moments(theta, theta_b, G, eps, estimator)
