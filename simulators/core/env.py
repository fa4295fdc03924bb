"""The base class of the finite-outcome environments (E1, E2): exact and Monte Carlo moments from
an environment's outcome arrays. An environment owns its generator."""

from __future__ import annotations

import numpy as np

from estimators import get_scheme

from .counts import MAX_ENTRIES
from .exact import bound_M, exact_batch, per_sample_batch, ratio_moments
from .montecarlo import MCGroups, check_mc_args, draw_counts, mc_groups, mc_stats


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
        from .._validate import finite_array

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

    def exact_all(self, theta, theta_b, G, eps, estimator_names, advantage="loo", max_entries=MAX_ENTRIES):
        """Exact moments of several schemes at once (the enumeration is shared)."""
        for s in estimator_names:
            get_scheme(s)
        theta, theta_b = self.check_theta(theta), self.check_theta(theta_b, "theta_b")
        lr, lpb, rew, S = self.arrays(theta, theta_b)
        raw = exact_batch(lr, lpb, rew, S, G, eps, estimator_names, advantage, max_entries)
        common = self._common(theta, theta_b, lr, lpb, rew, S)
        out = {}
        for s in estimator_names:
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

    def exact_moments(self, theta, theta_b, G, eps, estimator, advantage="loo", max_entries=MAX_ENTRIES):
        """Exact ``mean_grad``, ``grad_J``, ``second_moment``, ``max_norm`` (plus ``bias``,
        ``bias_norm``, ``mass_bias``, ``sigma2``, ``mu4``, ``M``, ``n_configs``)."""
        return self.exact_all(theta, theta_b, G, eps, [estimator], advantage, max_entries)[estimator]

    def per_sample_moments(self, theta, theta_b, G, eps, estimator):
        """Exact moments of a per-sample scheme with leave-one-out advantages, any G (no max_norm)."""
        theta, theta_b = self.check_theta(theta), self.check_theta(theta_b, "theta_b")
        lr, lpb, rew, S = self.arrays(theta, theta_b)
        r = per_sample_batch(lr, lpb, rew, S, G, eps, estimator)
        bias = self._full(r["bias"])
        return {
            "mean_grad": self._full(r["mean_grad"]),
            "second_moment": float(r["second_moment"].mean()),
            "bias": bias,
            "bias_norm": float(np.linalg.norm(bias)),
            "mass_bias": float(r["mass_bias"].mean()),
            **self._common(theta, theta_b, lr, lpb, rew, S),
        }

    def mc_moments(self, theta, theta_b, G, eps, estimator, n_groups, advantage="loo"):
        """Monte Carlo estimates with standard errors from ``n_groups`` groups drawn with ``self.rng``.

        Keys: those of :meth:`exact_moments` (``max_norm`` over the groups drawn) plus
        ``mean_grad_se``, ``second_moment_se``, ``mass_bias_se``.
        """
        get_scheme(estimator)
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
            blocks.append(mc_groups(counts, lr[b], rew[b], S[b], eps, estimator, advantage))
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
