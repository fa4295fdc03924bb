"""Asynchronous training on the long-horizon factorised token MDP (E2, H up to 16 and beyond).

The learner of :func:`simulators.delay.async_sgd` (THEORY §1: at step t it holds theta_t and
receives a group drawn from ``pi_{theta_{t - d_t}}``; ratios and scores at theta_t), on
:class:`~simulators.token_mdp.factorised.FactorisedTokenMDP`, whose ``V^H`` outcomes are too
many for count-vector enumeration of groups. The optimiser is any of :mod:`simulators.optim`.

Per run and step it records what :func:`~simulators.delay.async_sgd` records (:data:`RECORDS`):
``J(theta_t)``, ``||grad J(theta_t)||^2``, ``sigma_t^2`` and ``mu_{4,t}`` (all exact sums over the
outcomes), the drift ``||theta_t - theta_{t-d_t}||``, the lag, ``||g_hat_t||``, ``M_t``, the step
norm ``||theta_{t+1} - theta_t||``, and the bias ``b_t = E[g_hat(c) - g_hat(w)]`` at
``(theta_t, theta_{t-d_t})`` with the mass bias ``m_t``: exact by enumerating the outcomes for a
per-sample scheme, a Monte Carlo mean over ``n_mc`` groups for a group-coupled one
(``bias_sq`` is then the unbiased estimate ``||b_hat||^2 - tr Cov(b_hat)``, ``bias_var`` that
trace; 0 when exact). The bias is evaluated every ``bias_every`` steps (NaN between): it is the
costly record (65536 outcomes, or n_mc groups, per run).
"""
from __future__ import annotations

import numpy as np

from ._validate import check_positive_int
from .core import PER_SAMPLE_SCHEMES
from .delay import DELAY_KINDS, AsyncConfig, ParameterHistory
from .delay import RECORDS as SGD_RECORDS
from .optim import Optimizer

RECORDS = (*SGD_RECORDS, "bias_var")


def _norm2(x) -> np.ndarray:
    return (x.reshape(x.shape[0], -1) ** 2).sum(-1)


def step_bias(env, theta, theta_b, cfg: AsyncConfig, rngs_mc, n_mc: int):
    """``(bias_sq, mass_bias, bias_var)`` per run at ``(theta, theta_b)`` (module docstring)."""
    B = theta.shape[0]
    if cfg.estimator == "is":
        return np.zeros(B), np.zeros(B), np.zeros(B)
    if cfg.estimator in PER_SAMPLE_SCHEMES and cfg.advantage == "loo":
        b, m = env.per_sample_bias(theta, theta_b, cfg.G, cfg.eps, cfg.estimator)
        return _norm2(b), m, np.zeros(B)
    tokens = np.stack([env.sample_tokens(rng, tb, (n_mc, cfg.G)) for rng, tb in zip(rngs_mc, theta_b)])
    g, gap, _ = env.group_estimates(tokens, theta, theta_b, cfg.eps, ["is", cfg.estimator], cfg.advantage)
    diff = (g[cfg.estimator] - g["is"]).reshape(B, n_mc, -1)
    mean = diff.mean(1)
    var = diff.var(1, ddof=1).sum(-1) / n_mc
    return (mean**2).sum(-1) - var, gap[cfg.estimator].mean(1), var


def async_factorised(env, theta0, cfg: AsyncConfig, seeds, delays, n_mc: int = 256, bias_every: int = 1) -> dict:
    """Asynchronous training of every (delay d, seed) run at once on a factorised token MDP.

    Run (d, seed) owns two generators, seeded ``(seed, d)`` (its groups) and ``(seed, d, 1)``
    (the Monte Carlo groups of its bias record), so its path depends on nothing else, and two
    schemes or optimisers with the same seed are paired. Returns arrays ``(len(delays),
    len(seeds), T)`` for each of :data:`RECORDS`, ``diverged_at`` and ``theta_T`` as
    :func:`simulators.delay.async_sgd` does.
    """
    theta0 = env.check_theta(theta0, "theta0")
    seeds = [check_positive_int(s, "seed", 0) for s in seeds]
    delays = [check_positive_int(d, "delay d", 0) for d in delays]
    n_mc = check_positive_int(n_mc, "n_mc", 2)
    bias_every = check_positive_int(bias_every, "bias_every", 1)
    if cfg.delay_kind not in DELAY_KINDS:
        raise ValueError(f"delay_kind must be one of {DELAY_KINDS}, got {cfg.delay_kind!r}")
    nd, ns, T, G = len(delays), len(seeds), cfg.T, cfg.G
    B = nd * ns
    d_row = np.repeat(np.asarray(delays), ns)
    rngs = [np.random.default_rng([s, d]) for d in delays for s in seeds]
    rngs_mc = [np.random.default_rng([s, d, 1]) for d in delays for s in seeds]
    theta = np.broadcast_to(theta0, (B,) + theta0.shape).copy()
    hist = ParameterHistory(theta, T + 1)
    opt = Optimizer(cfg.optimizer_config(), theta)
    rec = {k: np.full((B, T), np.nan) for k in RECORDS}
    diverged = np.full(B, -1)
    alive = np.ones(B, dtype=bool)
    shape1 = (B,) + (1,) * theta0.ndim
    for t in range(T):
        if cfg.delay_kind == "fixed":
            lags = d_row
        else:
            lags = np.array([rng.integers(0, d + 1) for rng, d in zip(rngs, d_row)])
        theta_b = hist.lagged(lags)
        tokens = np.stack([env.sample_tokens(rng, tb, (1, G)) for rng, tb in zip(rngs, theta_b)])
        g, _, _ = env.group_estimates(tokens, theta, theta_b, cfg.eps, [cfg.estimator], cfg.advantage)
        ghat = g[cfg.estimator][:, 0]
        gn = np.sqrt(_norm2(ghat))
        newly = alive & ~np.isfinite(gn)
        diverged[newly] = t
        alive &= ~newly
        sigma2, mu4 = env.ratio_moments_batch(theta, theta_b)
        vals = {
            "J": env.J_batch(theta),
            "grad_sq": _norm2(env.grad_J_batch(theta)),
            "sigma2": sigma2,
            "mu4": mu4,
            "drift": np.sqrt(_norm2(theta - theta_b)),
            "lag": lags.astype(float),
            "ghat_norm": gn,
            "M": env.score_bound(theta),
        }
        if cfg.record_bias and t % bias_every == 0:
            vals["bias_sq"], vals["mass_bias"], vals["bias_var"] = step_bias(env, theta, theta_b, cfg, rngs_mc, n_mc)
        for k, v in vals.items():
            rec[k][alive, t] = np.asarray(v)[alive]
        step = np.where(alive.reshape(shape1), np.nan_to_num(ghat), 0.0)
        new = np.where(alive.reshape(shape1), opt.step(theta, step), theta)
        rec["step_norm"][alive, t] = np.sqrt(_norm2(new - theta))[alive]
        theta = new
        hist.append(theta)
    out = {k: v.reshape(nd, ns, T) for k, v in rec.items()}
    out["diverged_at"] = diverged.reshape(nd, ns)
    out["theta_T"] = theta.reshape((nd, ns) + theta0.shape)
    return out


__all__ = ["RECORDS", "async_factorised", "step_bias"]
