"""The asynchronous experiment across optimisers and horizons (claim 19), as data.

``python -m simulators.sweep async_optimizers [--quick]``. One setting per (horizon H, scheme);
each setting trains every optimiser of :mod:`simulators.optim` on the long-horizon factorised
token MDP (:mod:`simulators.token_mdp.factorised`: V = 2, reward 1{every token right}, theta_0
with the right token at probability ``p0`` at every position, so ``J(theta_0) = p0^H``: a longer
sequence starts rarer, and the same per-token drift gives a larger trajectory chi^2, claim 18) for
every delay and seed (paired: seed s has the same generators under every scheme and optimiser), with
:func:`simulators.async_factorised.async_factorised`.

The clipped optimisers clip at ``clip``: a number, or ``"quantile:q"``, the q-quantile of the
non-zero gradient-estimate norms ``||g_hat_t||`` of the same setting's unclipped Adam runs
(every delay, seed and step; a group without a reward has ``g_hat = 0`` and is left out), so
that clipping binds on about a share 1 - q of the updates whatever the scale of ``||g_hat||``.

A run *collapses* when its final J is below ``collapse_frac * J(theta_0)`` (it ended below its
start by more than the stated margin, a relative ``1 - collapse_frac``).
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

import estimators

from . import theory
from .async_factorised import async_factorised
from .core import PER_SAMPLE_SCHEMES
from .delay import AsyncConfig
from .optim import clip_at_quantile
from .sweep_spec import Sweep
from .token_mdp.factorised import FactorisedTokenMDP, start_logits

BASE_SCHEMES = ["gmc", "is", "tic_mask", "tic_trunc", "topr", "snis", "stale"]
GMC_VARIANTS = ["gmc_cap", "gmc_topr", "topr_gmc"]


def scheme_list() -> list[str]:
    """The base schemes, and the GMC variants of the mechanism study that are registered."""
    return BASE_SCHEMES + [s for s in GMC_VARIANTS if s in estimators.SCHEMES]


OPTIMIZERS = {  # name: step size (and what clips)
    "sgd": {"lr": 2.0},
    "adam": {"lr": 0.1},
    "adam_clip": {"lr": 0.1},
    "adamw_clip": {"lr": 0.1},
}


def parse_clip(clip) -> tuple[str, float]:
    """``("norm", c)`` for a number, ``("quantile", q)`` for ``"quantile:q"``."""
    if isinstance(clip, str) and clip.startswith("quantile:"):
        q = float(clip.split(":", 1)[1])
        if not 0 < q <= 1:
            raise ValueError(f"clip quantile must be in (0, 1], got {clip!r}")
        return "quantile", q
    try:
        c = float(clip)
    except (TypeError, ValueError):
        raise ValueError(f"clip must be a number or 'quantile:q', got {clip!r}") from None
    if not (np.isfinite(c) and c > 0):
        raise ValueError(f"clip norm must be > 0, got {clip!r}")
    return "norm", c


def run_setting(setting: dict, seeds: list[int]):
    """Every optimiser of ``setting["optimizers"]`` for one (H, scheme): (summary rows, step rows)."""
    H, V, estimator = int(setting["H"]), int(setting["V"]), setting["scheme"]
    env = FactorisedTokenMDP(V, H)
    theta0 = start_logits(V, H, setting["p0"])
    J0 = float(env.J_batch(theta0[None])[0])
    delays = list(setting["delays"])
    mode, clip_value = parse_clip(setting["clip"])
    order = sorted(setting["optimizers"], key=lambda o: (o.endswith("_clip"), o))  # unclipped Adam first
    if mode == "quantile" and any(o.endswith("_clip") for o in order) and "adam" not in order:
        raise ValueError("a quantile clip needs the unclipped 'adam' runs in the same setting")
    rows, steps, adam_norms = [], [], None
    for opt in order:
        clip = 1.0
        if opt.endswith("_clip"):
            clip = clip_value if mode == "norm" else clip_at_quantile(adam_norms, clip_value)
        cfg = AsyncConfig(estimator, int(setting["G"]), float(setting["eps"]), float(setting["optimizers"][opt]["lr"]),
                          int(setting["T"]), optimizer=opt, clip_norm=clip)
        rec = async_factorised(env, theta0, cfg, seeds, delays, n_mc=int(setting["n_mc"]),
                               bias_every=int(setting["bias_every"]))
        if opt == "adam":
            adam_norms = rec["ghat_norm"]
        rows.append(summary(cfg, rec, delays, seeds, J0, setting["collapse_frac"]).assign(optimizer=opt,
                                                                                          clip_norm=clip))
        steps.append(step_means(cfg, rec, delays).assign(optimizer=opt))
    return pd.concat(rows, ignore_index=True), pd.concat(steps, ignore_index=True)


def summary(cfg: AsyncConfig, rec: dict, delays, seeds, J0: float, collapse_frac: float) -> pd.DataFrame:
    """One row per (d, seed): the run's averages over steps (module docstring, :data:`COLUMNS`)."""
    out = []
    exact = cfg.estimator in PER_SAMPLE_SCHEMES  # IS included: its bias is 0 exactly
    with np.errstate(invalid="ignore"):
        for i, d in enumerate(delays):
            for j, seed in enumerate(seeds):
                r = {k: v[i, j] for k, v in rec.items() if k not in ("diverged_at", "theta_T")}
                ok = np.isfinite(r["grad_sq"])
                b = np.isfinite(r["bias_sq"]) & ok
                J = r["J"][ok]
                bound = r["M"][b] * theory.mass_bound(cfg.estimator, r["sigma2"][b], r["mu4"][b], cfg.G, cfg.eps)
                viol = np.sqrt(np.maximum(r["bias_sq"][b], 0)) > bound * (1 + theory.FP_SLACK) + 1e-15
                out.append({
                    "d": d, "seed": seed, "scheme": cfg.estimator, "lr": cfg.eta,
                    "avg_grad_sq": float(np.mean(r["grad_sq"][ok])),
                    "final_J": float(J[-1]), "min_J": float(J.min()), "J0": J0,
                    "collapsed": bool(J[-1] < collapse_frac * J0),
                    "avg_bias_sq": float(np.mean(r["bias_sq"][b])),
                    "avg_mass_bias": float(np.mean(r["mass_bias"][b])),
                    "bias_exact": bool(exact),
                    "step_bound_violations": int(viol.sum()) if exact and np.isfinite(bound).all() else -1,
                    "avg_ghat_sq": float(np.mean(r["ghat_norm"][ok] ** 2)),
                    "max_ghat_norm": float(np.max(r["ghat_norm"][ok])),
                    "avg_step_norm": float(np.mean(r["step_norm"][ok])),
                    "avg_sigma2": float(np.mean(r["sigma2"][ok])), "avg_mu4": float(np.mean(r["mu4"][ok])),
                    "max_drift": float(np.max(r["drift"][ok])),
                    "diverged_at": int(rec["diverged_at"][i, j]),
                })
    return pd.DataFrame(out)


