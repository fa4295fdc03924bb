"""Controlled delay: static (theta_b = theta - Delta u) and dynamic (asynchronous SGD).

The delay is a parameter history, never an ``if`` inside an environment (STYLE.md): the
asynchronous learner of THEORY §1 holds theta_t and receives a group drawn from
``pi_{theta_{t - d_t}}``, with ``d_t = d`` (``fixed``) or ``d_t ~ U{0..d}`` (``uniform``);
ratios and scores are evaluated at theta_t and ``theta_{t+1} = theta_t + eta g_hat_t`` (SGD, the
default), or one step of Adam, Adam with the gradient norm clipped, or AdamW with clipping
(:mod:`simulators.optim`; ``eta`` is then its learning rate).
Each step records, per run, the exact bias ``b_t`` at ``(theta_t, theta_{t-d_t})`` (by
enumeration, or the single-outcome sums of per-sample schemes), the realised
``sigma_t^2`` and ``mu_{4,t}``, ``||grad J(theta_t)||^2``, the estimate's norm, the step norm
``||theta_{t+1} - theta_t||`` and more (claim 17).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from estimators import get_scheme

from ._validate import check_eps, check_G, check_positive_int, finite_array
from .core import (
    PER_SAMPLE_SCHEMES,
    bound_M,
    exact_batch,
    expand_counts,
    group_terms,
    per_sample_batch,
    ratio_moments,
)
from .optim import Optimizer, OptimizerConfig

DELAY_KINDS = ("fixed", "uniform")


def static_behaviour(theta, delta: float, direction):
    """theta_b = theta - Delta u with u = direction / ||direction|| (a static delay of size Delta)."""
    theta = finite_array(theta, "theta")
    u = finite_array(direction, "direction")
    if u.shape != theta.shape:
        raise ValueError(f"direction must have the shape of theta {theta.shape}, got {u.shape}")
    norm = np.linalg.norm(u)
    if norm == 0:
        raise ValueError("direction must be non-zero")
    delta = float(delta)
    if not np.isfinite(delta) or delta < 0:
        raise ValueError(f"Delta must be a finite number >= 0, got {delta!r}")
    return theta - delta * u / norm


class ParameterHistory:
    """theta_0..theta_t of B runs; :meth:`lagged` returns theta_{max(t - lag, 0)} per run."""

    def __init__(self, theta0: np.ndarray, capacity: int):
        self._hist = np.empty((capacity,) + theta0.shape)
        self._hist[0] = theta0
        self.t = 0

    def append(self, theta):
        self.t += 1
        self._hist[self.t] = theta

    def lagged(self, lags: np.ndarray) -> np.ndarray:
        idx = np.maximum(self.t - np.asarray(lags), 0)
        return self._hist[idx, np.arange(self._hist.shape[1])]


@dataclass(frozen=True)
class AsyncConfig:
    """One asynchronous SGD setting (THEORY §1, §4)."""

    estimator: str  # a trajectory scheme of estimators.SCHEMES
    G: int  # G, group size
    eps: float  # eps, cap 1 + eps
    eta: float  # eta, step size (the optimiser's learning rate)
    T: int  # T, number of steps
    delay_kind: str = "fixed"  # d_t = d ("fixed") or d_t ~ U{0..d} ("uniform")
    advantage: str = "loo"  # advantage kind (leave-one-out for every theory check)
    record_bias: bool = True  # compute the exact bias b_t at every step
    optimizer: str = "sgd"  # simulators.optim.OPTIMIZERS
    clip_norm: float = 1.0  # max ||g_hat|| per run for the *_clip optimisers
    weight_decay: float = 0.01  # AdamW's decoupled weight decay

    def __post_init__(self):
        self.optimizer_config()
        get_scheme(self.estimator)
        check_G(self.G)
        check_eps(self.eps)
        check_positive_int(self.T, "T")
        if not (np.isfinite(self.eta) and self.eta > 0):
            raise ValueError(f"eta must be > 0, got {self.eta!r}")
        if self.delay_kind not in DELAY_KINDS:
            raise ValueError(f"delay_kind must be one of {DELAY_KINDS}, got {self.delay_kind!r}")

    def as_dict(self):
        return asdict(self)

    def optimizer_config(self) -> OptimizerConfig:
        return OptimizerConfig(self.optimizer, self.eta, self.clip_norm, self.weight_decay)


RECORDS = ("J", "grad_sq", "bias_sq", "mass_bias", "sigma2", "mu4", "drift", "lag", "ghat_norm", "M", "step_norm")


def _exact_bias(lr, lpb, rew, S, cfg: AsyncConfig):
    if cfg.estimator in PER_SAMPLE_SCHEMES and cfg.advantage == "loo":
        r = per_sample_batch(lr, lpb, rew, S, cfg.G, cfg.eps, cfg.estimator)
    else:
        r = exact_batch(lr, lpb, rew, S, cfg.G, cfg.eps, [cfg.estimator], cfg.advantage, second=False)[cfg.estimator]
    return (r["bias"] ** 2).sum(-1), r["mass_bias"]


def async_sgd(env, theta0, cfg: AsyncConfig, seeds, delays) -> dict:
    """Asynchronous SGD on a single-prompt finite-outcome environment (E1 or E2).

    Runs every (delay d, seed) pair at once, vectorised over runs; run (d, seed) owns a
    generator seeded by ``(seed, d)``, so its path does not depend on the other runs and
    two schemes with the same seed are paired.

    Returns arrays of shape ``(len(delays), len(seeds), T)`` for each of :data:`RECORDS`
    (``bias_sq`` and ``mass_bias`` are NaN when ``record_bias`` is off), ``diverged_at``
    ``(len(delays), len(seeds))`` (first step with a non-finite estimate, -1 if none; the
    run is frozen there and later records are NaN), and ``theta_T``.
    """
    theta0 = env.check_theta(theta0, "theta0")
    seeds = [check_positive_int(s, "seed", 0) for s in seeds]
    delays = [check_positive_int(d, "delay d", 0) for d in delays]
    nd, ns, T, G = len(delays), len(seeds), cfg.T, cfg.G
    B = nd * ns
    d_row = np.repeat(np.asarray(delays), ns)
    rngs = [np.random.default_rng([s, d]) for d in delays for s in seeds]
    theta = np.broadcast_to(theta0, (B,) + theta0.shape).copy()
    hist = ParameterHistory(theta, T + 1)
    opt = Optimizer(cfg.optimizer_config(), theta)
    rec = {k: np.full((B, T), np.nan) for k in RECORDS}
    diverged = np.full(B, -1)
    alive = np.ones(B, dtype=bool)
    for t in range(T):
        if cfg.delay_kind == "fixed":
            lags = d_row
        else:
            lags = np.array([rng.integers(0, d + 1) for rng, d in zip(rngs, d_row)])
        theta_b = hist.lagged(lags)
        lr, lpb, rew, S = env.batch_arrays(theta, theta_b)
        p_b = np.exp(lpb)
        counts = np.stack([rng.multinomial(G, p / p.sum()) for rng, p in zip(rngs, p_b)])
        terms = group_terms(expand_counts(counts)[:, None, :], lr, rew, cfg.eps, [cfg.estimator], cfg.advantage,
                            with_gap=False)
        ghat = np.einsum("bk,bkp->bp", terms.coef(cfg.estimator)[:, 0], S) / G
        gn = np.sqrt((ghat**2).sum(-1))
        newly = alive & ~np.isfinite(gn)
        diverged[newly] = t
        alive &= ~newly
        sigma2, mu4 = ratio_moments(lr, lpb)
        vals = {
            "J": env.J(theta),
            "grad_sq": (env.grad_J(theta).reshape(B, -1) ** 2).sum(-1),
            "sigma2": sigma2,
            "mu4": mu4,
            "drift": np.sqrt(((theta - theta_b).reshape(B, -1) ** 2).sum(-1)),
            "lag": lags.astype(float),
            "ghat_norm": gn,
            "M": bound_M(rew, S),
        }
        if cfg.record_bias:
            vals["bias_sq"], vals["mass_bias"] = _exact_bias(lr, lpb, rew, S, cfg)
        for k, v in vals.items():
            rec[k][alive, t] = np.asarray(v)[alive]
        step = np.where(alive[:, None], ghat, 0.0).reshape(theta.shape)
        new = opt.step(theta, step)
        if cfg.optimizer != "sgd":  # a frozen run stays put (its moments would still move it)
            new = np.where(alive.reshape((B,) + (1,) * theta0.ndim), new, theta)
        rec["step_norm"][alive, t] = np.sqrt(((new - theta).reshape(B, -1) ** 2).sum(-1))[alive]
        theta = new
        hist.append(theta)
    out = {k: v.reshape(nd, ns, T) for k, v in rec.items()}
    out["diverged_at"] = diverged.reshape(nd, ns)
    out["theta_T"] = theta.reshape((nd, ns) + theta0.shape)
    return out