STEP_RECORDS = ("J", "grad_sq", "bias_sq", "mass_bias", "sigma2", "mu4", "drift", "ghat_norm", "step_norm")


def step_means(cfg: AsyncConfig, rec: dict, delays) -> pd.DataFrame:
    """Per (d, step): the mean over seeds of each of :data:`STEP_RECORDS` (and ``ghat_sq``), with ``*_se``."""
    frames = []
    for i, d in enumerate(delays):
        df = {"d": d, "step": np.arange(cfg.T), "scheme": cfg.estimator}
        vals = {k: rec[k][i] for k in STEP_RECORDS}
        vals["ghat_sq"] = rec["ghat_norm"][i] ** 2
        for k, x in vals.items():
            cnt = np.isfinite(x).sum(0)
            with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN steps (no bias record there)
                df[k] = np.nanmean(x, 0)
                df[k + "_se"] = np.where(cnt > 1, np.nanstd(x, 0, ddof=1) / np.sqrt(cnt), np.nan)
        frames.append(pd.DataFrame(df))
    return pd.concat(frames, ignore_index=True)


_FIXED = {"V": 2, "G": 8, "eps": 0.2, "p0": 0.8, "T": 200, "delays": [0, 4, 16, 64], "optimizers": OPTIMIZERS,
          "clip": "quantile:0.5", "n_mc": 128, "bias_every": 10, "collapse_frac": 0.5}

SETTINGS = {
    "async_optimizers": {
        "full": {"grid": {"H": [4, 8, 16], "scheme": scheme_list()}, "fixed": _FIXED, "seeds": list(range(20))},
        "quick": {"grid": {"H": [3, 6], "scheme": ["gmc", "tic_trunc", "topr", "snis"]},
                  "fixed": {**_FIXED, "T": 30, "delays": [0, 4], "n_mc": 16, "bias_every": 5}, "seeds": [0, 1]},
    },
}

COLUMNS = {
    "H": "horizon (tokens per sequence; V^H outcomes)", "scheme": "weighting scheme",
    "optimizer": "sgd, adam, adam_clip or adamw_clip (simulators.optim)", "lr": "the optimiser's step size",
    "clip_norm": "clip norm of the *_clip optimisers (the 'clip' setting resolved; 1.0 where unused)",
    "d": "rollout delay (fixed d_t = d)", "seed": "run seed (paired across schemes and optimisers)",
    "avg_grad_sq": "(1/T) sum_t ||grad J(theta_t)||^2 (exact)", "final_J": "J(theta_{T-1}) (exact)",
    "min_J": "min_t J(theta_t)", "J0": "J(theta_0) = p0^H", "p0": "the right token's probability at theta_0",
    "collapsed": "final_J < collapse_frac * J0",
    "avg_bias_sq": "mean over recorded steps of ||b_t||^2 (exact if bias_exact, else the unbiased Monte Carlo "
                   "estimate from n_mc groups)",
    "avg_mass_bias": "mean over recorded steps of the mass bias m_t", "bias_exact": "b_t by enumeration (True) or MC",
    "step_bound_violations": "recorded steps with ||b_t|| > M_t m-bound (bounds.mass_bound, tight); -1: none or MC",
    "avg_ghat_sq": "(1/T) sum_t ||g_hat_t||^2 (the realised second moment along the run)",
    "max_ghat_norm": "max_t ||g_hat_t||", "avg_step_norm": "(1/T) sum_t ||theta_{t+1} - theta_t||",
    "avg_sigma2": "mean_t chi^2 of the trajectory ratio (exact)", "avg_mu4": "mean_t mu_4 (exact)",
    "max_drift": "max_t ||theta_t - theta_{t-d}||", "diverged_at": "first non-finite step (-1: none)",
    "steps.parquet": "per (setting, optimizer, d, step): seed means of J, grad_sq, bias_sq, mass_bias, sigma2, mu4, "
                     "drift, ghat_norm, step_norm, ghat_sq and their *_se (bias: every bias_every steps)",
}

SWEEPS = [
    Sweep("async_optimizers", "E2 long horizons: asynchronous SGD, Adam, Adam + clip, AdamW + clip against the delay "
          "and the horizon (claim 19)", SETTINGS["async_optimizers"], run_setting, COLUMNS),
]
